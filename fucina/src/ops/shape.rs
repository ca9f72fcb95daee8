//! Views and layout ops: permute, rename, narrow, split, reshape, contiguous, concat.

use super::{contiguous_f32, finish, float_slice, inverse, perm_to, pos, unpermute};
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::tensor::axes::{Axes, Axis, CanRename, HasAxes, PermuteTo};
use crate::tensor::RawTensor;
use crate::tensor::Tensor;

impl<A: Axes> Tensor<A> {
    /// Reorders the axes into the layout `B` (same axes, any order); zero-copy.
    pub fn permute<B: Axes>(&self) -> Result<Tensor<B>>
    where
        A: PermuteTo<B>,
    {
        let perm = perm_to(&A::names(), &B::names());
        let y = self.raw().with_layout(self.raw().layout().permuted(&perm))?;
        let back = inverse(&perm);
        Tensor::from_raw(record(y, &[self.raw()], move || {
            Box::new(move |g: &RawTensor| Ok(vec![Some(g.with_layout(g.layout().permuted(&back))?)]))
        }))
    }

    /// Renames axis `X` to `Y` (which the tensor must not have); zero-copy.
    pub fn rename<X: Axis, Y: Axis>(&self) -> Result<Tensor<<A as CanRename<X, Y>>::Out>>
    where
        A: CanRename<X, Y>,
    {
        let y = self.raw().detached();
        Tensor::from_raw(record(y, &[self.raw()], || Box::new(|g: &RawTensor| Ok(vec![Some(g.clone())]))))
    }

    /// The elements `start..start+len` of axis `X`; zero-copy.
    pub fn narrow<X: Axis>(&self, start: usize, len: usize) -> Result<Tensor<A>>
    where
        A: HasAxes<X>,
    {
        let d = pos(&A::names(), X::NAME);
        let l = self.raw().layout().narrowed(d, start, len, X::NAME)?;
        let y = self.raw().with_layout(l)?;
        let full = self.shape().to_vec();
        Tensor::from_raw(record(y, &[self.raw()], move || {
            Box::new(move |g: &RawTensor| Ok(vec![Some(unnarrow(&ExecContext::current(), g, &full, d, start)?)]))
        }))
    }

    /// Splits axis `X` into consecutive pieces of the given sizes (views).
    pub fn split<X: Axis>(&self, sizes: &[usize]) -> Result<Vec<Tensor<A>>>
    where
        A: HasAxes<X>,
    {
        let total: usize = sizes.iter().sum();
        let have = self.size::<X>();
        if total != have {
            return Err(FucinaError::ShapeMismatch { axis: X::NAME.to_string(), left: have, right: total });
        }
        let mut start = 0;
        let mut out = Vec::with_capacity(sizes.len());
        for s in sizes {
            out.push(self.narrow::<X>(start, *s)?);
            start += s;
        }
        Ok(out)
    }

    /// Splits axis `X` into `n` equal pieces.
    pub fn chunk<X: Axis>(&self, n: usize) -> Result<Vec<Tensor<A>>>
    where
        A: HasAxes<X>,
    {
        let have = self.size::<X>();
        if n == 0 || !have.is_multiple_of(n) {
            return Err(FucinaError::InvalidArgument {
                op: "chunk",
                msg: format!("axis `{}` of size {have} does not split into {n} equal pieces", X::NAME),
            });
        }
        self.split::<X>(&vec![have / n; n])
    }

    /// The same elements under new axes `B` and sizes; zero-copy when contiguous, else copies.
    ///
    /// The escape hatch: the compiler checks nothing about how `B` relates to this tensor's
    /// axes (only the element count is checked, at run time). Prefer the typed forms, which
    /// the library's models use exclusively: [`Tensor::split_axis`] / [`Tensor::merge_axes`]
    /// to split or merge named axes, [`Tensor::unsqueeze`] / [`Tensor::squeeze`] /
    /// [`Tensor::broadcast_to`] to add or drop axes of size 1, [`Tensor::rename`] to rename.
    pub fn reshape<B: Axes>(&self, shape: &[usize]) -> Result<Tensor<B>> {
        let n: usize = shape.iter().product();
        if n != self.numel() {
            return Err(FucinaError::ElementCount { shape: shape.to_vec(), expected: n, got: self.numel() });
        }
        let base = if self.is_contiguous() { self.clone() } else { self.contiguous()? };
        let l = base.raw().layout().reshaped(shape)?;
        let y = base.raw().with_layout(l)?;
        let orig = self.shape().to_vec();
        Tensor::from_raw(record(y, &[base.raw()], move || {
            Box::new(move |g: &RawTensor| {
                let ctx = ExecContext::current();
                let gc = if g.is_contiguous() {
                    g.clone()
                } else {
                    ctx.wrap_f32(contiguous_f32(&ctx, g, "reshape")?.to_vec(), g.shape())?
                };
                Ok(vec![Some(gc.with_layout(gc.layout().reshaped(&orig)?)?)])
            })
        }))
    }

    /// A dense row-major copy (or `self` if already dense).
    pub fn contiguous(&self) -> Result<Tensor<A>> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        let ctx = ExecContext::current();
        let data = contiguous_f32(&ctx, self.raw(), "contiguous")?.to_vec();
        let y = finish(&ctx, data, self.shape(), self.dtype())?;
        Tensor::from_raw(record(y, &[self.raw()], || Box::new(|g: &RawTensor| Ok(vec![Some(g.clone())]))))
    }

    /// Joins tensors along axis `X`; all other sizes must agree.
    pub fn concat<X: Axis>(parts: &[&Tensor<A>]) -> Result<Tensor<A>>
    where
        A: HasAxes<X>,
    {
        let first = parts.first().ok_or(FucinaError::InvalidArgument { op: "concat", msg: "no tensors".into() })?;
        let names = A::names();
        let d = pos(&names, X::NAME);
        for p in parts.iter().skip(1) {
            for (i, n) in names.iter().enumerate() {
                if i != d && p.shape()[i] != first.shape()[i] {
                    return Err(FucinaError::ShapeMismatch {
                        axis: n.to_string(),
                        left: first.shape()[i],
                        right: p.shape()[i],
                    });
                }
            }
            if !p.dtype().is_float() {
                return Err(FucinaError::UnsupportedDType { op: "concat", dtype: p.dtype() });
            }
        }
        let ctx = ExecContext::current();
        let raws: Vec<&RawTensor> = parts.iter().map(|p| p.raw()).collect();
        let y = concat_raw(&ctx, &raws, d)?;
        let sizes: Vec<usize> = parts.iter().map(|p| p.shape()[d]).collect();
        Tensor::from_raw(record(y, &raws, move || {
            Box::new(move |g: &RawTensor| {
                let mut at = 0;
                let mut out = Vec::with_capacity(sizes.len());
                for s in &sizes {
                    out.push(Some(g.with_layout(g.layout().narrowed(d, at, *s, "concat")?)?));
                    at += s;
                }
                Ok(out)
            })
        }))
    }
}

/// The gradient of a narrowed view: `g` placed at `start` along axis `d` of a tensor of
/// shape `full`, zeros elsewhere. One pooled buffer laid out with `d` leading (as
/// [`concat_raw`] lays out its result): only the elements outside the slice are zeroed.
fn unnarrow(ctx: &ExecContext, g: &RawTensor, full: &[usize], d: usize, start: usize) -> Result<RawTensor> {
    let rank = full.len();
    let mut perm = vec![d];
    perm.extend((0..rank).filter(|i| *i != d));
    let total: usize = full.iter().product();
    let inner = total.checked_div(full[d]).unwrap_or(0);
    let (lo, hi) = (start * inner, start * inner + g.numel());
    let mut out = ctx.alloc(total);
    out[..lo].fill(0.0);
    out[hi..].fill(0.0);
    let l = g.layout().permuted(&perm);
    let src = float_slice(g, "narrow backward")?;
    ctx.run(g.numel(), |k| k.copy_strided(src, l.offset(), l.shape(), l.strides(), &mut out[lo..hi]));
    let shape: Vec<usize> = perm.iter().map(|&i| full[i]).collect();
    let res = finish(ctx, out, &shape, g.dtype())?;
    unpermute(res, &perm)
}

/// Joins raw tensors along axis `d` (other sizes already checked equal).
pub(crate) fn concat_raw(ctx: &ExecContext, parts: &[&RawTensor], d: usize) -> Result<RawTensor> {
    let first = parts.first().ok_or(FucinaError::InvalidArgument { op: "concat", msg: "no tensors".into() })?;
    let rank = first.shape().len();
    // Work with axis d leading, where concatenation is appending.
    let mut perm = vec![d];
    perm.extend((0..rank).filter(|i| *i != d));
    let total: usize = parts.iter().map(|p| p.numel()).sum();
    let mut out = ctx.alloc(total);
    let mut at = 0;
    let mut dtype = first.dtype();
    for p in parts {
        dtype = dtype.promote(p.dtype());
        let l = p.layout().permuted(&perm);
        let src = float_slice(p, "concat")?;
        let dst = &mut out[at..at + p.numel()];
        ctx.run(p.numel(), |k| k.copy_strided(src, l.offset(), l.shape(), l.strides(), dst));
        at += p.numel();
    }
    let mut shape: Vec<usize> = perm.iter().map(|&i| first.shape()[i]).collect();
    shape[0] = parts.iter().map(|p| p.shape()[d]).sum();
    let res = finish(ctx, out, &shape, dtype)?;
    unpermute(res, &perm)
}
