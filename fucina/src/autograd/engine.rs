//! The backward engine: dependency counts, then nodes fire as their counts drain.

use super::node::Node;
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::ops::add_same;
use crate::tensor::RawTensor;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

/// Back-propagates `seed` from `root` to every leaf reachable from it.
pub(crate) fn backward(ctx: &ExecContext, root: Arc<Node>, seed: RawTensor) -> Result<()> {
    // Count, for each reachable node, how many reachable consumers feed it a gradient.
    let mut counts: HashMap<*const Node, usize> = HashMap::new();
    // Each node also gets its place in this walk (the same for the same graph on every
    // run), which orders the sums of its inputs' gradient contributions.
    let mut seen: HashMap<*const Node, Arc<Node>> = HashMap::new();
    let mut stack = vec![root.clone()];
    seen.insert(Arc::as_ptr(&root), root.clone());
    let mut ordinal = 0;
    while let Some(n) = stack.pop() {
        n.ordinal.store(ordinal, Ordering::Relaxed);
        ordinal += 1;
        for inp in n.inputs().into_iter().flatten() {
            let p = Arc::as_ptr(&inp);
            *counts.entry(p).or_insert(0) += 1;
            if let std::collections::hash_map::Entry::Vacant(e) = seen.entry(p) {
                e.insert(inp.clone());
                stack.push(inp);
            }
        }
    }
    for (p, n) in &seen {
        n.pending.store(counts.get(p).copied().unwrap_or(0), Ordering::SeqCst);
    }
    if root.is_leaf() {
        return root.accumulate(seed, |a, b| add_same(ctx, a, b));
    }
    root.set_grad(Some(seed));
    let error: Mutex<Option<FucinaError>> = Mutex::new(None);
    ctx.install(|| rayon::scope(|s| fire(s, ctx, root, &error)));
    match error.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Schedules `n`'s backward; its inputs are scheduled when their counts drain.
fn fire<'s>(s: &rayon::Scope<'s>, ctx: &'s ExecContext, n: Arc<Node>, error: &'s Mutex<Option<FucinaError>>) {
    s.spawn(move |s| {
        let fail = |e: FucinaError| {
            let mut slot = error.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert(e);
        };
        let _current = ctx.enter();
        let Some(g) = n.take_grad() else { return };
        let grads = match n.run_backward(&g) {
            Some(Ok(v)) => v,
            Some(Err(e)) => return fail(e),
            None => {
                return fail(FucinaError::InvalidArgument {
                    op: "backward",
                    msg: "the graph was released: call backward before its exec scope closes".into(),
                })
            }
        };
        let inputs = n.inputs();
        let me = n.ordinal.load(Ordering::Relaxed);
        for (i, inp) in inputs.into_iter().enumerate() {
            let Some(inp) = inp else { continue };
            if let Some(gi) = grads.get(i).cloned().flatten() {
                inp.push_part((me, i), gi);
            }
            if inp.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
                // The last contribution is in: sum them in walk order, then go on.
                if let Err(e) = inp.flush_parts(|a, b| add_same(ctx, a, b)) {
                    fail(e);
                } else if !inp.is_leaf() {
                    fire(s, ctx, inp, error);
                }
            }
        }
    });
}
