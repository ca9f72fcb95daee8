//! Reductions over named axes, softmax, and normalizations.

use super::elementwise::{binary_raw, unary_raw};
use super::grad::{expand, unbroadcast};
use super::{contiguous_f32, finish, perm_to, pos, unpermute};
use crate::backend::{BinaryOp, ReduceOp, UnaryOp};
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::tensor::axes::{Axes, Axis, AxisSet, CanReduce, HasAxes};
use crate::tensor::{RawTensor, Tensor};

/// Reduces `t` (axes `names`) over the axes `over`; the result keeps the other axes in order.
pub(crate) fn reduce_raw(
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

/// Sum over one axis, keeping the others (a raw helper for backward functions).
fn sum_axis(ctx: &ExecContext, t: &RawTensor, names: &[&'static str], axis: &'static str) -> Result<RawTensor> {
    Ok(reduce_raw(ctx, ReduceOp::Sum, t, names, &[axis])?.0)
}

/// Mean over one axis, keeping the others.
fn mean_axis(ctx: &ExecContext, t: &RawTensor, names: &[&'static str], axis: &'static str) -> Result<RawTensor> {
    let (s, len) = reduce_raw(ctx, ReduceOp::Sum, t, names, &[axis])?;
    unary_raw(ctx, UnaryOp::Affine(1.0 / len.max(1) as f32, 0.0), &s)
}

fn without(names: &[&'static str], axis: &str) -> Vec<&'static str> {
    names.iter().copied().filter(|n| *n != axis).collect()
}

/// Softmax or log-softmax along `axis`, recorded with its backward.
fn softmax_recorded(x: &RawTensor, names: Vec<&'static str>, axis: &'static str, log: bool) -> Result<RawTensor> {
    let ctx = ExecContext::current();
    let kc = ctx.clone();
    let y = along_axis(&ctx, x, &names, axis, move |x, rows, cols, out| {
        kc.run(rows * cols, |k| k.softmax(x, rows, cols, log, out))
    })?;
    let yd = y.detached();
    Ok(record(y, &[x], move || {
        Box::new(move |g: &RawTensor| {
            let ctx = ExecContext::current();
            let kept = without(&names, axis);
            let gx = if log {
                // dx = g - softmax * sum(g)
                let s = sum_axis(&ctx, g, &names, axis)?;
                let p = unary_raw(&ctx, UnaryOp::Exp, &yd)?;
                let ps = binary_raw(&ctx, BinaryOp::Mul, &p, &names, &s, &kept)?;
                binary_raw(&ctx, BinaryOp::Sub, g, &names, &ps, &names)?
            } else {
                // dx = y * (g - sum(g * y))
                let gy = binary_raw(&ctx, BinaryOp::Mul, g, &names, &yd, &names)?;
                let s = sum_axis(&ctx, &gy, &names, axis)?;
                let centered = binary_raw(&ctx, BinaryOp::Sub, g, &names, &s, &kept)?;
                binary_raw(&ctx, BinaryOp::Mul, &centered, &names, &yd, &names)?
            };
            Ok(vec![Some(gx)])
        })
    }))
}

impl<A: Axes> Tensor<A> {
    fn reduce_over<S: AxisSet>(&self, op: ReduceOp) -> Result<(Tensor<<A as CanReduce<S>>::Out>, usize)>
    where
        A: CanReduce<S>,
    {
        let ctx = ExecContext::current();
        let (names, over) = (A::names(), S::names());
        let (r, len) = reduce_raw(&ctx, op, self.raw(), &names, &over)?;
        let kept: Vec<&'static str> = names.iter().copied().filter(|n| !over.contains(n)).collect();
        let (xd, yd) = (self.raw().detached(), r.detached());
        let r = record(r, &[self.raw()], move || {
            Box::new(move |g: &RawTensor| {
                let ctx = ExecContext::current();
                let ge = expand(&ctx, g, &kept, &names, xd.shape())?;
                let gx = match op {
                    ReduceOp::Sum => ge,
                    ReduceOp::Max | ReduceOp::Min => {
                        // The gradient goes to the extreme elements, split evenly among ties.
                        let eq = binary_raw(&ctx, BinaryOp::Eq, &xd, &names, &yd, &kept)?;
                        let count = reduce_raw(&ctx, ReduceOp::Sum, &eq, &names, &over)?.0;
                        let share = binary_raw(&ctx, BinaryOp::Div, &eq, &names, &count, &kept)?;
                        binary_raw(&ctx, BinaryOp::Mul, &ge, &names, &share, &names)?
                    }
                    ReduceOp::LogSumExp => {
                        let p =
                            unary_raw(&ctx, UnaryOp::Exp, &binary_raw(&ctx, BinaryOp::Sub, &xd, &names, &yd, &kept)?)?;
                        binary_raw(&ctx, BinaryOp::Mul, &ge, &names, &p, &names)?
                    }
                };
                Ok(vec![Some(gx)])
            })
        });
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
        Tensor::from_raw(softmax_recorded(self.raw(), A::names(), X::NAME, false)?)
    }

    /// Log-softmax along axis `X`.
    pub fn log_softmax<X: Axis>(&self) -> Result<Tensor<A>>
    where
        A: HasAxes<X>,
    {
        Tensor::from_raw(softmax_recorded(self.raw(), A::names(), X::NAME, true)?)
    }

    /// RMS norm along axis `X`: `x / sqrt(mean(x^2) + eps) * weight`.
    pub fn rms_norm<X: Axis + Send + Sync>(&self, weight: Option<&Tensor<(X,)>>, eps: f32) -> Result<Tensor<A>>
    where
        A: HasAxes<X>,
    {
        let ctx = ExecContext::current();
        let names = A::names();
        let axis = X::NAME;
        let size = self.shape()[pos(&names, axis)];
        let w = param_f32(&ctx, weight.map(|w| w.raw()), axis, size)?;
        let kc = ctx.clone();
        let r = along_axis(&ctx, self.raw(), &names, axis, move |x, rows, cols, out| {
            kc.run(rows * cols, |k| k.rms_norm(x, rows, cols, w.as_deref(), eps, out))
        })?;
        let xd = self.raw().detached();
        let wd = weight.map(|w| w.raw().detached());
        let mut inputs = vec![self.raw()];
        inputs.extend(weight.map(|w| w.raw()));
        let r = record(r, &inputs, move || {
            Box::new(move |g: &RawTensor| {
                let ctx = ExecContext::current();
                let kept = without(&names, axis);
                let ms = mean_axis(&ctx, &unary_raw(&ctx, UnaryOp::Square, &xd)?, &names, axis)?;
                let inv = unary_raw(&ctx, UnaryOp::Rsqrt, &unary_raw(&ctx, UnaryOp::Affine(1.0, eps), &ms)?)?;
                let n = binary_raw(&ctx, BinaryOp::Mul, &xd, &names, &inv, &kept)?;
                let gw = match &wd {
                    Some(w) => binary_raw(&ctx, BinaryOp::Mul, g, &names, w, &[axis])?,
                    None => g.clone(),
                };
                let dot = mean_axis(&ctx, &binary_raw(&ctx, BinaryOp::Mul, &gw, &names, &n, &names)?, &names, axis)?;
                let nd = binary_raw(&ctx, BinaryOp::Mul, &n, &names, &dot, &kept)?;
                let gx = binary_raw(
                    &ctx,
                    BinaryOp::Mul,
                    &binary_raw(&ctx, BinaryOp::Sub, &gw, &names, &nd, &names)?,
                    &names,
                    &inv,
                    &kept,
                )?;
                let mut out = vec![Some(gx)];
                if wd.is_some() {
                    let gn = binary_raw(&ctx, BinaryOp::Mul, g, &names, &n, &names)?;
                    out.push(Some(unbroadcast(&ctx, &gn, &names, &[axis])?));
                }
                Ok(out)
            })
        });
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
        let names = A::names();
        let axis = X::NAME;
        let size = self.shape()[pos(&names, axis)];
        let w = param_f32(&ctx, weight.map(|w| w.raw()), axis, size)?;
        let b = param_f32(&ctx, bias.map(|b| b.raw()), axis, size)?;
        let kc = ctx.clone();
        let r = along_axis(&ctx, self.raw(), &names, axis, move |x, rows, cols, out| {
            kc.run(rows * cols, |k| k.layer_norm(x, rows, cols, w.as_deref(), b.as_deref(), eps, out))
        })?;
        let xd = self.raw().detached();
        let wd = weight.map(|w| w.raw().detached());
        let (has_w, has_b) = (weight.is_some(), bias.is_some());
        let mut inputs = vec![self.raw()];
        inputs.extend(weight.map(|w| w.raw()));
        inputs.extend(bias.map(|b| b.raw()));
        let r = record(r, &inputs, move || {
            Box::new(move |g: &RawTensor| {
                let ctx = ExecContext::current();
                let kept = without(&names, axis);
                let mu = mean_axis(&ctx, &xd, &names, axis)?;
                let xc = binary_raw(&ctx, BinaryOp::Sub, &xd, &names, &mu, &kept)?;
                let var = mean_axis(&ctx, &unary_raw(&ctx, UnaryOp::Square, &xc)?, &names, axis)?;
                let inv = unary_raw(&ctx, UnaryOp::Rsqrt, &unary_raw(&ctx, UnaryOp::Affine(1.0, eps), &var)?)?;
                let xhat = binary_raw(&ctx, BinaryOp::Mul, &xc, &names, &inv, &kept)?;
                let gx = match &wd {
                    Some(w) => binary_raw(&ctx, BinaryOp::Mul, g, &names, w, &[axis])?,
                    None => g.clone(),
                };
                let m1 = mean_axis(&ctx, &gx, &names, axis)?;
                let m2 = mean_axis(&ctx, &binary_raw(&ctx, BinaryOp::Mul, &gx, &names, &xhat, &names)?, &names, axis)?;
                let t = binary_raw(&ctx, BinaryOp::Sub, &gx, &names, &m1, &kept)?;
                let t = binary_raw(
                    &ctx,
                    BinaryOp::Sub,
                    &t,
                    &names,
                    &binary_raw(&ctx, BinaryOp::Mul, &xhat, &names, &m2, &kept)?,
                    &names,
                )?;
                let mut out = vec![Some(binary_raw(&ctx, BinaryOp::Mul, &t, &names, &inv, &kept)?)];
                if has_w {
                    let gxh = binary_raw(&ctx, BinaryOp::Mul, g, &names, &xhat, &names)?;
                    out.push(Some(unbroadcast(&ctx, &gxh, &names, &[axis])?));
                }
                if has_b {
                    out.push(Some(unbroadcast(&ctx, g, &names, &[axis])?));
                }
                Ok(out)
            })
        });
        Tensor::from_raw(r)
    }
}
