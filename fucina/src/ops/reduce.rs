//! Reductions over named axes, softmax, and normalizations.

use super::{contiguous_f32, finish, perm_to, pos, unpermute};
use crate::backend::ReduceOp;
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::tensor::axes::{Axes, Axis, AxisSet, CanReduce, HasAxes};
use crate::tensor::{RawTensor, Tensor};

/// Reduces `t` (axes `names`) over the axes `over`; the result keeps the other axes in order.
fn reduce_raw(
    ctx: &ExecContext,
    op: ReduceOp,
    t: &RawTensor,
    names: &[&'static str],
    over: &[&'static str],
) -> Result<(RawTensor, usize)> {
    if !t.dtype().is_float() {
        return Err(FucinaError::UnsupportedDType { op: "reduction", dtype: t.dtype() });
    }
    let shape = t.shape();
    let kept: Vec<&'static str> = names.iter().copied().filter(|n| !over.contains(n)).collect();
    let kept_shape: Vec<usize> = kept.iter().map(|n| shape[pos(names, n)]).collect();
    let len: usize = over.iter().map(|n| shape[pos(names, n)]).product();
    let (data, outer, inner) = if over.len() == 1 {
        let p = pos(names, over[0]);
        let data = contiguous_f32(ctx, t, "reduction")?;
        (data, shape[..p].iter().product::<usize>(), shape[p + 1..].iter().product::<usize>())
    } else {
        let order: Vec<&'static str> = kept.iter().chain(over.iter()).copied().collect();
        let perm = perm_to(names, &order);
        let view = t.with_layout(t.layout().permuted(&perm))?;
        let data = super::F32Data::Owned(contiguous_f32(ctx, &view, "reduction")?.to_vec());
        (data, kept_shape.iter().product::<usize>(), 1)
    };
    let mut out = ctx.alloc(outer * inner);
    ctx.run(outer * len * inner, |k| k.reduce(op, &data, outer, len, inner, &mut out));
    Ok((finish(ctx, out, &kept_shape, t.dtype())?, len))
}

/// Applies a last-axis row kernel along axis `name`, moving it last and back as needed.
fn along_axis(
    ctx: &ExecContext,
    t: &RawTensor,
    names: &[&'static str],
    name: &'static str,
    f: impl FnOnce(&[f32], usize, usize, &mut [f32]),
) -> Result<RawTensor> {
    if !t.dtype().is_float() {
        return Err(FucinaError::UnsupportedDType { op: "row op", dtype: t.dtype() });
    }
    let p = pos(names, name);
    let mut perm: Vec<usize> = (0..names.len()).filter(|i| *i != p).collect();
    perm.push(p);
    let view = t.with_layout(t.layout().permuted(&perm))?;
    let cols = t.shape()[p];
    let rows = t.numel().checked_div(cols).unwrap_or(0);
    let x = contiguous_f32(ctx, &view, "row op")?;
    let mut out = ctx.alloc(t.numel());
    f(&x, rows, cols, &mut out);
    let res = finish(ctx, out, view.shape(), t.dtype())?;
    unpermute(res, &perm)
}

/// Checks a per-axis parameter vector's length.
fn param_f32(ctx: &ExecContext, p: Option<&RawTensor>, axis: &'static str, size: usize) -> Result<Option<Vec<f32>>> {
    match p {
        None => Ok(None),
        Some(t) => {
            if t.numel() != size {
                return Err(FucinaError::ShapeMismatch { axis: axis.to_string(), left: size, right: t.numel() });
            }
            Ok(Some(contiguous_f32(ctx, t, "norm parameter")?.to_vec()))
        }
    }
}

impl<A: Axes> Tensor<A> {
    fn reduce_over<S: AxisSet>(&self, op: ReduceOp) -> Result<(Tensor<<A as CanReduce<S>>::Out>, usize)>
    where
        A: CanReduce<S>,
    {
        let ctx = ExecContext::current();
        let (r, len) = reduce_raw(&ctx, op, self.raw(), &A::names(), &S::names())?;
        Ok((Tensor::from_raw(r)?, len))
    }

    /// Sum over the axes `S` (one axis or a tuple); the result drops them.
    pub fn sum<S: AxisSet>(&self) -> Result<Tensor<<A as CanReduce<S>>::Out>>
    where
        A: CanReduce<S>,
    {
        Ok(self.reduce_over::<S>(ReduceOp::Sum)?.0)
    }

    /// Mean over the axes `S`.
    pub fn mean<S: AxisSet>(&self) -> Result<Tensor<<A as CanReduce<S>>::Out>>
    where
        A: CanReduce<S>,
    {
        let (s, len) = self.reduce_over::<S>(ReduceOp::Sum)?;
        if len == 0 {
            return Err(FucinaError::InvalidArgument { op: "mean", msg: "mean over an empty axis".into() });
        }
        s.scale(1.0 / len as f32)
    }

    /// Maximum over the axes `S`.
    pub fn max<S: AxisSet>(&self) -> Result<Tensor<<A as CanReduce<S>>::Out>>
    where
        A: CanReduce<S>,
    {
        Ok(self.reduce_over::<S>(ReduceOp::Max)?.0)
    }

    /// Minimum over the axes `S`.
    pub fn min<S: AxisSet>(&self) -> Result<Tensor<<A as CanReduce<S>>::Out>>
    where
        A: CanReduce<S>,
    {
        Ok(self.reduce_over::<S>(ReduceOp::Min)?.0)
    }

    /// `ln(sum(exp(x)))` over the axes `S`, computed stably.
    pub fn logsumexp<S: AxisSet>(&self) -> Result<Tensor<<A as CanReduce<S>>::Out>>
    where
        A: CanReduce<S>,
    {
        Ok(self.reduce_over::<S>(ReduceOp::LogSumExp)?.0)
    }

    /// Softmax along axis `X`.
    pub fn softmax<X: Axis>(&self) -> Result<Tensor<A>>
    where
        A: HasAxes<X>,
    {
        let ctx = ExecContext::current();
        let kc = ctx.clone();
        let r = along_axis(&ctx, self.raw(), &A::names(), X::NAME, move |x, rows, cols, out| {
            kc.run(rows * cols, |k| k.softmax(x, rows, cols, false, out))
        })?;
        Tensor::from_raw(r)
    }

    /// Log-softmax along axis `X`.
    pub fn log_softmax<X: Axis>(&self) -> Result<Tensor<A>>
    where
        A: HasAxes<X>,
    {
        let ctx = ExecContext::current();
        let kc = ctx.clone();
        let r = along_axis(&ctx, self.raw(), &A::names(), X::NAME, move |x, rows, cols, out| {
            kc.run(rows * cols, |k| k.softmax(x, rows, cols, true, out))
        })?;
        Tensor::from_raw(r)
    }

    /// RMS norm along axis `X`: `x / sqrt(mean(x^2) + eps) * weight`.
    pub fn rms_norm<X: Axis + Send + Sync>(&self, weight: Option<&Tensor<(X,)>>, eps: f32) -> Result<Tensor<A>>
    where
        A: HasAxes<X>,
    {
        let ctx = ExecContext::current();
        let size = self.shape()[pos(&A::names(), X::NAME)];
        let w = param_f32(&ctx, weight.map(|w| w.raw()), X::NAME, size)?;
        let kc = ctx.clone();
        let r = along_axis(&ctx, self.raw(), &A::names(), X::NAME, move |x, rows, cols, out| {
            kc.run(rows * cols, |k| k.rms_norm(x, rows, cols, w.as_deref(), eps, out))
        })?;
        Tensor::from_raw(r)
    }

    /// Layer norm along axis `X`: `(x - mean) / sqrt(var + eps) * weight + bias`.
    pub fn layer_norm<X: Axis + Send + Sync>(
        &self,
        weight: Option<&Tensor<(X,)>>,
        bias: Option<&Tensor<(X,)>>,
        eps: f32,
    ) -> Result<Tensor<A>>
    where
        A: HasAxes<X>,
    {
        let ctx = ExecContext::current();
        let size = self.shape()[pos(&A::names(), X::NAME)];
        let w = param_f32(&ctx, weight.map(|w| w.raw()), X::NAME, size)?;
        let b = param_f32(&ctx, bias.map(|b| b.raw()), X::NAME, size)?;
        let kc = ctx.clone();
        let r = along_axis(&ctx, self.raw(), &A::names(), X::NAME, move |x, rows, cols, out| {
            kc.run(rows * cols, |k| k.layer_norm(x, rows, cols, w.as_deref(), b.as_deref(), eps, out))
        })?;
        Tensor::from_raw(r)
    }
}
