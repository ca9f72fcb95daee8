//! Elementwise ops: unary maps, broadcasting binary ops by axis name, where/mask, cast.

use super::grad::{positional, unbroadcast};
use super::{contiguous_f32, finish, pos, F32View};
use crate::backend::{BinaryOp, Strided, UnaryOp};
use crate::dtype::DType;
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::storage::Buffer;
use crate::tensor::axes::{Axes, BroadcastFrom};
use crate::tensor::{RawTensor, Tensor};
use half::slice::HalfFloatSliceExt;

/// A unary op, recorded with its backward when a graph is being built.
pub(crate) fn unary_recorded(ctx: &ExecContext, op: UnaryOp, x: &RawTensor) -> Result<RawTensor> {
    let y = unary_raw(ctx, op, x)?;
    let (xd, yd) = (x.detached(), y.detached());
    Ok(record(y, &[x], move || {
        Box::new(move |g: &RawTensor| Ok(vec![Some(unary_backward(&ExecContext::current(), op, &xd, &yd, g)?)]))
    }))
}

/// `dL/dx` of `y = op(x)` given `g = dL/dy`.
fn unary_backward(ctx: &ExecContext, op: UnaryOp, x: &RawTensor, y: &RawTensor, g: &RawTensor) -> Result<RawTensor> {
    let n = positional(x.shape().len());
    let mul = |a: &RawTensor, b: &RawTensor| binary_raw(ctx, BinaryOp::Mul, a, n, b, n);
    let u = |o: UnaryOp, a: &RawTensor| unary_raw(ctx, o, a);
    match op {
        UnaryOp::Neg => u(UnaryOp::Neg, g),
        UnaryOp::Exp => mul(g, y),
        UnaryOp::Log => binary_raw(ctx, BinaryOp::Div, g, n, x, n),
        UnaryOp::Sqrt => u(UnaryOp::Affine(0.5, 0.0), &binary_raw(ctx, BinaryOp::Div, g, n, y, n)?),
        UnaryOp::Rsqrt => u(UnaryOp::Affine(-0.5, 0.0), &mul(g, &u(UnaryOp::Powf(3.0), y)?)?),
        UnaryOp::Tanh => mul(g, &u(UnaryOp::Affine(-1.0, 1.0), &u(UnaryOp::Square, y)?)?),
        UnaryOp::Sigmoid => mul(g, &mul(y, &u(UnaryOp::Affine(-1.0, 1.0), y)?)?),
        UnaryOp::Relu => mul(g, &u(UnaryOp::Step, x)?),
        UnaryOp::Gelu => mul(g, &u(UnaryOp::GeluDeriv, x)?),
        UnaryOp::GeluTanh => mul(g, &u(UnaryOp::GeluTanhDeriv, x)?),
        UnaryOp::Silu => mul(g, &u(UnaryOp::SiluDeriv, x)?),
        UnaryOp::Softplus => mul(g, &u(UnaryOp::Sigmoid, x)?),
        UnaryOp::Abs => mul(g, &u(UnaryOp::Sign, x)?),
        UnaryOp::Square => u(UnaryOp::Affine(2.0, 0.0), &mul(g, x)?),
        UnaryOp::Recip => u(UnaryOp::Neg, &mul(g, &u(UnaryOp::Square, y)?)?),
        UnaryOp::Affine(a, _) => u(UnaryOp::Affine(a, 0.0), g),
        UnaryOp::Powf(p) => u(UnaryOp::Affine(p, 0.0), &mul(g, &u(UnaryOp::Powf(p - 1.0), x)?)?),
        UnaryOp::Clamp(lo, hi) => mul(g, &u(UnaryOp::InRange(lo, hi), x)?),
        UnaryOp::Step
        | UnaryOp::Sign
        | UnaryOp::GeluDeriv
        | UnaryOp::GeluTanhDeriv
        | UnaryOp::SiluDeriv
        | UnaryOp::InRange(..) => {
            Err(FucinaError::InvalidArgument { op: "backward", msg: format!("{op:?} is not differentiable") })
        }
    }
}

pub(crate) fn unary_raw(ctx: &ExecContext, op: UnaryOp, t: &RawTensor) -> Result<RawTensor> {
    let x = contiguous_f32(ctx, t, "unary op")?;
    let mut out = ctx.alloc(t.numel());
    ctx.run(x.len(), |k| k.unary(op, &x, &mut out));
    finish(ctx, out, t.shape(), t.dtype())
}

/// Strides of `b` mapped onto the axes of `a` (0 where `b` lacks the axis), with size checks.
pub(crate) fn broadcast_strides(
    a_names: &[&'static str],
    a_shape: &[usize],
    b_names: &[&'static str],
    b_shape: &[usize],
    b_strides: &[usize],
) -> Result<Vec<usize>> {
    let mut st = vec![0; a_names.len()];
    for (i, n) in b_names.iter().enumerate() {
        let p = pos(a_names, n);
        if b_shape[i] != a_shape[p] {
            return Err(FucinaError::ShapeMismatch { axis: n.to_string(), left: a_shape[p], right: b_shape[i] });
        }
        st[p] = b_strides[i];
    }
    Ok(st)
}

/// A binary op (b broadcasting into a by name), recorded with its backward.
pub(crate) fn binary_recorded(
    ctx: &ExecContext,
    op: BinaryOp,
    a: &RawTensor,
    an: Vec<&'static str>,
    b: &RawTensor,
    bn: Vec<&'static str>,
) -> Result<RawTensor> {
    let y = binary_raw(ctx, op, a, &an, b, &bn)?;
    let (ad, bd, yd) = (a.detached(), b.detached(), y.detached());
    Ok(record(y, &[a, b], move || {
        Box::new(move |g: &RawTensor| {
            let (ga, gb) = binary_backward(&ExecContext::current(), op, &ad, &an, &bd, &bn, &yd, g)?;
            Ok(vec![Some(ga), Some(gb)])
        })
    }))
}

/// `(dL/da, dL/db)` of `y = op(a, b)` given `g = dL/dy`; `db` is summed over broadcast axes.
#[allow(clippy::too_many_arguments)]
fn binary_backward(
    ctx: &ExecContext,
    op: BinaryOp,
    a: &RawTensor,
    an: &[&'static str],
    b: &RawTensor,
    bn: &[&'static str],
    y: &RawTensor,
    g: &RawTensor,
) -> Result<(RawTensor, RawTensor)> {
    let bin = |o: BinaryOp, x: &RawTensor, xn: &[&'static str], z: &RawTensor, zn: &[&'static str]| {
        binary_raw(ctx, o, x, xn, z, zn)
    };
    let down = |t: &RawTensor| unbroadcast(ctx, t, an, bn);
    let neg = |t: &RawTensor| unary_raw(ctx, UnaryOp::Neg, t);
    match op {
        BinaryOp::Add => Ok((g.clone(), down(g)?)),
        BinaryOp::Sub => Ok((g.clone(), neg(&down(g)?)?)),
        BinaryOp::Mul => Ok((bin(BinaryOp::Mul, g, an, b, bn)?, down(&bin(BinaryOp::Mul, g, an, a, an)?)?)),
        BinaryOp::Div => {
            let ga = bin(BinaryOp::Div, g, an, b, bn)?;
            let gy = bin(BinaryOp::Mul, &ga, an, y, an)?;
            Ok((ga, neg(&down(&gy)?)?))
        }
        BinaryOp::Max | BinaryOp::Min => {
            // The larger (smaller) operand gets the gradient; ties split it evenly.
            let gt = bin(BinaryOp::Gt, a, an, b, bn)?;
            let eq = bin(BinaryOp::Eq, a, an, b, bn)?;
            let half = unary_raw(ctx, UnaryOp::Affine(0.5, 0.0), &eq)?;
            let mut mask = bin(BinaryOp::Add, &gt, an, &half, an)?;
            if op == BinaryOp::Min {
                let sum = bin(BinaryOp::Add, &gt, an, &eq, an)?;
                mask = unary_raw(ctx, UnaryOp::Affine(-1.0, 1.0), &sum)?;
                mask = bin(BinaryOp::Add, &mask, an, &half, an)?;
            }
            let ga = bin(BinaryOp::Mul, g, an, &mask, an)?;
            let rest = unary_raw(ctx, UnaryOp::Affine(-1.0, 1.0), &mask)?;
            Ok((ga, down(&bin(BinaryOp::Mul, g, an, &rest, an)?)?))
        }
        BinaryOp::Gt | BinaryOp::Eq | BinaryOp::Ge | BinaryOp::Lt | BinaryOp::Le | BinaryOp::Ne => {
            Err(FucinaError::InvalidArgument { op: "backward", msg: format!("{op:?} is not differentiable") })
        }
    }
}

pub(crate) fn binary_raw(
    ctx: &ExecContext,
    op: BinaryOp,
    a: &RawTensor,
    a_names: &[&'static str],
    b: &RawTensor,
    b_names: &[&'static str],
) -> Result<RawTensor> {
    for t in [a, b] {
        if !t.dtype().is_float() {
            return Err(FucinaError::UnsupportedDType { op: "binary op", dtype: t.dtype() });
        }
    }
    let va = F32View::new(ctx, a, "binary op")?;
    let vb = F32View::new(ctx, b, "binary op")?;
    let bst = broadcast_strides(a_names, a.shape(), b_names, b.shape(), vb.strides())?;
    let mut out = ctx.alloc(a.numel());
    let shape = a.shape();
    ctx.run(a.numel(), |k| k.binary(op, shape, va.strided(va.strides()), vb.strided(&bst), &mut out));
    finish(ctx, out, shape, a.dtype().promote(b.dtype()))
}

macro_rules! unary_methods {
    ($($(#[$m:meta])* $name:ident => $op:expr;)*) => {
        impl<A: Axes> Tensor<A> {
            $(
                $(#[$m])*
                pub fn $name(&self) -> Result<Tensor<A>> {
                    Tensor::from_raw(unary_recorded(&ExecContext::current(), $op, self.raw())?)
                }
            )*
        }
    };
}

unary_methods! {
    /// `-x`.
    neg => UnaryOp::Neg;
    /// `e^x`.
    exp => UnaryOp::Exp;
    /// Natural logarithm.
    log => UnaryOp::Log;
    /// Square root.
    sqrt => UnaryOp::Sqrt;
    /// `1 / sqrt(x)`.
    rsqrt => UnaryOp::Rsqrt;
    /// Hyperbolic tangent.
    tanh => UnaryOp::Tanh;
    /// Logistic sigmoid.
    sigmoid => UnaryOp::Sigmoid;
    /// `max(x, 0)`.
    relu => UnaryOp::Relu;
    /// GELU with the exact erf (PyTorch's default).
    gelu => UnaryOp::Gelu;
    /// GELU, tanh approximation.
    gelu_tanh => UnaryOp::GeluTanh;
    /// `x * sigmoid(x)` (SiLU / swish).
    silu => UnaryOp::Silu;
    /// `ln(1 + e^x)`.
    softplus => UnaryOp::Softplus;
    /// `|x|`.
    abs => UnaryOp::Abs;
    /// `x^2`.
    square => UnaryOp::Square;
    /// `1 / x`.
    recip => UnaryOp::Recip;
}

// The binary methods are written out (not generated by a macro) so that a failed
// `BroadcastFrom` bound points at the method itself, without a macro backtrace.
impl<A: Axes> Tensor<A> {
    /// The product of `self` and `other` under `op`, `other` broadcast by axis name.
    fn binary<B: Axes>(&self, op: BinaryOp, other: &Tensor<B>) -> Result<Tensor<A>> {
        let ctx = ExecContext::current();
        Tensor::from_raw(binary_recorded(&ctx, op, self.raw(), A::names(), other.raw(), B::names())?)
    }

    /// Elementwise sum.
    ///
    /// `other` broadcasts by axis name: each of its axes must be an axis of `self`
    /// (checked at compile time) with the same size (checked here).
    pub fn add<B: Axes>(&self, other: &Tensor<B>) -> Result<Tensor<A>>
    where
        A: BroadcastFrom<B>,
    {
        self.binary(BinaryOp::Add, other)
    }

    /// Elementwise difference.
    ///
    /// `other` broadcasts by axis name: each of its axes must be an axis of `self`
    /// (checked at compile time) with the same size (checked here).
    pub fn sub<B: Axes>(&self, other: &Tensor<B>) -> Result<Tensor<A>>
    where
        A: BroadcastFrom<B>,
    {
        self.binary(BinaryOp::Sub, other)
    }

    /// Elementwise product.
    ///
    /// `other` broadcasts by axis name: each of its axes must be an axis of `self`
    /// (checked at compile time) with the same size (checked here).
    pub fn mul<B: Axes>(&self, other: &Tensor<B>) -> Result<Tensor<A>>
    where
        A: BroadcastFrom<B>,
    {
        self.binary(BinaryOp::Mul, other)
    }

    /// Elementwise quotient.
    ///
    /// `other` broadcasts by axis name: each of its axes must be an axis of `self`
    /// (checked at compile time) with the same size (checked here).
    pub fn div<B: Axes>(&self, other: &Tensor<B>) -> Result<Tensor<A>>
    where
        A: BroadcastFrom<B>,
    {
        self.binary(BinaryOp::Div, other)
    }

    /// Elementwise maximum.
    ///
    /// `other` broadcasts by axis name: each of its axes must be an axis of `self`
    /// (checked at compile time) with the same size (checked here).
    pub fn maximum<B: Axes>(&self, other: &Tensor<B>) -> Result<Tensor<A>>
    where
        A: BroadcastFrom<B>,
    {
        self.binary(BinaryOp::Max, other)
    }

    /// Elementwise minimum.
    ///
    /// `other` broadcasts by axis name: each of its axes must be an axis of `self`
    /// (checked at compile time) with the same size (checked here).
    pub fn minimum<B: Axes>(&self, other: &Tensor<B>) -> Result<Tensor<A>>
    where
        A: BroadcastFrom<B>,
    {
        self.binary(BinaryOp::Min, other)
    }
}

impl<A: Axes> Tensor<A> {
    /// `a * x + b` for scalars `a`, `b`.
    pub fn affine(&self, a: f32, b: f32) -> Result<Tensor<A>> {
        Tensor::from_raw(unary_recorded(&ExecContext::current(), UnaryOp::Affine(a, b), self.raw())?)
    }

    /// `x * s`.
    pub fn scale(&self, s: f32) -> Result<Tensor<A>> {
        self.affine(s, 0.0)
    }

    /// Soft-capping: `cap * tanh(x / cap)`, which keeps values inside `(-cap, cap)` and is
    /// close to `x` well inside (Gemma's and nanochat's logit soft-cap). Differentiable (it
    /// is the composition of `scale` and `tanh`). `cap` must be finite and positive.
    ///
    /// ```
    /// use fucina::prelude::*;
    /// axis!(v);
    /// let x = Tensor::<axes![v]>::from_vec(vec![0.5f32, 100.0, -100.0], &[3])?;
    /// let y = x.softcap(30.0)?.to_f32_vec();
    /// assert!((y[0] - 0.5).abs() < 1e-3 && y[1] < 30.0 && y[1] > 29.9 && y[2] > -30.0);
    /// assert!(x.softcap(0.0).is_err());
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn softcap(&self, cap: f32) -> Result<Tensor<A>> {
        if !(cap.is_finite() && cap > 0.0) {
            return Err(FucinaError::InvalidArgument {
                op: "softcap",
                msg: format!("cap {cap}: need a finite cap > 0"),
            });
        }
        self.scale(1.0 / cap)?.tanh()?.scale(cap)
    }

    /// `x + s`.
    pub fn add_scalar(&self, s: f32) -> Result<Tensor<A>> {
        self.affine(1.0, s)
    }

    /// `x^p`.
    pub fn powf(&self, p: f32) -> Result<Tensor<A>> {
        Tensor::from_raw(unary_recorded(&ExecContext::current(), UnaryOp::Powf(p), self.raw())?)
    }

    /// `cond != 0 ? on_true : on_false`, with `cond` broadcasting by axis name.
    pub fn where_cond<C: Axes>(cond: &Tensor<C>, on_true: &Tensor<A>, on_false: &Tensor<A>) -> Result<Tensor<A>>
    where
        A: BroadcastFrom<C>,
    {
        let ctx = ExecContext::current();
        let names = A::names();
        let shape = on_true.shape();
        if on_false.shape() != shape {
            let d = shape.iter().zip(on_false.shape()).position(|(a, b)| a != b).unwrap_or(0);
            return Err(FucinaError::ShapeMismatch {
                axis: names[d].to_string(),
                left: shape[d],
                right: on_false.shape()[d],
            });
        }
        let cond_f = cast_raw(cond.raw(), DType::F32)?;
        let vc = F32View::new(&ctx, &cond_f, "where")?;
        let vt = F32View::new(&ctx, on_true.raw(), "where")?;
        let vf = F32View::new(&ctx, on_false.raw(), "where")?;
        let cst = broadcast_strides(&names, shape, &C::names(), cond.shape(), vc.strides())?;
        let mut out = ctx.alloc(on_true.numel());
        ctx.run(on_true.numel(), |k| {
            k.select(shape, vc.strided(&cst), vt.strided(vt.strides()), vf.strided(vf.strides()), &mut out)
        });
        let y = finish(&ctx, out, shape, on_true.dtype().promote(on_false.dtype()))?;
        let (cd, cn) = (cond_f.detached(), C::names());
        Tensor::from_raw(record(y, &[on_true.raw(), on_false.raw()], move || {
            Box::new(move |g: &RawTensor| {
                let ctx = ExecContext::current();
                let gt = mask_grad(&ctx, g, &names, &cd, &cn)?;
                let gf = binary_raw(&ctx, BinaryOp::Sub, g, &names, &gt, &names)?;
                Ok(vec![Some(gt), Some(gf)])
            })
        }))
    }

    /// `value` where `mask != 0`, else `self`; `mask` broadcasts by axis name.
    pub fn masked_fill<C: Axes>(&self, mask: &Tensor<C>, value: f32) -> Result<Tensor<A>>
    where
        A: BroadcastFrom<C>,
    {
        let ctx = ExecContext::current();
        let names = A::names();
        let shape = self.shape();
        let mask_f = cast_raw(mask.raw(), DType::F32)?;
        let vm = F32View::new(&ctx, &mask_f, "masked_fill")?;
        let vx = F32View::new(&ctx, self.raw(), "masked_fill")?;
        let mst = broadcast_strides(&names, shape, &C::names(), mask.shape(), vm.strides())?;
        let fill = [value];
        let zeros = vec![0usize; shape.len()];
        let fill_view = Strided { data: &fill, offset: 0, strides: &zeros };
        let mut out = ctx.alloc(self.numel());
        ctx.run(self.numel(), |k| k.select(shape, vm.strided(&mst), fill_view, vx.strided(vx.strides()), &mut out));
        let y = finish(&ctx, out, shape, self.dtype())?;
        let (md, mn) = (mask_f.detached(), C::names());
        Tensor::from_raw(record(y, &[self.raw()], move || {
            Box::new(move |g: &RawTensor| {
                let ctx = ExecContext::current();
                let filled = mask_grad(&ctx, g, &names, &md, &mn)?;
                Ok(vec![Some(binary_raw(&ctx, BinaryOp::Sub, g, &names, &filled, &names)?)])
            })
        }))
    }

    /// Converts the elements to `dtype` (rounding to nearest even for half types).
    pub fn cast(&self, dtype: DType) -> Result<Tensor<A>> {
        let y = cast_raw(self.raw(), dtype)?;
        let from = self.dtype();
        if !from.is_float() || !dtype.is_float() {
            return Tensor::from_raw(y);
        }
        Tensor::from_raw(record(y, &[self.raw()], move || {
            Box::new(move |g: &RawTensor| Ok(vec![Some(cast_raw(g, from)?)]))
        }))
    }
}

/// `g` where the condition is nonzero, 0 elsewhere (condition broadcast by name).
fn mask_grad(
    ctx: &ExecContext,
    g: &RawTensor,
    names: &[&'static str],
    cond: &RawTensor,
    cn: &[&'static str],
) -> Result<RawTensor> {
    let m = unary_raw(ctx, UnaryOp::Step, &unary_raw(ctx, UnaryOp::Abs, cond)?)?;
    binary_raw(ctx, BinaryOp::Mul, g, names, &m, cn)
}

/// Casts any tensor to `dtype` as a new contiguous tensor (same tensor if already that dtype).
pub(crate) fn cast_raw(t: &RawTensor, dtype: DType) -> Result<RawTensor> {
    if t.dtype() == dtype {
        return Ok(t.clone());
    }
    let shape = t.shape();
    let buf = match (t.storage().buffer(), dtype) {
        (Buffer::U32(_), DType::F32 | DType::F16 | DType::BF16) | (_, DType::U32) => {
            let vals = t.to_f32_vec();
            match dtype {
                DType::U32 => {
                    if let Some(bad) = vals.iter().find(|v| !(v.is_finite() && **v >= 0.0 && **v <= u32::MAX as f32)) {
                        return Err(FucinaError::InvalidArgument {
                            op: "cast",
                            msg: format!("{bad} cannot be represented as u32"),
                        });
                    }
                    Buffer::U32(vals.iter().map(|v| *v as u32).collect())
                }
                _ => return cast_raw(&RawTensor::from_buffer(Buffer::F32(vals), shape)?, dtype),
            }
        }
        (_, DType::F32) => Buffer::F32(t.to_f32_vec()),
        (_, DType::F16) => {
            let src = t.to_f32_vec();
            let mut v = vec![half::f16::ZERO; src.len()];
            v.convert_from_f32_slice(&src);
            Buffer::F16(v)
        }
        (_, DType::BF16) => {
            let src = t.to_f32_vec();
            let mut v = vec![half::bf16::ZERO; src.len()];
            v.convert_from_f32_slice(&src);
            Buffer::BF16(v)
        }
    };
    RawTensor::from_buffer(buf, shape)
}
