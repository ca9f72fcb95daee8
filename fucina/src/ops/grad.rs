//! Helpers the ops' backward functions are written with: raw (untyped, named) versions of
//! the ops, and the broadcasting rules run backwards (sum over broadcast axes, expand).

use super::elementwise::{binary_raw, broadcast_strides};
use super::{finish, float_slice, perm_to, reduce_raw};
use crate::backend::{BinaryOp, ReduceOp};
use crate::error::Result;
use crate::exec::ExecContext;
use crate::tensor::RawTensor;

/// Names for positional (same-shape) arithmetic.
const POSITIONAL: [&str; 16] =
    ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10", "p11", "p12", "p13", "p14", "p15"];

pub(crate) fn positional(rank: usize) -> &'static [&'static str] {
    &POSITIONAL[..rank.min(16)]
}

/// `a + b` for tensors of the same shape (gradient accumulation).
pub fn add_same(ctx: &ExecContext, a: &RawTensor, b: &RawTensor) -> Result<RawTensor> {
    let n = positional(a.shape().len());
    binary_raw(ctx, BinaryOp::Add, a, n, b, n)
}

/// Sums `g` (axes `gn`) over the axes `target` lacks and orders it like `target`.
pub(crate) fn unbroadcast(
    ctx: &ExecContext,
    g: &RawTensor,
    gn: &[&'static str],
    target: &[&'static str],
) -> Result<RawTensor> {
    let extra: Vec<&'static str> = gn.iter().copied().filter(|n| !target.contains(n)).collect();
    let (r, kept) = if extra.is_empty() {
        (g.clone(), gn.to_vec())
    } else {
        let kept: Vec<&'static str> = gn.iter().copied().filter(|n| target.contains(n)).collect();
        (reduce_raw(ctx, ReduceOp::Sum, g, gn, &extra)?.0, kept)
    };
    let perm = perm_to(&kept, target);
    if perm.iter().enumerate().all(|(i, p)| i == *p) {
        return Ok(r);
    }
    r.with_layout(r.layout().permuted(&perm))
}

/// Broadcasts `g` (axes `gn`, a subset of `target`) to the shape `shape` of `target`, contiguous.
pub(crate) fn expand(
    ctx: &ExecContext,
    g: &RawTensor,
    gn: &[&'static str],
    target: &[&'static str],
    shape: &[usize],
) -> Result<RawTensor> {
    let src = float_slice(g, "expand")?;
    let st = broadcast_strides(target, shape, gn, g.shape(), g.layout().strides())?;
    let n: usize = shape.iter().product();
    let mut out = ctx.alloc(n);
    let off = g.layout().offset();
    ctx.run(n, |k| k.copy_strided(src, off, shape, &st, &mut out));
    finish(ctx, out, shape, g.dtype())
}
