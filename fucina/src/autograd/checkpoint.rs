//! Activation checkpointing: a segment of the forward pass that keeps none of its
//! intermediate activations, recomputing them when backward reaches it.

use super::scope::no_grad;
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::tensor::axes::Axes;
use crate::tensor::{RawTensor, Tensor};
use std::sync::Arc;

/// Runs `f(x)` without recording its intermediate results: the graph holds one node for the
/// whole segment, and its backward runs `f` again (from the same input and the same RNG
/// position, so dropout draws the same masks) inside a fresh exec scope, back-propagates
/// through that copy, and hands on the input's gradient. Parameters that `f` uses receive
/// their gradients during that inner pass, exactly as without checkpointing.
///
/// Memory: the segment's activations live only while its backward runs; the price is one
/// more forward of the segment. `f` must be a function of `x` and of tracked parameters
/// (clone a module into the closure: its tensors share their storage and their gradients).
/// The segment's RNG draws are replayed, so it must draw in the same order on every run.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::autograd::checkpoint;
/// let ctx = ExecContext::new(ExecConfig::default())?;
/// let w = Tensor::<axes![hidden]>::from_vec(vec![1.0, 2.0], &[2])?.requires_grad();
/// let x = Tensor::<axes![batch, hidden]>::from_vec(vec![1.0, -1.0, 0.5, 3.0], &[2, 2])?.requires_grad();
/// let scope = ctx.open_exec_scope();
/// let wc = w.clone();
/// let y = checkpoint(&x, move |x| x.mul(&wc)?.tanh())?;
/// assert_eq!(scope.recorded(), 1, "one node for the whole segment");
/// y.sum::<axes![batch, hidden]>()?.backward(&ctx)?;
/// assert!(w.grad().is_some() && x.grad().is_some());
/// # Ok::<(), fucina::FucinaError>(())
/// ```
pub fn checkpoint<A, B, F>(x: &Tensor<A>, f: F) -> Result<Tensor<B>>
where
    A: Axes,
    B: Axes,
    F: Fn(&Tensor<A>) -> Result<Tensor<B>> + Send + Sync + 'static,
{
    let ctx = ExecContext::current();
    let rng_at = ctx.rng_counter();
    let y = no_grad(|| f(&x.detach()))?;
    let f = Arc::new(f);
    let input = x.detach();
    let shape = x.shape().to_vec();
    // The node hangs off `x`; an untracked input gets a throwaway leaf in its place, so the
    // segment's parameters are still reached by backward.
    let anchor = if x.is_tracked() { x.raw().clone() } else { x.detach().requires_grad().into_raw() };
    let out = record(y.raw().detached(), &[&anchor], move || {
        Box::new(move |g: &RawTensor| {
            let ctx = ExecContext::current();
            // Replay the segment from where its forward started drawing random numbers.
            let resume = ctx.rng_counter();
            ctx.set_rng_counter(rng_at);
            let replay = (|| {
                let x = input.clone().requires_grad();
                let scope = ctx.open_exec_scope();
                let y = f(&x)?;
                ctx.set_rng_counter(resume);
                if !y.is_tracked() {
                    // Nothing in the segment depends on anything tracked.
                    return Ok(vec![None]);
                }
                let g = Tensor::<B>::from_raw(g.clone())?;
                y.backward_with(&ctx, &g)?;
                drop(scope);
                let dx = x.grad().map(|t| t.into_raw());
                if dx.as_ref().is_some_and(|d| d.shape() != shape.as_slice()) {
                    return Err(FucinaError::InvalidView("checkpoint: the input's gradient changed shape".into()));
                }
                Ok(vec![dx])
            })();
            ctx.set_rng_counter(resume);
            replay
        })
    });
    Tensor::from_raw(out)
}
