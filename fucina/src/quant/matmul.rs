//! Weights kept in their file's format and their matrix products: `y = x W^T` with
//! `W [out, in]` stored as f32/f16/bf16 rows (dotted against f32 activations) or in a ggml
//! block format, with each activation row quantized on the fly: to Q8_0 for the 32-value
//! formats (Q8_0, Q4_0), to Q8_K for the 256-value K-quants (Q2_K..Q6_K). The bytes may be
//! a memory-mapped file's ([`SharedBytes`]), so loading a model copies no weights.

use super::{quantize, GgmlType};
use crate::backend::fdot::{self, FloatRow};
use crate::backend::qdot::{self, Q8_0_BYTES};
use crate::backend::qdot_k::{self, KFormat, Q8_K_BYTES};
use crate::backend::BackendKind;
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::storage::SharedBytes;
use crate::tensor::axes::Axis;
use crate::tensor::Tensor;
use rayon::prelude::*;
use std::marker::PhantomData;

/// From this many activation rows on, the scalar backend runs a float weight through its GEMM.
pub const GEMM_BATCH: usize = 16;

/// From this many activation rows on, block-format and BF16 weights take the bf16 GEMM where
/// the CPU has one (the weight decode is then paid back by the faster products).
pub const BF16_BATCH: usize = 8;

thread_local! {
    /// A decoded weight row (scratch of the bf16 path).
    static ROW_F32: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A weight matrix `[O, I]` stored in a format with a dot kernel: F32, F16, BF16, Q8_0,
/// Q4_0, Q2_K, Q3_K, Q4_K, Q5_K or Q6_K.
#[derive(Clone)]
pub struct QWeight<O: Axis, I: Axis> {
    ty: GgmlType,
    rows: usize,
    cols: usize,
    data: SharedBytes,
    _axes: PhantomData<fn() -> (O, I)>,
}

impl<O: Axis, I: Axis> std::fmt::Debug for QWeight<O, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "QWeight<{}, {}>({:?}, {}x{})", O::NAME, I::NAME, self.ty, self.rows, self.cols)
    }
}

impl<O: Axis, I: Axis> QWeight<O, I> {
    /// Wraps encoded rows (`rows` x `cols` values of `ty`, row-major).
    pub fn from_bytes(ty: GgmlType, rows: usize, cols: usize, data: Vec<u8>) -> Result<QWeight<O, I>> {
        QWeight::from_shared(ty, rows, cols, SharedBytes::from_vec(data))
    }

    /// Wraps encoded rows held elsewhere (e.g. a memory-mapped model file) without copying.
    pub fn from_shared(ty: GgmlType, rows: usize, cols: usize, data: SharedBytes) -> Result<QWeight<O, I>> {
        if float_row(ty).is_none() && !matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0) && kformat(ty).is_none() {
            return Err(FucinaError::InvalidArgument {
                op: "QWeight",
                msg: format!("{ty:?} has no matmul kernel (F32, F16, BF16, Q8_0, Q4_0 and Q2_K..Q6_K do)"),
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

    /// The storage format.
    pub fn ggml_type(&self) -> GgmlType {
        self.ty
    }

    /// Size of the `O` axis.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Size of the `I` axis.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The stored bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// Row `r` decoded to f32.
    pub fn row_f32(&self, r: usize) -> Result<Vec<f32>> {
        if r >= self.rows {
            return Err(FucinaError::OutOfRange { axis: O::NAME.to_string(), index: r, size: self.rows });
        }
        let rb = self.ty.bytes_for(self.cols)?;
        super::dequantize(self.ty, &self.data[r * rb..(r + 1) * rb], self.cols)
    }

    /// Gathers rows by index (an embedding lookup): `ids [X]` gives `[X, I]`; an id out of
    /// range is an error naming the `O` axis.
    pub fn lookup<X: Axis>(&self, ids: &[u32]) -> Result<Tensor<(X, I)>> {
        let mut out = Vec::with_capacity(ids.len() * self.cols);
        for &id in ids {
            out.extend(self.row_f32(id as usize)?);
        }
        Tensor::from_vec(out, &[ids.len(), self.cols])
    }

    /// The whole matrix decoded to f32.
    pub fn to_tensor(&self) -> Result<Tensor<(O, I)>> {
        let ctx = ExecContext::current();
        let k = self.cols;
        let row_bytes = self.ty.bytes_for(k)?;
        let mut wv = vec![0.0f32; self.rows * self.cols];
        let decode = |(r, out): (usize, &mut [f32])| -> Result<()> {
            out.copy_from_slice(&super::dequantize(self.ty, &self.data[r * row_bytes..(r + 1) * row_bytes], k)?);
            Ok(())
        };
        if ctx.backend() == BackendKind::Native {
            ctx.install(|| wv.par_chunks_mut(k.max(1)).enumerate().try_for_each(decode))?;
        } else {
            wv.chunks_mut(k.max(1)).enumerate().try_for_each(decode)?;
        }
        Tensor::from_vec(wv, &[self.rows, self.cols])
    }

    /// `x W^T`: contracts the `I` axis of `x [B, I]` with the weight, giving `[B, O]`.
    pub fn forward<B: Axis>(&self, x: &Tensor<(B, I)>) -> Result<Tensor<(B, O)>> {
        let (m, k) = (x.shape()[0], x.shape()[1]);
        if k != self.cols {
            return Err(FucinaError::ShapeMismatch { axis: I::NAME.to_string(), left: k, right: self.cols });
        }
        let ctx = ExecContext::current();
        // Block formats stay on the integer path at every batch size (activations quantized
        // per row, several rows per weight unpack); float weights take a GEMM from GEMM_BATCH rows.
        let native = ctx.backend() == BackendKind::Native;
        if m >= BF16_BATCH && k.is_multiple_of(32) && self.ty != GgmlType::F16 && self.ty != GgmlType::F32 {
            return self.forward_bf16(&ctx, x, m, k, native);
        }
        if let (Some(fmt), BackendKind::Native, true) = (float_row(self.ty), ctx.backend(), m >= 2) {
            // Float weights, several rows: register-tiled dot products straight from the
            // stored rows (no packing, no f32 copy of the weight).
            let xv = x.to_f32_vec();
            let mut y = vec![0.0f32; m * self.rows];
            let parallel = may_split(&ctx, m * self.rows * k, 1 << 18);
            ctx.install(|| crate::backend::native::gemm_rows(m, self.rows, k, &xv, &self.data, fmt, &mut y, parallel));
            return Tensor::from_vec(y, &[m, self.rows]);
        }
        if m >= GEMM_BATCH && float_row(self.ty).is_some() {
            // The scalar spec: the decoded weight times the activations with its GEMM.
            let wf = self.to_tensor()?;
            let y = crate::ops::contract_positional(&ctx, x.detach().raw(), wf.raw())?;
            return Tensor::from_raw(y);
        }
        let xv = x.to_f32_vec();
        let row_bytes = self.ty.bytes_for(k)?;
        if let Some(fmt) = float_row(self.ty) {
            let kern = if native { fdot::row_kernel(fmt) } else { scalar_float(fmt) };
            let data = &self.data[..];
            let fill = |j0: usize, j1: usize, out: &Cols| {
                for j in j0..j1 {
                    let wrow = &data[j * row_bytes..(j + 1) * row_bytes];
                    for i in 0..m {
                        // SAFETY: every weight row holds `k` values of `fmt`, every activation row `k`
                        // f32; i < m and j is in this task's range.
                        unsafe { out.set(i, j, kern(wrow, &xv[i * k..(i + 1) * k])) };
                    }
                }
            };
            return self.split_rows(&ctx, m, k, native, fill);
        }
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
        let kern: qdot::RowDot = match (kf, native) {
            (Some(f), true) => qdot_k::row_kernel(f),
            (Some(f), false) => scalar_k(f),
            (None, true) => qdot::row_kernel(self.ty == GgmlType::Q4_0),
            (None, false) if self.ty == GgmlType::Q4_0 => |w, a| qdot::dot_q4_0_q8_0_scalar(w, a),
            (None, false) => |w, a| qdot::dot_q8_0_q8_0_scalar(w, a),
        };
        let kern4 = match (kf, native) {
            (_, false) => None,
            (Some(f), true) => qdot_k::row_kernel_x4(f),
            (None, true) => qdot::row_kernel_x4(self.ty == GgmlType::Q4_0),
        };
        let data: &[u8] = &self.data;
        let qa = &qa;
        // Activation rows in blocks that stay in L1/L2 while a chunk of weight rows meets them.
        let ib = (16 * 1024 / a_row.max(1)).clamp(4, 64) / 4 * 4;
        let fill = |j0: usize, j1: usize, out: &Cols| {
            let act = |i: usize| &qa[i * a_row..(i + 1) * a_row];
            for i0 in (0..m).step_by(ib) {
                let i1 = (i0 + ib).min(m);
                for j in j0..j1 {
                    let wrow = &data[j * row_bytes..(j + 1) * row_bytes];
                    let mut i = i0;
                    if let Some(k4) = kern4 {
                        while i + 4 <= i1 {
                            // SAFETY: as for `kern` below, for four activation rows.
                            let r = unsafe { k4(wrow, [act(i), act(i + 1), act(i + 2), act(i + 3)]) };
                            for (d, v) in r.into_iter().enumerate() {
                                // SAFETY: i + d < i1 <= m and j is in this task's range.
                                unsafe { out.set(i + d, j, v) };
                            }
                            i += 4;
                        }
                    }
                    for ii in i..i1 {
                        // SAFETY: weight rows are whole blocks of the format, activation rows the
                        // matching number of Q8_0/Q8_K blocks; the kernels were chosen for this CPU;
                        // ii < m and j is in this task's range.
                        unsafe { out.set(ii, j, kern(wrow, act(ii))) };
                    }
                }
            }
        };
        self.split_rows(&ctx, m, k, native, fill)
    }

    /// Batches of block-format and BF16 weights: weight rows decoded to bf16 once per call,
    /// activations rounded to bf16 (nearest even), products summed in f32. On CPUs with
    /// AVX-512 BF16 this runs on `vdpbf16ps` at twice the f32 FMA rate; elsewhere on the
    /// same values widened to f32, so every CPU computes the same thing up to summation order.
    /// It keeps more precision than the integer path's 8-bit activations; F16/F32 weights
    /// stay on the exact f32 path.
    fn forward_bf16<B: Axis>(
        &self,
        ctx: &ExecContext,
        x: &Tensor<(B, I)>,
        m: usize,
        k: usize,
        native: bool,
    ) -> Result<Tensor<(B, O)>> {
        let xb: Vec<u16> = x.to_f32_vec().iter().map(|v| super::f32_to_bf16_bits(*v)).collect();
        let row_bytes = self.ty.bytes_for(k)?;
        let (ty, data) = (self.ty, &self.data[..]);
        let n = self.rows;
        if !native {
            // The scalar spec: the same roundings, plain sequential sums.
            let f = |b: u16| f32::from_bits((b as u32) << 16);
            let mut y = vec![0.0f32; m * n];
            let mut w = vec![0.0f32; k];
            for j in 0..n {
                super::dequantize_into(ty, &data[j * row_bytes..(j + 1) * row_bytes], &mut w)?;
                let wb: Vec<f32> = w.iter().map(|v| f(super::f32_to_bf16_bits(*v))).collect();
                for i in 0..m {
                    y[i * n + j] = xb[i * k..(i + 1) * k].iter().zip(&wb).map(|(a, b)| f(*a) * b).sum();
                }
            }
            return Tensor::from_vec(y, &[m, n]);
        }
        use crate::backend::native::{decode_row_bf16, BlockRow};
        let fast = match ty {
            _ if !crate::backend::native::has_bf16_dot() => None,
            GgmlType::Q8_0 => Some(BlockRow::Q8_0),
            GgmlType::Q4_0 => Some(BlockRow::Q4_0),
            GgmlType::Q4_K => Some(BlockRow::Q4K),
            GgmlType::Q5_K => Some(BlockRow::Q5K),
            GgmlType::Q6_K => Some(BlockRow::Q6K),
            _ => None,
        };
        let decode = |j: usize, out: &mut [u16]| {
            let src = &data[j * row_bytes..(j + 1) * row_bytes];
            if let Some(f) = fast {
                decode_row_bf16(f, src, out);
                return;
            }
            if ty == GgmlType::BF16 {
                for (o, b) in out.iter_mut().zip(src.chunks_exact(2)) {
                    *o = u16::from_le_bytes([b[0], b[1]]);
                }
                return;
            }
            ROW_F32.with(|cell| {
                let mut row = cell.borrow_mut();
                row.resize(k, 0.0);
                let res = super::dequantize_into(ty, src, &mut row);
                debug_assert!(res.is_ok(), "{res:?}");
                for (o, v) in out.iter_mut().zip(row.iter()) {
                    *o = super::f32_to_bf16_bits(*v);
                }
            });
        };
        let mut y = vec![0.0f32; m * self.rows];
        let parallel = may_split(ctx, m * self.rows * k, 1 << 18);
        ctx.install(|| crate::backend::native::gemm_rows_bf16(m, self.rows, k, &xb, &decode, &mut y, parallel));
        Tensor::from_vec(y, &[m, self.rows])
    }

    /// Computes `y [m, n]` by running `fill(j0, j1, cols)` over ranges of weight rows (output
    /// columns), a few ranges per thread on the pool when the product is large enough; each
    /// call writes only its own columns.
    fn split_rows<B: Axis>(
        &self,
        ctx: &ExecContext,
        m: usize,
        k: usize,
        native: bool,
        fill: impl Fn(usize, usize, &Cols) + Sync,
    ) -> Result<Tensor<(B, O)>> {
        let n = self.rows;
        let mut y = vec![0.0f32; m * n];
        if m > 0 && n > 0 {
            let parallel = native && may_split(ctx, m * n * k, 1 << 17);
            // About eight ranges per thread balance uneven progress without paying much per task.
            let per = if parallel { n.div_ceil(8 * ctx.threads()).clamp(8, 1024) } else { n };
            let cols = Cols { ptr: y.as_mut_ptr(), n };
            let f = |c: usize| fill(c * per, ((c + 1) * per).min(n), &cols);
            if parallel {
                ctx.install(|| (0..n.div_ceil(per)).into_par_iter().for_each(f));
            } else {
                (0..n.div_ceil(per)).for_each(f);
            }
        }
        Tensor::from_vec(y, &[m, n])
    }
}

/// Whether a product of `work` multiply-adds is split over the pool: more than one thread,
/// at least `min` of work, and not inside [`crate::backend::native::serial`].
fn may_split(ctx: &ExecContext, work: usize, min: usize) -> bool {
    ctx.threads() > 1 && work >= min && !crate::backend::native::in_serial()
}

/// The output `[m, n]` of a product, written by column ranges from several tasks.
struct Cols {
    ptr: *mut f32,
    n: usize,
}

// SAFETY: `split_rows` hands each task a disjoint range of columns; `set` writes only there.
unsafe impl Sync for Cols {}

impl Cols {
    /// Writes element `(i, j)`.
    ///
    /// # Safety
    /// `i < m`, `j < n`, and `j` lies in the column range the calling task was handed.
    #[inline(always)]
    unsafe fn set(&self, i: usize, j: usize, v: f32) {
        debug_assert!(j < self.n);
        // SAFETY: the caller's contract: inside the buffer, and no other task writes column j.
        unsafe { *self.ptr.add(i * self.n + j) = v };
    }
}

/// The scalar-spec kernel of a float row format.
fn scalar_float(fmt: FloatRow) -> fdot::RowDot {
    match fmt {
        FloatRow::F32 => |w, a| fdot::dot_float_scalar(FloatRow::F32, w, a),
        FloatRow::F16 => |w, a| fdot::dot_float_scalar(FloatRow::F16, w, a),
        FloatRow::BF16 => |w, a| fdot::dot_float_scalar(FloatRow::BF16, w, a),
    }
}

/// The scalar-spec kernel of a K-quant format.
fn scalar_k(f: KFormat) -> qdot::RowDot {
    match f {
        KFormat::Q2K => |w, a| qdot_k::dot_k_q8_k_scalar(KFormat::Q2K, w, a),
        KFormat::Q3K => |w, a| qdot_k::dot_k_q8_k_scalar(KFormat::Q3K, w, a),
        KFormat::Q4K => |w, a| qdot_k::dot_k_q8_k_scalar(KFormat::Q4K, w, a),
        KFormat::Q5K => |w, a| qdot_k::dot_k_q8_k_scalar(KFormat::Q5K, w, a),
        KFormat::Q6K => |w, a| qdot_k::dot_k_q8_k_scalar(KFormat::Q6K, w, a),
    }
}

/// The float row format of a ggml type, if it is one.
fn float_row(ty: GgmlType) -> Option<FloatRow> {
    Some(match ty {
        GgmlType::F32 => FloatRow::F32,
        GgmlType::F16 => FloatRow::F16,
        GgmlType::BF16 => FloatRow::BF16,
        _ => return None,
    })
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
