//! Order-based ops along a named axis: arg-max/arg-min, top-k, running sums.

use super::{contiguous_f32, finish, pos};
use crate::backend::{ArgOp, Scan};
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::storage::Buffer;
use crate::tensor::axes::{Axes, Axis, CanReduce, HasAxes};
use crate::tensor::{RawTensor, Tensor};

/// `(outer, len, inner)` of a tensor's shape around the axis at `d`.
fn split_at_axis(shape: &[usize], d: usize) -> (usize, usize, usize) {
    (shape[..d].iter().product(), shape[d], shape[d + 1..].iter().product())
}

fn float_input(t: &RawTensor, op: &'static str) -> Result<()> {
    if t.dtype().is_float() {
        Ok(())
    } else {
        Err(FucinaError::UnsupportedDType { op, dtype: t.dtype() })
    }
}

fn arg_reduce<A: Axes, X: Axis>(t: &Tensor<A>, op: ArgOp, name: &'static str) -> Result<RawTensor> {
    float_input(t.raw(), name)?;
    let ctx = ExecContext::current();
    let d = pos(&A::names(), X::NAME);
    let (outer, len, inner) = split_at_axis(t.shape(), d);
    if len == 0 {
        return Err(FucinaError::InvalidArgument { op: name, msg: format!("axis `{}` is empty", X::NAME) });
    }
    let x = contiguous_f32(&ctx, t.raw(), name)?;
    let mut out = vec![0u32; outer * inner];
    ctx.run(x.len(), |k| k.arg_reduce(op, &x, outer, len, inner, &mut out));
    let mut shape = t.shape().to_vec();
    shape.remove(d);
    RawTensor::from_buffer(Buffer::U32(out), &shape)
}

fn cumsum_raw(ctx: &ExecContext, t: &RawTensor, d: usize, dir: Scan) -> Result<RawTensor> {
    let (outer, len, inner) = split_at_axis(t.shape(), d);
    let x = contiguous_f32(ctx, t, "cumsum")?;
    let mut out = ctx.alloc(x.len());
    ctx.run(x.len(), |k| k.cumsum(dir, &x, outer, len, inner, &mut out));
    finish(ctx, out, t.shape(), t.dtype())
}

impl<A: Axes> Tensor<A> {
    /// The index along `X` of the largest element of each line (u32, axis `X` removed): the
    /// first among equals, the first NaN if there is one (as `torch.argmax`).
    ///
    /// ```
    /// use fucina::prelude::*;
    /// let x = Tensor::<axes![batch, vocab]>::from_vec(vec![0.1f32, 2.0, 2.0, -1.0, -3.0, 0.0], &[2, 3])?;
    /// let ids: Tensor<axes![batch]> = x.argmax::<vocab>()?;
    /// assert_eq!(ids.raw().to_vec::<u32>()?, vec![1, 2]);
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn argmax<X: Axis>(&self) -> Result<Tensor<<A as CanReduce<X>>::Out>>
    where
        A: CanReduce<X>,
    {
        Tensor::from_raw(arg_reduce::<A, X>(self, ArgOp::Max, "argmax")?)
    }

    /// The index along `X` of the smallest element of each line (u32, axis `X` removed); the
    /// first among equals, the first NaN if there is one (as `torch.argmin`).
    pub fn argmin<X: Axis>(&self) -> Result<Tensor<<A as CanReduce<X>>::Out>>
    where
        A: CanReduce<X>,
    {
        Tensor::from_raw(arg_reduce::<A, X>(self, ArgOp::Min, "argmin")?)
    }

    /// The `k` largest elements along `X`, largest first, and their indices (u32): axis `X`
    /// has size `k` in both. Equal values keep their order; NaN ranks above every number.
    /// The values are gathered from `self`, so gradients flow back to the chosen elements.
    ///
    /// ```
    /// use fucina::prelude::*;
    /// let x = Tensor::<axes![vocab]>::from_vec(vec![0.5f32, 3.0, -1.0, 2.0], &[4])?;
    /// let (vals, ids) = x.topk::<vocab>(2)?;
    /// assert_eq!(vals.to_f32_vec(), vec![3.0, 2.0]);
    /// assert_eq!(ids.raw().to_vec::<u32>()?, vec![1, 3]);
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn topk<X: Axis>(&self, k: usize) -> Result<(Tensor<A>, Tensor<A>)>
    where
        A: HasAxes<X>,
    {
        float_input(self.raw(), "topk")?;
        let ctx = ExecContext::current();
        let d = pos(&A::names(), X::NAME);
        let (outer, len, inner) = split_at_axis(self.shape(), d);
        if k > len {
            return Err(FucinaError::InvalidArgument {
                op: "topk",
                msg: format!("k = {k} is larger than axis `{}` ({len})", X::NAME),
            });
        }
        let x = contiguous_f32(&ctx, self.raw(), "topk")?;
        let n = outer
            .checked_mul(k)
            .and_then(|v| v.checked_mul(inner))
            .ok_or_else(|| FucinaError::InvalidArgument { op: "topk", msg: "result too large".into() })?;
        let (mut vals, mut idx) = (vec![0.0f32; n], vec![0u32; n]);
        ctx.run(x.len(), |kern| kern.topk(&x, outer, len, inner, k, &mut vals, &mut idx));
        let mut shape = self.shape().to_vec();
        shape[d] = k;
        let ids = Tensor::<A>::from_raw(RawTensor::from_buffer(Buffer::U32(idx), &shape)?)?;
        Ok((self.gather::<X>(&ids)?, ids))
    }

    /// Running sums along `X`: element `j` is the sum of elements `0..=j`, accumulated in
    /// order (as `torch.cumsum`); the gradient is the running sum of `g` from the end.
    ///
    /// ```
    /// use fucina::prelude::*;
    /// let x = Tensor::<axes![seq]>::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
    /// assert_eq!(x.cumsum::<seq>()?.to_f32_vec(), vec![1.0, 3.0, 6.0]);
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn cumsum<X: Axis>(&self) -> Result<Tensor<A>>
    where
        A: HasAxes<X>,
    {
        float_input(self.raw(), "cumsum")?;
        let ctx = ExecContext::current();
        let d = pos(&A::names(), X::NAME);
        let y = cumsum_raw(&ctx, self.raw(), d, Scan::Forward)?;
        Tensor::from_raw(record(y, &[self.raw()], move || {
            Box::new(move |g: &RawTensor| Ok(vec![Some(cumsum_raw(&ExecContext::current(), g, d, Scan::Reverse)?)]))
        }))
    }
}
