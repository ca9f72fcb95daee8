//! Relative-position attention scores to absolute ones (Transformer-XL's "relative shift",
//! which Conformer encoders such as Parakeet's use): a strided view, no copy.

use super::contiguous_f32;
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::tensor::axes::{Axes, Axis, CanRename, HasAxes};
use crate::tensor::{contiguous_strides, Layout};
use crate::tensor::{RawTensor, Tensor};

impl<A: Axes> Tensor<A> {
    /// Scores against relative positions to scores against keys: `self` holds, for each of
    /// `Q` queries, scores against `2Q - 1` relative offsets on its last axis `P` (index `k`
    /// is offset `Q - 1 - k`: from `Q - 1` keys back down to `Q - 1` keys ahead), the axis
    /// before it being the queries; the result, with `P` renamed `K` (`Q` keys), holds
    /// `out[.., i, j] = self[.., i, Q - 1 - i + j]`: query `i`'s score for key `j` is its
    /// score for offset `i - j`. A strided view of a contiguous copy; differentiable.
    ///
    /// ```
    /// use fucina::prelude::*;
    /// axis!(q, rel, key);
    /// // Two queries, offsets +1, 0, -1: query 0 sees key 0 at offset 0, key 1 at -1.
    /// let s = Tensor::<(q, rel)>::from_vec(vec![10.0, 11.0, 12.0, 20.0, 21.0, 22.0], &[2, 3])?;
    /// let a: Tensor<(q, key)> = s.relative_to_absolute::<rel, key>()?;
    /// assert_eq!(a.to_f32_vec(), vec![11.0, 12.0, 20.0, 21.0]);
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn relative_to_absolute<P: Axis, K: Axis>(&self) -> Result<Tensor<<A as CanRename<P, K>>::Out>>
    where
        A: HasAxes<P> + CanRename<P, K>,
    {
        const OP: &str = "relative_to_absolute";
        let names = A::names();
        let shape = self.shape().to_vec();
        let n = shape.len();
        if n < 2 || names[n - 1] != P::NAME {
            return Err(FucinaError::InvalidArgument {
                op: OP,
                msg: format!("the offsets axis `{}` must be the last of {names:?}, after the queries", P::NAME),
            });
        }
        let (q, p) = (shape[n - 2], shape[n - 1]);
        if q == 0 || Some(p) != (2 * q).checked_sub(1) {
            return Err(FucinaError::InvalidArgument {
                op: OP,
                msg: format!("{q} queries need {} offsets, got {p}", (2 * q).saturating_sub(1)),
            });
        }
        let base = if self.is_contiguous() { self.raw().clone() } else { self.contiguous()?.raw().clone() };
        let mut strides = contiguous_strides(&shape);
        strides[n - 2] = p - 1;
        let mut out_shape = shape.clone();
        out_shape[n - 1] = q;
        let layout = Layout::from_parts(out_shape.clone(), strides, base.layout().offset() + (q - 1));
        let y = base.with_layout(layout)?;
        Tensor::from_raw(record(y, &[self.raw()], move || {
            Box::new(move |g: &RawTensor| {
                // Each output element came from one input element: scatter back, zeros elsewhere.
                let ctx = ExecContext::current();
                let gd = contiguous_f32(&ctx, g, OP)?;
                let mut dx = vec![0.0f32; shape.iter().product()];
                for (dst, src) in dx.chunks_exact_mut(q * p).zip(gd.chunks_exact(q * q)) {
                    for i in 0..q {
                        for j in 0..q {
                            dst[i * p + (q - 1 - i + j)] += src[i * q + j];
                        }
                    }
                }
                Ok(vec![Some(ctx.wrap_f32(dx, &shape)?)])
            })
        }))
    }
}
