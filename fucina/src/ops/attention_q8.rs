//! Attention over keys and values stored as Q8_0 blocks (a quantized KV cache): the same
//! grouped-query attention as [`super::attention`], with integer dot products for the
//! scores. Inference only: nothing is recorded for autograd.

use super::contiguous_f32;
use crate::axis::{group, kv_head, seq};
use crate::backend::qdot::Q8_0_BYTES;
use crate::backend::{Attention, HeadRows, RowStore};
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::tensor::axes::Axis;
use crate::tensor::Tensor;
use std::marker::PhantomData;

/// Rows `[kv_head, kv_seq, X]` stored as Q8_0 blocks (34 bytes per 32 elements: an f16
/// scale and 32 int8): element `(h, j, x)` is element `offset + h * head + j * row + x` of
/// the block sequence. Every offset, stride and the row width are multiples of 32.
///
/// ```
/// use fucina::ops::Q8Rows;
/// use fucina::prelude::*;
/// use fucina::quant::quantize_q8_0;
/// // One head, two positions of 32 values each.
/// let x: Vec<f32> = (0..64).map(|i| i as f32 / 64.0).collect();
/// let bytes = quantize_q8_0(&x);
/// let rows = Q8Rows::<head_dim>::new(&bytes, 1, 2, 32, 0, 64, 32).unwrap();
/// assert_eq!(rows.len(), 2);
/// assert!(Q8Rows::<head_dim>::new(&bytes, 1, 3, 32, 0, 96, 32).is_err(), "past the end");
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Q8Rows<'a, X: Axis> {
    bytes: &'a [u8],
    heads: usize,
    len: usize,
    dim: usize,
    offset: usize,
    head: usize,
    row: usize,
    _x: PhantomData<X>,
}

impl<'a, X: Axis> Q8Rows<'a, X> {
    /// Checks that every row lies in `bytes` and on block boundaries.
    pub fn new(
        bytes: &'a [u8],
        heads: usize,
        len: usize,
        dim: usize,
        offset: usize,
        head: usize,
        row: usize,
    ) -> Result<Q8Rows<'a, X>> {
        let bad = |msg: String| FucinaError::InvalidArgument { op: "Q8Rows", msg };
        if [dim, offset, head, row].iter().any(|v| v % 32 != 0) {
            return Err(bad(format!(
                "width {dim}, offset {offset} and strides {head}/{row} must be multiples of 32 (Q8_0 blocks)"
            )));
        }
        let elements = bytes.len() / Q8_0_BYTES * 32;
        if heads > 0 && len > 0 {
            let last = (heads - 1)
                .checked_mul(head)
                .and_then(|a| (len - 1).checked_mul(row).and_then(|b| a.checked_add(b)))
                .and_then(|a| a.checked_add(offset)?.checked_add(dim));
            if last.is_none_or(|e| e > elements) {
                return Err(bad(format!("{heads} heads of {len} rows of {dim} run past {elements} stored elements")));
            }
        }
        Ok(Q8Rows { bytes, heads, len, dim, offset, head, row, _x: PhantomData })
    }

    /// Positions.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no positions.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The first `width` elements of every row, as axis `Y` (e.g. the latent part of
    /// DeepSeek's cached `[latent, rotary key]` rows, which are its values).
    pub fn prefix<Y: Axis>(&self, width: usize) -> Result<Q8Rows<'a, Y>> {
        if width > self.dim {
            return Err(FucinaError::InvalidArgument {
                op: "Q8Rows::prefix",
                msg: format!("{width} of rows {} wide", self.dim),
            });
        }
        Q8Rows::new(self.bytes, self.heads, self.len, width, self.offset, self.head, self.row)
    }

    fn head_rows(&self) -> HeadRows<'a> {
        HeadRows { data: RowStore::Q8_0(self.bytes), offset: self.offset, head: self.head, row: self.row }
    }
}

/// Grouped-query attention (as [`super::attention`]) over Q8_0 keys and values: `q [seq,
/// kv_head, group, D]`, keys `[kv_head, kv_seq, D]`, values `[kv_head, kv_seq, V]`; each
/// query row is quantized to Q8_0 and scored with integer block dot products. Not recorded
/// for autograd.
pub fn attention_q8_0<D: Axis, V: Axis>(
    q: &Tensor<(seq, kv_head, group, D)>,
    k: &Q8Rows<'_, D>,
    v: &Q8Rows<'_, V>,
    scale: f32,
    mask: impl Into<super::attention::Mask>,
) -> Result<Tensor<(seq, kv_head, group, V)>> {
    let mask = mask.into();
    let ctx = ExecContext::current();
    let qs = q.shape();
    let (s, h, g, dk) = (qs[0], qs[1], qs[2], qs[3]);
    let (t, dv) = (k.len, v.dim);
    let pairs = [("kv_head", h, k.heads), ("kv_head", h, v.heads), (D::NAME, dk, k.dim), ("kv_seq", t, v.len)];
    super::attention::check_sizes("attention_q8_0", pairs, s, t, mask)?;
    let qd = contiguous_f32(&ctx, q.raw(), "attention_q8_0")?;
    let p = Attention { q: &qd, k: k.head_rows(), v: v.head_rows(), s, h, g, t, dk, dv, scale, mask };
    let mut out = ctx.alloc(s * h * g * dv);
    ctx.run(s * t * h * g * (dk + dv), |kern| kern.attention(&p, &mut out));
    Tensor::from_raw(ctx.wrap_f32(out, &[s, h, g, dv])?)
}
