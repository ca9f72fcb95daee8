//! Scaled dot-product attention with grouped query heads, as one op: the scores, the
//! masked softmax (all keys, causal, or causal within a sliding window: [`Mask`]) and the
//! weighted sum of values in one kernel call, reading keys and values in place (e.g.
//! zero-copy views of a KV cache, f32 or f16).

use super::{contiguous_f32, float_slice, F32Data};
use crate::axis::{group, kv_head, kv_seq, seq};
pub use crate::backend::Mask;
use crate::backend::{Attention, AttentionGrad, HeadRows, RowStore};
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::tensor::axes::Axis;
use crate::tensor::{RawTensor, Tensor};

/// Keys or values as head rows: the tensor's own storage when its last axis is
/// contiguous, else a contiguous copy.
fn head_rows(ctx: &ExecContext, t: &RawTensor, what: &'static str) -> Result<(RawTensor, usize, usize)> {
    let l = t.layout();
    let t = if l.strides()[2] == 1 || l.shape()[2] <= 1 {
        t.detached()
    } else {
        let data = match contiguous_f32(ctx, t, what)? {
            F32Data::Borrowed(s) => s.to_vec(),
            F32Data::Owned(v) => v,
        };
        ctx.wrap_f32(data, t.shape())?
    };
    let (hs, rs) = (t.layout().strides()[0], t.layout().strides()[1]);
    float_slice(&t, what)?;
    Ok((t, hs, rs))
}

/// Grouped-query scaled dot-product attention: `softmax(scale * q k^T + mask) v`.
///
/// `q [seq, kv_head, group, D]` holds `group` query heads per key/value head; `k
/// [kv_head, kv_seq, D]` and `v [kv_head, kv_seq, V]` may be views (a KV cache's filled
/// prefix) in f32, f16 or bf16. `mask` says which keys each query sees ([`Mask`]; an
/// `Option<usize>` converts: `Some(p0)` is causal with query `i` at position `p0 + i`,
/// `None` sees every key). The result is `[seq, kv_head, group, V]`, f32. Recorded with its
/// backward (gradients for `q`, `k` and `v`).
///
/// ```
/// use fucina::prelude::*;
/// use fucina::ops::{attention, Mask};
/// // One head, three positions of width 1; values 1, 2, 4; equal scores.
/// let q = Tensor::<axes![seq, kv_head, group, head_dim]>::zeros(&[3, 1, 1, 1])?;
/// let k = Tensor::<axes![kv_head, kv_seq, head_dim]>::zeros(&[1, 3, 1])?;
/// let v = Tensor::<axes![kv_head, kv_seq, head_dim]>::from_vec(vec![1.0f32, 2.0, 4.0], &[1, 3, 1])?;
/// let causal = attention(&q, &k, &v, 1.0, Some(0))?.to_f32_vec();
/// let window = attention(&q, &k, &v, 1.0, Mask::Sliding { start: 0, window: 2 })?.to_f32_vec();
/// assert_eq!(&causal[..2], [1.0, 1.5]);
/// assert!((causal[2] - 7.0 / 3.0).abs() < 1e-6, "the mean of 1, 2 and 4");
/// assert_eq!(window, [1.0, 1.5, 3.0], "the last one sees 2 and 4 only");
/// # Ok::<(), fucina::FucinaError>(())
/// ```
pub fn attention<D: Axis, V: Axis>(
    q: &Tensor<(seq, kv_head, group, D)>,
    k: &Tensor<(kv_head, kv_seq, D)>,
    v: &Tensor<(kv_head, kv_seq, V)>,
    scale: f32,
    mask: impl Into<Mask>,
) -> Result<Tensor<(seq, kv_head, group, V)>> {
    let mask = mask.into();
    let ctx = ExecContext::current();
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let (s, h, g, dk) = (qs[0], qs[1], qs[2], qs[3]);
    let (t, dv) = (ks[1], vs[2]);
    check_sizes(
        "attention",
        [("kv_head", h, ks[0]), ("kv_head", h, vs[0]), (D::NAME, dk, ks[2]), ("kv_seq", t, vs[1])],
        s,
        t,
        mask,
    )?;
    let qd = contiguous_f32(&ctx, q.raw(), "attention")?;
    let (kr, khs, krs) = head_rows(&ctx, k.raw(), "attention keys")?;
    let (vr, vhs, vrs) = head_rows(&ctx, v.raw(), "attention values")?;
    let p = Attention {
        q: &qd,
        k: HeadRows {
            data: RowStore::Float(float_slice(&kr, "attention")?),
            offset: kr.layout().offset(),
            head: khs,
            row: krs,
        },
        v: HeadRows {
            data: RowStore::Float(float_slice(&vr, "attention")?),
            offset: vr.layout().offset(),
            head: vhs,
            row: vrs,
        },
        s,
        h,
        g,
        t,
        dk,
        dv,
        scale,
        mask,
    };
    let mut out = ctx.alloc(s * h * g * dv);
    ctx.run(s * t * h * g * (dk + dv), |kern| kern.attention(&p, &mut out));
    let y = ctx.wrap_f32(out, &[s, h, g, dv])?;
    let inputs = [q.raw(), k.raw(), v.raw()];
    let (qd, kd, vd) = (q.raw().detached(), k.raw().detached(), v.raw().detached());
    let y = record(y, &inputs, move || {
        Box::new(move |gy: &RawTensor| {
            let ctx = ExecContext::current();
            let dims = Dims { s, h, g, t, dk, dv, scale, mask };
            let (dq, dkk, dvv) = backward(&ctx, &dims, &qd, &kd, &vd, gy)?;
            Ok(vec![
                Some(ctx.wrap_f32(dq, &[s, h, g, dk])?),
                Some(ctx.wrap_f32(dkk, &[h, t, dk])?),
                Some(ctx.wrap_f32(dvv, &[h, t, dv])?),
            ])
        })
    });
    Tensor::from_raw(y)
}

/// Checks that the operands' sizes agree (`(axis, size, other's size)`), that causal
/// queries at `p0..p0 + s` have their keys among the `t`, and that a window is not empty.
pub(super) fn check_sizes(
    op: &'static str,
    pairs: [(&str, usize, usize); 4],
    s: usize,
    t: usize,
    mask: Mask,
) -> Result<()> {
    for (axis, a, b) in pairs {
        if a != b {
            return Err(FucinaError::ShapeMismatch { axis: axis.to_string(), left: a, right: b });
        }
    }
    if let Mask::Sliding { window: 0, .. } = mask {
        return Err(FucinaError::InvalidArgument { op, msg: "a sliding window of 0 keys".into() });
    }
    if let Mask::Blocks { len } = mask {
        if len == 0 || s != t || !s.is_multiple_of(len) {
            return Err(FucinaError::InvalidArgument {
                op,
                msg: format!(
                    "blocks of {len} over {s} queries and {t} keys (need equal counts, a multiple of the block)"
                ),
            });
        }
    }
    if let Some(p0) = mask.start() {
        if p0.checked_add(s).is_none_or(|end| end > t) {
            return Err(FucinaError::InvalidArgument {
                op,
                msg: format!("queries at positions {p0}..{} but only {t} keys", p0.saturating_add(s)),
            });
        }
    }
    Ok(())
}

/// The sizes of one attention call.
struct Dims {
    s: usize,
    h: usize,
    g: usize,
    t: usize,
    dk: usize,
    dv: usize,
    scale: f32,
    mask: Mask,
}

/// Gradients of q, k and v through the backend's kernel (`Kernels::attention_backward`,
/// which recomputes the probabilities).
fn backward(
    ctx: &ExecContext,
    d: &Dims,
    q: &RawTensor,
    k: &RawTensor,
    v: &RawTensor,
    gy: &RawTensor,
) -> Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
    let (q, k, v, gy) = (
        contiguous_f32(ctx, q, "attention backward")?,
        contiguous_f32(ctx, k, "attention backward")?,
        contiguous_f32(ctx, v, "attention backward")?,
        contiguous_f32(ctx, gy, "attention backward")?,
    );
    let p = AttentionGrad {
        q: &q,
        k: &k,
        v: &v,
        gy: &gy,
        s: d.s,
        h: d.h,
        g: d.g,
        t: d.t,
        dk: d.dk,
        dv: d.dv,
        scale: d.scale,
        mask: d.mask,
    };
    let mut dq = vec![0.0f32; d.s * d.h * d.g * d.dk];
    let mut dk = vec![0.0f32; d.h * d.t * d.dk];
    let mut dv = vec![0.0f32; d.h * d.t * d.dv];
    ctx.run(d.s * d.t * d.h * d.g * (d.dk + d.dv), |kern| kern.attention_backward(&p, &mut dq, &mut dk, &mut dv));
    Ok((dq, dk, dv))
}
