//! Native reductions, softmax and normalizations, parallel over rows.

use super::par;
use super::simd::{self, Fused, MulAdd, Unfused};
use crate::backend::ReduceOp;

const ROWS_MIN: usize = 8;

#[inline(always)]
fn sum_body(x: &[f32]) -> f32 {
    let mut acc = [0.0f32; 16];
    let chunks = x.len() / 16;
    for c in 0..chunks {
        for i in 0..16 {
            acc[i] += x[c * 16 + i];
        }
    }
    let tail: f32 = x[chunks * 16..].iter().sum();
    acc.iter().sum::<f32>() + tail
}

#[inline(always)]
fn max_body(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; 16];
    let chunks = x.len() / 16;
    for c in 0..chunks {
        for i in 0..16 {
            acc[i] = acc[i].max(x[c * 16 + i]);
        }
    }
    let tail = x[chunks * 16..].iter().copied().fold(f32::NEG_INFINITY, f32::max);
    acc.iter().copied().fold(tail, f32::max)
}

/// Writes `exp(x - m)` into `out` and returns its sum.
#[inline(always)]
fn exp_sum_body<M: MulAdd>(x: &[f32], m: f32, out: &mut [f32]) -> f32 {
    for (o, v) in out.iter_mut().zip(x) {
        *o = simd::exp::<M>(*v - m);
    }
    sum_body(out)
}

#[inline(always)]
fn row_ops<M: MulAdd>(kind: RowKind<'_>, x: &[f32], out: &mut [f32]) {
    let n = x.len();
    match kind {
        RowKind::Softmax { log } => {
            let m = max_body(x);
            if m == f32::NEG_INFINITY {
                out.fill(if log { f32::NEG_INFINITY } else { f32::NAN });
                return;
            }
            let s = exp_sum_body::<M>(x, m, out);
            if log {
                let ls = m + s.ln();
                out.iter_mut().zip(x).for_each(|(o, v)| *o = v - ls);
            } else {
                let inv = 1.0 / s;
                out.iter_mut().for_each(|o| *o *= inv);
            }
        }
        RowKind::Rms { w, eps } => {
            let mut acc = [0.0f32; 16];
            let chunks = n / 16;
            for c in 0..chunks {
                for i in 0..16 {
                    let v = x[c * 16 + i];
                    acc[i] = M::mul_add(v, v, acc[i]);
                }
            }
            let tail: f32 = x[chunks * 16..].iter().map(|v| v * v).sum();
            let inv = 1.0 / ((acc.iter().sum::<f32>() + tail) / n as f32 + eps).sqrt();
            match w {
                Some(w) => out.iter_mut().zip(x.iter().zip(w)).for_each(|(o, (v, wv))| *o = v * inv * wv),
                None => out.iter_mut().zip(x).for_each(|(o, v)| *o = v * inv),
            }
        }
        RowKind::Layer { w, b, eps } => {
            let mean = sum_body(x) / n as f32;
            for (o, v) in out.iter_mut().zip(x) {
                *o = v - mean;
            }
            let mut acc = [0.0f32; 16];
            let chunks = n / 16;
            for c in 0..chunks {
                for i in 0..16 {
                    let v = out[c * 16 + i];
                    acc[i] = M::mul_add(v, v, acc[i]);
                }
            }
            let tail: f32 = out[chunks * 16..].iter().map(|v| v * v).sum();
            let inv = 1.0 / ((acc.iter().sum::<f32>() + tail) / n as f32 + eps).sqrt();
            for (j, o) in out.iter_mut().enumerate() {
                *o = *o * inv * w.map_or(1.0, |w| w[j]) + b.map_or(0.0, |b| b[j]);
            }
        }
    }
}

#[derive(Clone, Copy)]
enum RowKind<'a> {
    Softmax { log: bool },
    Rms { w: Option<&'a [f32]>, eps: f32 },
    Layer { w: Option<&'a [f32]>, b: Option<&'a [f32]>, eps: f32 },
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn row_ops_avx2(kind: RowKind<'_>, x: &[f32], out: &mut [f32]) {
    row_ops::<Fused>(kind, x, out)
}

fn rows(kind: RowKind<'_>, x: &[f32], rows: usize, cols: usize, out: &mut [f32]) {
    if cols == 0 || rows == 0 {
        return;
    }
    let f = |(o, xr): (&mut [f32], &[f32])| match simd::level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx2 holds only when the CPU has AVX2 and FMA.
        l if l.has_avx2() => unsafe { row_ops_avx2(kind, xr, o) },
        _ => row_ops::<Unfused>(kind, xr, o),
    };
    let out = &mut out[..rows * cols];
    let x = &x[..rows * cols];
    if par(rows * cols) {
        super::par_chunks(out, cols, ROWS_MIN, |r, o| f((o, &x[r * cols..(r + 1) * cols])));
    } else {
        out.chunks_mut(cols).zip(x.chunks(cols)).for_each(f);
    }
}

/// Softmax or log-softmax over rows.
pub fn softmax(x: &[f32], r: usize, cols: usize, log: bool, out: &mut [f32]) {
    rows(RowKind::Softmax { log }, x, r, cols, out)
}

/// Softmax over rows on the calling thread (for callers already running on the pool).
pub fn softmax_serial(x: &[f32], r: usize, cols: usize, out: &mut [f32]) {
    for (o, xr) in out[..r * cols].chunks_mut(cols).zip(x[..r * cols].chunks(cols)) {
        match simd::level() {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: has_avx2 holds only when the CPU has AVX2 and FMA.
            l if l.has_avx2() => unsafe { row_ops_avx2(RowKind::Softmax { log: false }, xr, o) },
            _ => row_ops::<Unfused>(RowKind::Softmax { log: false }, xr, o),
        }
    }
}

/// RMS norm over rows.
pub fn rms_norm(x: &[f32], r: usize, cols: usize, w: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    rows(RowKind::Rms { w, eps }, x, r, cols, out)
}

/// Layer norm over rows.
pub fn layer_norm(x: &[f32], r: usize, cols: usize, w: Option<&[f32]>, b: Option<&[f32]>, eps: f32, out: &mut [f32]) {
    rows(RowKind::Layer { w, b, eps }, x, r, cols, out)
}

fn combine(op: ReduceOp, acc: f32, v: f32) -> f32 {
    match op {
        ReduceOp::Sum => acc + v,
        ReduceOp::Max | ReduceOp::LogSumExp => acc.max(v),
        ReduceOp::Min => acc.min(v),
    }
}

fn init(op: ReduceOp) -> f32 {
    match op {
        ReduceOp::Sum => 0.0,
        ReduceOp::Max | ReduceOp::LogSumExp => f32::NEG_INFINITY,
        ReduceOp::Min => f32::INFINITY,
    }
}

/// Reduces one `[len, inner]` slab into `out[inner]`.
fn reduce_slab(op: ReduceOp, x: &[f32], len: usize, inner: usize, out: &mut [f32]) {
    if inner == 1 {
        out[0] = match op {
            ReduceOp::Sum => sum_body(x),
            ReduceOp::Max => max_body(x),
            ReduceOp::Min => x.iter().copied().fold(f32::INFINITY, f32::min),
            ReduceOp::LogSumExp => {
                let m = max_body(x);
                if m == f32::NEG_INFINITY {
                    m
                } else {
                    m + x.iter().map(|v| simd::exp::<Unfused>(v - m)).sum::<f32>().ln()
                }
            }
        };
        return;
    }
    out.fill(init(op));
    for j in 0..len {
        let row = &x[j * inner..(j + 1) * inner];
        out.iter_mut().zip(row).for_each(|(o, v)| *o = combine(op, *o, *v));
    }
    if op == ReduceOp::LogSumExp {
        let mut s = vec![0.0f32; inner];
        for j in 0..len {
            let row = &x[j * inner..(j + 1) * inner];
            for i in 0..inner {
                if out[i] != f32::NEG_INFINITY {
                    s[i] += simd::exp::<Unfused>(row[i] - out[i]);
                }
            }
        }
        for i in 0..inner {
            if out[i] != f32::NEG_INFINITY {
                out[i] += s[i].ln();
            }
        }
    }
}

/// Reduces the middle axis of `[outer, len, inner]`.
pub fn reduce(op: ReduceOp, x: &[f32], outer: usize, len: usize, inner: usize, out: &mut [f32]) {
    if outer * inner == 0 {
        return;
    }
    let slab = len * inner;
    if len == 0 {
        out[..outer * inner].fill(if op == ReduceOp::Sum { 0.0 } else { init(op) });
        return;
    }
    let f = |(o, xs): (&mut [f32], &[f32])| reduce_slab(op, xs, len, inner, o);
    if outer > 1 && par(outer * slab) {
        super::par_chunks(&mut out[..outer * inner], inner, 1, |r, o| f((o, &x[r * slab..(r + 1) * slab])));
    } else {
        out[..outer * inner].chunks_mut(inner).zip(x.chunks(slab)).for_each(f);
    }
}
