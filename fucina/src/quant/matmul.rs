//! Quantized weights and their matrix products: `y = x W^T` with `W [out, in]` kept in a
//! ggml block format and each activation row quantized on the fly: to Q8_0 for the 32-value
//! formats (Q8_0, Q4_0), to Q8_K for the 256-value K-quants (Q2_K..Q6_K).

use super::{quantize, GgmlType};
use crate::backend::qdot::{self, Q8_0_BYTES};
use crate::backend::qdot_k::{self, KFormat, Q8_K_BYTES};
use crate::backend::BackendKind;
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::tensor::axes::Axis;
use crate::tensor::Tensor;
use rayon::prelude::*;
use std::marker::PhantomData;

/// From this many activation rows on, `forward` decodes the weight and runs the f32 GEMM.
pub const GEMM_BATCH: usize = 16;

/// A weight matrix `[O, I]` stored in a block format with an integer dot kernel
/// (Q8_0, Q4_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K).
pub struct QWeight<O: Axis, I: Axis> {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    data: Vec<u8>,
    _axes: PhantomData<fn() -> (O, I)>,
}

impl<O: Axis, I: Axis> QWeight<O, I> {
    /// Wraps encoded rows (`rows` x `cols` values of `ty`, row-major).
    pub fn from_bytes(ty: GgmlType, rows: usize, cols: usize, data: Vec<u8>) -> Result<QWeight<O, I>> {
        if !matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0) && kformat(ty).is_none() {
            return Err(FucinaError::InvalidArgument {
                op: "QWeight",
                msg: format!("{ty:?} has no quantized kernel (Q8_0, Q4_0 and Q2_K..Q6_K do)"),
            });
        }
        let need = ty.bytes_for(cols)? * rows;
        if data.len() != need {
            return Err(FucinaError::InvalidArgument {
                op: "QWeight",
                msg: format!("{rows}x{cols} {ty:?} takes {need} bytes, got {}", data.len()),
            });
        }
        Ok(QWeight { ty, rows, cols, data, _axes: PhantomData })
    }

    /// Quantizes an f32 tensor `[O, I]`.
    pub fn quantize(w: &Tensor<(O, I)>, ty: GgmlType) -> Result<QWeight<O, I>> {
        let (rows, cols) = (w.shape()[0], w.shape()[1]);
        QWeight::from_bytes(ty, rows, cols, quantize(ty, &w.to_f32_vec())?)
    }

    /// The block format.
    pub fn ggml_type(&self) -> GgmlType {
        self.ty
    }

    /// `x W^T`: contracts the `I` axis of `x [B, I]` with the weight, giving `[B, O]`.
    pub fn forward<B: Axis>(&self, x: &Tensor<(B, I)>) -> Result<Tensor<(B, O)>> {
        let (m, k) = (x.shape()[0], x.shape()[1]);
        if k != self.cols {
            return Err(FucinaError::ShapeMismatch { axis: I::NAME.to_string(), left: k, right: self.cols });
        }
        let ctx = ExecContext::current();
        if m >= GEMM_BATCH {
            // Many rows: decode the weight once and use the f32 GEMM, which beats one integer
            // dot product per (row, weight row) pair from this size on.
            let row_bytes = self.ty.bytes_for(k)?;
            let mut wv = vec![0.0f32; self.rows * self.cols];
            let decode = |(r, out): (usize, &mut [f32])| -> Result<()> {
                out.copy_from_slice(&super::dequantize(self.ty, &self.data[r * row_bytes..(r + 1) * row_bytes], k)?);
                Ok(())
            };
            if ctx.backend() == BackendKind::Native {
                ctx.install(|| wv.par_chunks_mut(k).enumerate().try_for_each(decode))?;
            } else {
                wv.chunks_mut(k).enumerate().try_for_each(decode)?;
            }
            let wf = Tensor::<(O, I)>::from_vec(wv, &[self.rows, self.cols])?;
            let xr = x.detach();
            let y = crate::ops::contract_positional(&ctx, xr.raw(), wf.raw())?;
            return Tensor::from_raw(y);
        }
        let xv = x.to_f32_vec();
        let kf = kformat(self.ty);
        // Activation rows in Q8_K for the K-quants, Q8_0 otherwise.
        let a_row = if kf.is_some() { k / 256 * Q8_K_BYTES } else { k / 32 * Q8_0_BYTES };
        let mut qa = vec![0u8; m * a_row];
        for (row, q) in xv.chunks_exact(k).zip(qa.chunks_exact_mut(a_row)) {
            match kf {
                Some(_) => qdot_k::quantize_row_q8_k(row, q),
                None => qdot::quantize_row_q8_0(row, q),
            }
        }
        let row_bytes = self.ty.bytes_for(k)?;
        let native = ctx.backend() == BackendKind::Native;
        let dot = |w: &[u8], a: &[u8]| -> f32 {
            match (self.ty, kf, native) {
                (_, Some(f), true) => qdot_k::dot_k_q8_k(f, w, a),
                (_, Some(f), false) => qdot_k::dot_k_q8_k_scalar(f, w, a),
                (GgmlType::Q8_0, _, true) => qdot::dot_q8_0_q8_0(w, a),
                (GgmlType::Q8_0, _, false) => qdot::dot_q8_0_q8_0_scalar(w, a),
                (_, _, true) => qdot::dot_q4_0_q8_0(w, a),
                (_, _, false) => qdot::dot_q4_0_q8_0_scalar(w, a),
            }
        };
        // Weight rows are the outer loop (each streams from memory once, then stays in L1
        // while it meets every activation row); chunks of weight rows go to the pool.
        let n = self.rows;
        let mut out_t = vec![0.0f32; n * m];
        let data = &self.data;
        let qa = &qa;
        let fill = |(c, chunk): (usize, &mut [f32])| {
            for (jj, col) in chunk.chunks_mut(m).enumerate() {
                let j = c * 16 + jj;
                let wrow = &data[j * row_bytes..(j + 1) * row_bytes];
                for (i, o) in col.iter_mut().enumerate() {
                    *o = dot(wrow, &qa[i * a_row..(i + 1) * a_row]);
                }
            }
        };
        if native && m * n * k >= 1 << 18 {
            ctx.install(|| out_t.par_chunks_mut(16 * m).enumerate().for_each(fill));
        } else {
            out_t.chunks_mut(16 * m).enumerate().for_each(fill);
        }
        let mut out = vec![0.0f32; m * n];
        for j in 0..n {
            for i in 0..m {
                out[i * n + j] = out_t[j * m + i];
            }
        }
        Tensor::from_vec(out, &[m, n])
    }
}

/// The K-quant kernel format of a ggml type, if it is one.
fn kformat(ty: GgmlType) -> Option<KFormat> {
    Some(match ty {
        GgmlType::Q2_K => KFormat::Q2K,
        GgmlType::Q3_K => KFormat::Q3K,
        GgmlType::Q4_K => KFormat::Q4K,
        GgmlType::Q5_K => KFormat::Q5K,
        GgmlType::Q6_K => KFormat::Q6K,
        _ => return None,
    })
}
