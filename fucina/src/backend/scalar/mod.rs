//! The scalar backend: the obvious loops, in the obvious order. This is the spec.

use super::{
    binary_scalar, qdot, strided_offset, unary_scalar, Attention, BinaryOp, Conv1d, FloatSlice, Gemm, Kernels,
    ReduceOp, Strided, UnaryOp,
};

/// Plain single-threaded loops.
#[derive(Debug, Clone, Copy, Default)]
pub struct Scalar;

impl Kernels for Scalar {
    fn name(&self) -> &'static str {
        "scalar"
    }

    fn unary(&self, op: UnaryOp, x: &[f32], y: &mut [f32]) {
        for (o, v) in y.iter_mut().zip(x) {
            *o = unary_scalar(op, *v);
        }
    }

    #[cfg(feature = "nam")]
    fn frames_gemm_acc(&self, g: super::frames::FrameGemm, x: &[f32], w: &[f32], out: &mut [f32]) {
        super::frames::frames_gemm_acc_spec(g, x, w, out)
    }

    fn power_spectrum(&self, p: &super::spectrum::Spectrum, x: &[f32], out: &mut [f32]) {
        super::spectrum::power_spectrum_spec(p, x, out)
    }

    fn binary(&self, op: BinaryOp, shape: &[usize], a: Strided<'_>, b: Strided<'_>, out: &mut [f32]) {
        for (i, o) in out.iter_mut().enumerate() {
            let ia = strided_offset(i, shape, a.strides, a.offset);
            let ib = strided_offset(i, shape, b.strides, b.offset);
            *o = binary_scalar(op, a.data[ia], b.data[ib]);
        }
    }

    fn copy_strided(&self, src: FloatSlice<'_>, offset: usize, shape: &[usize], strides: &[usize], out: &mut [f32]) {
        for (i, o) in out.iter_mut().enumerate() {
            *o = src.get(strided_offset(i, shape, strides, offset));
        }
    }

    fn reduce(&self, op: ReduceOp, x: &[f32], outer: usize, len: usize, inner: usize, out: &mut [f32]) {
        for o in 0..outer {
            for i in 0..inner {
                let at = |j: usize| x[(o * len + j) * inner + i];
                out[o * inner + i] = match op {
                    ReduceOp::Sum => (0..len).map(at).sum(),
                    ReduceOp::Max => (0..len).map(at).fold(f32::NEG_INFINITY, f32::max),
                    ReduceOp::Min => (0..len).map(at).fold(f32::INFINITY, f32::min),
                    ReduceOp::LogSumExp => {
                        let m = (0..len).map(at).fold(f32::NEG_INFINITY, f32::max);
                        if m == f32::NEG_INFINITY {
                            m
                        } else {
                            m + (0..len).map(|j| (at(j) - m).exp()).sum::<f32>().ln()
                        }
                    }
                };
            }
        }
    }

    fn softmax(&self, x: &[f32], rows: usize, cols: usize, log: bool, out: &mut [f32]) {
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let o = &mut out[r * cols..(r + 1) * cols];
            let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let s: f32 = row.iter().map(|v| (v - m).exp()).sum();
            for (oi, v) in o.iter_mut().zip(row) {
                *oi = if log { v - m - s.ln() } else { (v - m).exp() / s };
            }
        }
    }

    fn rms_norm(&self, x: &[f32], rows: usize, cols: usize, w: Option<&[f32]>, eps: f32, out: &mut [f32]) {
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let ms = row.iter().map(|v| v * v).sum::<f32>() / cols as f32;
            let inv = 1.0 / (ms + eps).sqrt();
            for j in 0..cols {
                out[r * cols + j] = row[j] * inv * w.map_or(1.0, |w| w[j]);
            }
        }
    }

    fn layer_norm(
        &self,
        x: &[f32],
        rows: usize,
        cols: usize,
        w: Option<&[f32]>,
        b: Option<&[f32]>,
        eps: f32,
        out: &mut [f32],
    ) {
        for r in 0..rows {
            let row = &x[r * cols..(r + 1) * cols];
            let mean = row.iter().sum::<f32>() / cols as f32;
            let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / cols as f32;
            let inv = 1.0 / (var + eps).sqrt();
            for j in 0..cols {
                out[r * cols + j] = (row[j] - mean) * inv * w.map_or(1.0, |w| w[j]) + b.map_or(0.0, |b| b[j]);
            }
        }
    }

    fn gemm(&self, g: &Gemm<'_>, c: &mut [f32]) {
        for bt in 0..g.batch {
            for i in 0..g.m {
                for j in 0..g.n {
                    let mut acc = 0.0f32;
                    for p in 0..g.k {
                        let av = g.a.data.get(g.a.offset + bt * g.a.bs + i * g.a.rs + p * g.a.cs);
                        let bv = g.b.data.get(g.b.offset + bt * g.b.bs + p * g.b.rs + j * g.b.cs);
                        acc += av * bv;
                    }
                    c[(bt * g.m + i) * g.n + j] = acc;
                }
            }
        }
    }

    fn attention(&self, p: &Attention<'_>, out: &mut [f32]) {
        let mut scores = vec![0.0f32; p.t];
        let quantized_keys = matches!(p.k.data, crate::backend::RowStore::Q8_0(_));
        let mut q8 = vec![0u8; p.dk / 32 * qdot::Q8_0_BYTES];
        for i in 0..p.s {
            let (j0, n) = (p.first(i), p.visible(i));
            for h in 0..p.h {
                for gi in 0..p.g {
                    let q = &p.q[((i * p.h + h) * p.g + gi) * p.dk..][..p.dk];
                    if quantized_keys {
                        // Q8_0 keys: the query quantized to Q8_0, integer block sums.
                        qdot::quantize_row_q8_0(q, &mut q8);
                    }
                    for (j, sc) in scores[..n].iter_mut().enumerate().skip(j0) {
                        let dot: f32 = match p.k.q8_0_row(h, j, p.dk) {
                            Some(k) => qdot::dot_q8_0_q8_0_scalar(k, &q8),
                            None => (0..p.dk).map(|d| q[d] * p.k.get(h, j, d)).sum(),
                        };
                        *sc = dot * p.scale;
                    }
                    let m = scores[j0..n].iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let mut sum = 0.0f32;
                    for sc in scores[j0..n].iter_mut() {
                        *sc = (*sc - m).exp();
                        sum += *sc;
                    }
                    let o = &mut out[((i * p.h + h) * p.g + gi) * p.dv..][..p.dv];
                    for (d, od) in o.iter_mut().enumerate() {
                        let acc: f32 = (j0..n).map(|j| scores[j] * p.v.get(h, j, d)).sum();
                        *od = if n == j0 { 0.0 } else { acc / sum };
                    }
                }
            }
        }
    }

    fn conv1d(&self, p: &Conv1d, x: &[f32], w: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
        let t_out = p.t_out();
        for b in 0..p.batch {
            for co in 0..p.cout {
                for t in 0..t_out {
                    let mut acc = bias.map_or(0.0, |bs| bs[co]);
                    for ci in 0..p.cin {
                        for kk in 0..p.k {
                            let src = t + kk * p.dilation;
                            if src < p.pad_left || src - p.pad_left >= p.t_in {
                                continue;
                            }
                            acc += w[(co * p.cin + ci) * p.k + kk] * x[(b * p.cin + ci) * p.t_in + src - p.pad_left];
                        }
                    }
                    out[(b * p.cout + co) * t_out + t] = acc;
                }
            }
        }
    }

    fn select(&self, shape: &[usize], cond: Strided<'_>, t: Strided<'_>, f: Strided<'_>, out: &mut [f32]) {
        for (i, o) in out.iter_mut().enumerate() {
            let c = cond.data[strided_offset(i, shape, cond.strides, cond.offset)];
            let src = if c != 0.0 { t } else { f };
            *o = src.data[strided_offset(i, shape, src.strides, src.offset)];
        }
    }

    fn conv1d_backward(&self, p: &Conv1d, x: &[f32], w: &[f32], g: &[f32], dx: &mut [f32], dw: &mut [f32]) {
        let t_out = p.t_out();
        dx.fill(0.0);
        dw.fill(0.0);
        for b in 0..p.batch {
            for co in 0..p.cout {
                for t in 0..t_out {
                    let gv = g[(b * p.cout + co) * t_out + t];
                    for ci in 0..p.cin {
                        for kk in 0..p.k {
                            let src = t + kk * p.dilation;
                            if src < p.pad_left || src - p.pad_left >= p.t_in {
                                continue;
                            }
                            let xi = (b * p.cin + ci) * p.t_in + src - p.pad_left;
                            let wi = (co * p.cin + ci) * p.k + kk;
                            dw[wi] += gv * x[xi];
                            dx[xi] += gv * w[wi];
                        }
                    }
                }
            }
        }
    }

    fn gather_rows(&self, table: FloatSlice<'_>, cols: usize, ids: &[u32], out: &mut [f32]) {
        for (r, id) in ids.iter().enumerate() {
            for j in 0..cols {
                out[r * cols + j] = table.get(*id as usize * cols + j);
            }
        }
    }

    fn weight_matmul(&self, w: &super::WeightMat<'_>, x: &[f32], m: usize, y: &mut [f32]) {
        super::weights::weight_matmul_scalar(w, x, m, y)
    }

    fn weight_decode(&self, w: &super::WeightMat<'_>, out: &mut [f32]) {
        super::weights::weight_decode_scalar(w, out)
    }
}
