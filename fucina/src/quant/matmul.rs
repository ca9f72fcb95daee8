//! Quantized weights and their matrix products: `y = x W^T` with `W [out, in]` kept in a
//! ggml block format and each activation row quantized to Q8_0 on the fly.

use super::{quantize, GgmlType};
use crate::backend::qdot::{self, Q8_0_BYTES};
use crate::backend::BackendKind;
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::tensor::axes::Axis;
use crate::tensor::Tensor;
use rayon::prelude::*;
use std::marker::PhantomData;

/// A weight matrix `[O, I]` stored in a block format (Q8_0 or Q4_0 for now).
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
        if !matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0) {
            return Err(FucinaError::InvalidArgument {
                op: "QWeight",
                msg: format!("{ty:?} weights are not supported yet (Q8_0 and Q4_0 are)"),
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
        let xv = x.to_f32_vec();
        let blocks = k / 32;
        let mut qa = vec![0u8; m * blocks * Q8_0_BYTES];
        for (row, q) in xv.chunks_exact(k).zip(qa.chunks_exact_mut(blocks * Q8_0_BYTES)) {
            qdot::quantize_row_q8_0(row, q);
        }
        let row_bytes = self.ty.bytes_for(k)?;
        let native = ctx.backend() == BackendKind::Native;
        let dot = |w: &[u8], a: &[u8]| -> f32 {
            match (self.ty, native) {
                (GgmlType::Q8_0, true) => qdot::dot_q8_0_q8_0(w, a),
                (GgmlType::Q8_0, false) => qdot::dot_q8_0_q8_0_scalar(w, a),
                (_, true) => qdot::dot_q4_0_q8_0(w, a),
                (_, false) => qdot::dot_q4_0_q8_0_scalar(w, a),
            }
        };
        let mut out = vec![0.0f32; m * self.rows];
        let n = self.rows;
        let fill = |(i, orow): (usize, &mut [f32])| {
            let a = &qa[i * blocks * Q8_0_BYTES..(i + 1) * blocks * Q8_0_BYTES];
            for (j, o) in orow.iter_mut().enumerate() {
                *o = dot(&self.data[j * row_bytes..(j + 1) * row_bytes], a);
            }
        };
        if native && m * n * k >= 1 << 18 {
            // Split the output columns (weight rows) over the pool: each weight row streams once.
            let data = &self.data;
            ctx.install(|| {
                for (i, orow) in out.chunks_mut(n).enumerate() {
                    let a = &qa[i * blocks * Q8_0_BYTES..(i + 1) * blocks * Q8_0_BYTES];
                    orow.par_chunks_mut(64).enumerate().for_each(|(c, chunk)| {
                        for (jj, o) in chunk.iter_mut().enumerate() {
                            let j = c * 64 + jj;
                            *o = dot(&data[j * row_bytes..(j + 1) * row_bytes], a);
                        }
                    });
                }
            });
        } else {
            out.chunks_mut(n).enumerate().for_each(fill);
        }
        Tensor::from_vec(out, &[m, n])
    }
}
