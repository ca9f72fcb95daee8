//! A graph node: an op's backward and its inputs' nodes, or a leaf's gradient.

use crate::error::Result;
use crate::exec::graph::BackwardFn;
use crate::tensor::RawTensor;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// One node of the implicit graph.
pub(crate) struct Node {
    leaf: bool,
    inputs: Mutex<Vec<Option<Arc<Node>>>>,
    backward: Mutex<Option<BackwardFn>>,
    /// Leaves: the accumulated gradient. Op nodes: the gradient arriving during backward.
    grad: Mutex<Option<RawTensor>>,
    /// Consumers whose gradient has not arrived yet (set by the engine before a backward).
    pub(crate) pending: AtomicUsize,
    /// This node's place in the engine's walk from the loss (set before a backward): the
    /// order in which its gradient contributions to its inputs are summed.
    pub(crate) ordinal: AtomicUsize,
    /// Gradient contributions that arrived during a backward, keyed by (consumer ordinal,
    /// input slot), summed in key order once the last one is in.
    parts: Mutex<Vec<((usize, usize), RawTensor)>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned node only means a panic in another backward; its data is still consistent.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Node {
    /// A trainable leaf.
    pub(crate) fn leaf() -> Node {
        Node {
            leaf: true,
            inputs: Mutex::new(Vec::new()),
            backward: Mutex::new(None),
            grad: Mutex::new(None),
            pending: AtomicUsize::new(0),
            ordinal: AtomicUsize::new(0),
            parts: Mutex::new(Vec::new()),
        }
    }

    /// The node of an op.
    pub(crate) fn op(inputs: Vec<Option<Arc<Node>>>, backward: BackwardFn) -> Node {
        Node {
            leaf: false,
            inputs: Mutex::new(inputs),
            backward: Mutex::new(Some(backward)),
            grad: Mutex::new(None),
            pending: AtomicUsize::new(0),
            ordinal: AtomicUsize::new(0),
            parts: Mutex::new(Vec::new()),
        }
    }

    pub(crate) fn is_leaf(&self) -> bool {
        self.leaf
    }

    pub(crate) fn inputs(&self) -> Vec<Option<Arc<Node>>> {
        lock(&self.inputs).clone()
    }

    pub(crate) fn grad(&self) -> Option<RawTensor> {
        lock(&self.grad).clone()
    }

    pub(crate) fn set_grad(&self, g: Option<RawTensor>) {
        *lock(&self.grad) = g;
    }

    pub(crate) fn take_grad(&self) -> Option<RawTensor> {
        lock(&self.grad).take()
    }

    /// Adds `g` to the stored gradient with `add`.
    pub(crate) fn accumulate(
        &self,
        g: RawTensor,
        add: impl FnOnce(&RawTensor, &RawTensor) -> Result<RawTensor>,
    ) -> Result<()> {
        let mut slot = lock(&self.grad);
        *slot = Some(match slot.take() {
            None => g,
            Some(prev) => add(&prev, &g)?,
        });
        Ok(())
    }

    /// Keeps a contribution to this node's gradient until [`Node::flush_parts`].
    pub(crate) fn push_part(&self, key: (usize, usize), g: RawTensor) {
        lock(&self.parts).push((key, g));
    }

    /// Adds the kept contributions to the gradient in key order, so the sum is the same
    /// whatever order the consumers finished in (floating-point addition is not associative).
    pub(crate) fn flush_parts(&self, add: impl Fn(&RawTensor, &RawTensor) -> Result<RawTensor>) -> Result<()> {
        let mut parts = std::mem::take(&mut *lock(&self.parts));
        parts.sort_by_key(|(k, _)| *k);
        for (_, g) in parts {
            self.accumulate(g, &add)?;
        }
        Ok(())
    }

    /// Runs the backward function, if the graph has not been released.
    pub(crate) fn run_backward(&self, g: &RawTensor) -> Option<Result<Vec<Option<RawTensor>>>> {
        lock(&self.backward).as_ref().map(|f| f(g))
    }

    /// Drops the backward function and the input pointers (the scope closed).
    pub(crate) fn release(&self) {
        lock(&self.backward).take();
        lock(&self.inputs).clear();
        lock(&self.grad).take();
        lock(&self.parts).clear();
        self.pending.store(0, Ordering::Relaxed);
    }
}

/// The node of a raw tensor, if it is tracked by this layer.
pub(crate) fn of(t: &RawTensor) -> Option<Arc<Node>> {
    t.node().cloned().and_then(|n| n.downcast::<Node>().ok())
}
