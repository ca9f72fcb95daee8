//! Comparisons (masks of 0 and 1, not differentiable) and clamping.

use super::elementwise::{binary_raw, unary_recorded};
use crate::backend::{BinaryOp, UnaryOp};
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::storage::Buffer;
use crate::tensor::axes::{Axes, BroadcastFrom};
use crate::tensor::{RawTensor, Tensor};

macro_rules! comparisons {
    ($($(#[$m:meta])* $name:ident, $scalar:ident => $op:expr;)*) => {
        impl<A: Axes> Tensor<A> {
            $(
                $(#[$m])*
                ///
                /// The result is a mask: `1` where the comparison holds, `0` elsewhere, in the
                /// promoted float dtype; it carries no gradient. `other` broadcasts by axis
                /// name (each of its axes must be one of `self`'s, checked at compile time).
                pub fn $name<B: Axes>(&self, other: &Tensor<B>) -> Result<Tensor<A>>
                where
                    A: BroadcastFrom<B>,
                {
                    let ctx = ExecContext::current();
                    let (a, b) = (self.raw().detached(), other.raw().detached());
                    Tensor::from_raw(binary_raw(&ctx, $op, &a, &A::names(), &b, &B::names())?)
                }

                $(#[$m])*
                ///
                /// Against one number: a 0/1 mask of `self`'s shape and dtype, with no gradient.
                pub fn $scalar(&self, value: f32) -> Result<Tensor<A>> {
                    let ctx = ExecContext::current();
                    let b = RawTensor::from_buffer(Buffer::F32(vec![value]), &[])?;
                    let y = binary_raw(&ctx, $op, &self.raw().detached(), &A::names(), &b, &[])?;
                    Tensor::from_raw(super::cast_to(&y, self.dtype())?)
                }
            )*
        }
    };
}

comparisons! {
    /// `self > other`, elementwise.
    gt, gt_scalar => BinaryOp::Gt;
    /// `self >= other`, elementwise.
    ge, ge_scalar => BinaryOp::Ge;
    /// `self < other`, elementwise.
    lt, lt_scalar => BinaryOp::Lt;
    /// `self <= other`, elementwise.
    le, le_scalar => BinaryOp::Le;
    /// `self == other`, elementwise.
    eq, eq_scalar => BinaryOp::Eq;
    /// `self != other`, elementwise (NaN is unequal to everything).
    ne, ne_scalar => BinaryOp::Ne;
}

impl<A: Axes> Tensor<A> {
    /// Each element limited to `[lo, hi]`; NaN stays NaN (as `torch.clamp`). The gradient
    /// passes where `lo <= x <= hi` and is zero outside.
    ///
    /// ```
    /// use fucina::prelude::*;
    /// let x = Tensor::<axes![seq]>::from_vec(vec![-2.0f32, 0.5, 3.0], &[3])?;
    /// assert_eq!(x.clamp(-1.0, 1.0)?.to_f32_vec(), vec![-1.0, 0.5, 1.0]);
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn clamp(&self, lo: f32, hi: f32) -> Result<Tensor<A>> {
        if lo.is_nan() || hi.is_nan() || lo > hi {
            return Err(FucinaError::InvalidArgument {
                op: "clamp",
                msg: format!("the bounds must be numbers with lo <= hi, got [{lo}, {hi}]"),
            });
        }
        Tensor::from_raw(unary_recorded(&ExecContext::current(), UnaryOp::Clamp(lo, hi), self.raw())?)
    }
}
