//! The native backend: SIMD kernels (runtime-detected AVX2/FMA, portable fallback) on rayon.
//!
//! Every kernel here has a twin in `scalar`; the parity suite checks they agree.

mod attention;
mod conv2d;
mod decode_bf16;
mod delta;
pub use decode_bf16::{decode_row_bf16, BlockRow};
mod elementwise;
#[cfg(feature = "nam")]
mod frames;
mod gemm;
mod interleaved;
pub use interleaved::has_avx2_kernel;
mod kgemm;
pub use gemm::{gemm_packed, packed_nr, transpose_into_panel, KC as GEMM_KC};
mod rank;
mod reduce;
mod rowgemm;
mod spectrum;
pub use rowgemm::{gemm_rows, gemm_rows_bf16, has_bf16_dot};
pub mod simd;
pub mod team;
mod weights;

use super::{Attention, BinaryOp, Conv1d, FloatSlice, Gemm, Kernels, MatRef, ReduceOp, Strided, UnaryOp};
use rayon::prelude::*;

thread_local! {
    static SERIAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with native kernels forced serial on this thread (for ops too small to hand off).
pub fn serial<R>(f: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            SERIAL.with(|s| s.set(self.0));
        }
    }
    let _reset = Reset(SERIAL.with(|s| s.replace(true)));
    f()
}

/// Whether this thread is inside [`serial`] (callers that size their own splits check it).
pub fn in_serial() -> bool {
    SERIAL.with(|s| s.get())
}

/// Whether a kernel may split `work` units over the pool: only on a pool thread, outside
/// [`serial`], and when the work is large enough to pay for it.
pub fn par(work: usize) -> bool {
    work >= PAR_MIN && !in_serial() && rayon::current_thread_index().is_some()
}

/// The chunks of `len` elements of `out` (the last may be shorter) as `f(index, chunk)`,
/// in tasks of at least `min` chunks (about four tasks per thread), through
/// [`team::for_each`]: on the team this thread drives, so an elementwise op between two
/// products runs on the helpers already spinning for the next product instead of on pool
/// threads woken for it (which on two cores competed with the spinning helper); on the pool
/// or serially otherwise. Which chunks a task gets never changes what it computes.
pub(crate) fn par_chunks<T: Send>(out: &mut [T], len: usize, min: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let len = len.max(1);
    let total = out.len();
    let chunks = total.div_ceil(len);
    let threads = rayon::current_num_threads().max(1);
    let per = chunks.div_ceil(4 * threads).max(min).max(1);
    let tasks = chunks.div_ceil(per);
    if tasks <= 1 {
        out.chunks_mut(len).enumerate().for_each(|(i, c)| f(i, c));
        return;
    }
    struct Base<T>(*mut T);
    // SAFETY: tasks write pairwise disjoint ranges of `out` (below), which outlives the region.
    unsafe impl<T: Send> Sync for Base<T> {}
    let base = Base(out.as_mut_ptr());
    team::for_each(tasks, |t| {
        let base = &base;
        for c in t * per..((t + 1) * per).min(chunks) {
            let (start, n) = (c * len, len.min(total - c * len));
            // SAFETY: chunk c is `start..start + n` of `out`, inside it, and each chunk index
            // belongs to exactly one task, which team::for_each runs exactly once.
            let chunk = unsafe { std::slice::from_raw_parts_mut(base.0.add(start), n) };
            f(c, chunk);
        }
    });
}

/// How `total` units of work (sixteen-row groups, weight rows, or bytes times rows) of a product of `m`
/// activation rows are cut into tasks for `threads` workers, in the order they are claimed.
///
/// With few rows a product streams its weights from memory, and each task is one sequential
/// stream: long ones pay (two per worker ran a 512 x 1024 Q4_K product at 22-24 GB/s against
/// 17-19 for eight short ones; Zen 4, two threads). But with only two per worker, a worker
/// that a busy VM slows leaves the others waiting for its last long stream at the end of the
/// region. So the tasks shrink as they go (guided scheduling: each a `2 threads`-th of what
/// is left, down to a `16 threads`-th of the whole): most bytes still stream in long runs,
/// and the region ends on short tasks that whichever worker is free takes.
///
/// With more rows the product is bound by arithmetic, and eight equal tasks per worker keep
/// the workers even.
pub(crate) fn task_sizes(total: usize, m: usize, threads: usize) -> Vec<usize> {
    let threads = threads.max(1);
    if total == 0 {
        return Vec::new();
    }
    if m > 4 {
        let per = total.div_ceil(8 * threads).max(1);
        return (0..total.div_ceil(per)).map(|t| per.min(total - t * per)).collect();
    }
    let floor = total.div_ceil(16 * threads).max(1);
    let mut sizes = Vec::new();
    let mut left = total;
    while left > 0 {
        let n = (left / (2 * threads)).max(floor).min(left);
        sizes.push(n);
        left -= n;
    }
    sizes
}

/// Below this many elements (or multiply-adds) a kernel does not split its work.
pub(crate) const PAR_MIN: usize = 1 << 14;

/// im2col of one batch item `x [cin, t_in]`: `cols[(ci*k + tap), t] = x[ci, t + tap*dilation - pad_left]` (or 0).
fn im2col(p: &Conv1d, x: &[f32], cols: &mut [f32]) {
    let t_out = p.t_out();
    let fill = |(row, dst): (usize, &mut [f32])| {
        let (ci, tap) = (row / p.k, row % p.k);
        let src = &x[ci * p.t_in..(ci + 1) * p.t_in];
        for (t, d) in dst.iter_mut().enumerate() {
            let s = t + tap * p.dilation;
            *d = if s >= p.pad_left && s - p.pad_left < p.t_in { src[s - p.pad_left] } else { 0.0 };
        }
    };
    if par(cols.len()) {
        cols.par_chunks_mut(t_out).enumerate().for_each(fill);
    } else {
        cols.chunks_mut(t_out).enumerate().for_each(fill);
    }
}

/// SIMD + rayon kernels; they run on the thread pool of the calling `ExecContext`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Native;

impl Kernels for Native {
    fn name(&self) -> &'static str {
        "native"
    }

    fn unary(&self, op: UnaryOp, x: &[f32], y: &mut [f32]) {
        elementwise::unary(op, x, y)
    }

    #[cfg(feature = "nam")]
    fn frames_gemm_acc(&self, g: super::frames::FrameGemm, x: &[f32], w: &[f32], out: &mut [f32]) {
        frames::frames_gemm_acc(g, x, w, out)
    }

    fn power_spectrum(&self, p: &super::spectrum::Spectrum, x: &[f32], out: &mut [f32]) {
        spectrum::power_spectrum(p, x, out)
    }

    fn binary(&self, op: BinaryOp, shape: &[usize], a: Strided<'_>, b: Strided<'_>, out: &mut [f32]) {
        elementwise::binary(op, shape, a, b, out)
    }

    fn copy_strided(&self, src: FloatSlice<'_>, offset: usize, shape: &[usize], strides: &[usize], out: &mut [f32]) {
        elementwise::copy_strided(src, offset, shape, strides, out)
    }

    fn reduce(&self, op: ReduceOp, x: &[f32], outer: usize, len: usize, inner: usize, out: &mut [f32]) {
        reduce::reduce(op, x, outer, len, inner, out)
    }

    fn softmax(&self, x: &[f32], rows: usize, cols: usize, log: bool, out: &mut [f32]) {
        reduce::softmax(x, rows, cols, log, out)
    }

    fn rms_norm(&self, x: &[f32], rows: usize, cols: usize, w: Option<&[f32]>, eps: f32, out: &mut [f32]) {
        reduce::rms_norm(x, rows, cols, w, eps, out)
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
        reduce::layer_norm(x, rows, cols, w, b, eps, out)
    }

    fn gemm(&self, g: &Gemm<'_>, c: &mut [f32]) {
        gemm::gemm(g, c)
    }

    fn attention(&self, p: &Attention<'_>, out: &mut [f32]) {
        attention::attention(p, out)
    }

    fn attention_backward(
        &self,
        p: &crate::backend::AttentionGrad<'_>,
        dq: &mut [f32],
        dk: &mut [f32],
        dv: &mut [f32],
    ) {
        attention::attention_backward(p, dq, dk, dv)
    }

    fn conv1d(&self, p: &Conv1d, x: &[f32], w: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
        let t_out = p.t_out();
        let kk = p.cin * p.k;
        let mut cols = vec![0.0f32; kk * t_out];
        for b in 0..p.batch {
            im2col(p, &x[b * p.cin * p.t_in..(b + 1) * p.cin * p.t_in], &mut cols);
            let g = Gemm {
                batch: 1,
                m: p.cout,
                n: t_out,
                k: kk,
                a: MatRef { data: FloatSlice::F32(w), offset: 0, bs: 0, rs: kk, cs: 1 },
                b: MatRef { data: FloatSlice::F32(&cols), offset: 0, bs: 0, rs: t_out, cs: 1 },
            };
            let ob = &mut out[b * p.cout * t_out..(b + 1) * p.cout * t_out];
            gemm::gemm(&g, ob);
            if let Some(bias) = bias {
                for (row, bv) in ob.chunks_mut(t_out).zip(bias) {
                    row.iter_mut().for_each(|v| *v += bv);
                }
            }
        }
    }

    fn select(&self, shape: &[usize], cond: Strided<'_>, t: Strided<'_>, f: Strided<'_>, out: &mut [f32]) {
        elementwise::select(shape, cond, t, f, out)
    }

    fn conv1d_backward(&self, p: &Conv1d, x: &[f32], w: &[f32], g: &[f32], dx: &mut [f32], dw: &mut [f32]) {
        // dW = sum_b g_b * cols_b^T and dcols_b = W^T * g_b, then col2im into dx.
        let t_out = p.t_out();
        let kk = p.cin * p.k;
        dx.fill(0.0);
        dw.fill(0.0);
        let mut cols = vec![0.0f32; kk * t_out];
        let mut dwb = vec![0.0f32; p.cout * kk];
        let mut dcols = vec![0.0f32; kk * t_out];
        for b in 0..p.batch {
            im2col(p, &x[b * p.cin * p.t_in..(b + 1) * p.cin * p.t_in], &mut cols);
            let gb = &g[b * p.cout * t_out..(b + 1) * p.cout * t_out];
            let gw = Gemm {
                batch: 1,
                m: p.cout,
                n: kk,
                k: t_out,
                a: MatRef { data: FloatSlice::F32(gb), offset: 0, bs: 0, rs: t_out, cs: 1 },
                b: MatRef { data: FloatSlice::F32(&cols), offset: 0, bs: 0, rs: 1, cs: t_out },
            };
            gemm::gemm(&gw, &mut dwb);
            dw.iter_mut().zip(&dwb).for_each(|(d, v)| *d += v);
            let gx = Gemm {
                batch: 1,
                m: kk,
                n: t_out,
                k: p.cout,
                a: MatRef { data: FloatSlice::F32(w), offset: 0, bs: 0, rs: 1, cs: kk },
                b: MatRef { data: FloatSlice::F32(gb), offset: 0, bs: 0, rs: t_out, cs: 1 },
            };
            gemm::gemm(&gx, &mut dcols);
            for (row, src) in dcols.chunks(t_out).enumerate() {
                let (ci, tap) = (row / p.k, row % p.k);
                let dst = &mut dx[(b * p.cin + ci) * p.t_in..(b * p.cin + ci + 1) * p.t_in];
                for (t, v) in src.iter().enumerate() {
                    let s = t + tap * p.dilation;
                    if s >= p.pad_left && s - p.pad_left < p.t_in {
                        dst[s - p.pad_left] += v;
                    }
                }
            }
        }
    }

    fn gather_rows(&self, table: FloatSlice<'_>, cols: usize, ids: &[u32], out: &mut [f32]) {
        if cols == 0 {
            return;
        }
        let copy = |(row, id): (&mut [f32], &u32)| {
            let base = *id as usize * cols;
            match table {
                FloatSlice::F32(t) => row.copy_from_slice(&t[base..base + cols]),
                other => row.iter_mut().enumerate().for_each(|(j, v)| *v = other.get(base + j)),
            }
        };
        if par(out.len()) {
            par_chunks(out, cols, 1, |r, row| copy((row, &ids[r])));
        } else {
            out.chunks_mut(cols).zip(ids.iter()).for_each(copy);
        }
    }

    fn weight_matmul(&self, w: &super::WeightMat<'_>, x: &[f32], m: usize, y: &mut [f32]) {
        weights::weight_matmul(w, x, m, y)
    }

    fn weight_matmul_group(&self, jobs: &mut [super::WeightJob<'_>]) {
        weights::weight_matmul_group(jobs)
    }

    fn weight_decode(&self, w: &super::WeightMat<'_>, out: &mut [f32]) {
        weights::weight_decode(w, out)
    }

    fn weight_repack(&self, w: &super::WeightMat<'_>, layout: super::Interleaved, out: &mut [u8]) {
        weights::weight_repack(w, layout, out)
    }

    fn arg_reduce(&self, op: super::ArgOp, x: &[f32], outer: usize, len: usize, inner: usize, out: &mut [u32]) {
        rank::arg_reduce(op, x, outer, len, inner, out)
    }

    fn topk(&self, x: &[f32], outer: usize, len: usize, inner: usize, k: usize, vals: &mut [f32], idx: &mut [u32]) {
        rank::topk(x, outer, len, inner, k, vals, idx)
    }

    fn gated_delta_rule(
        &self,
        p: &super::delta::DeltaRule<'_>,
        form: super::delta::DeltaForm,
        state: &mut [f32],
        out: &mut [f32],
    ) {
        delta::gated_delta_rule(p, form, state, out)
    }

    fn causal_conv1d(&self, p: &super::delta::CausalConv, x: &[f32], w: &[f32], state: &mut [f32], out: &mut [f32]) {
        delta::causal_conv1d(p, x, w, state, out)
    }

    fn cumsum(&self, dir: super::Scan, x: &[f32], outer: usize, len: usize, inner: usize, out: &mut [f32]) {
        rank::cumsum(dir, x, outer, len, inner, out)
    }

    fn conv2d(&self, p: &super::Conv2d, x: &[f32], w: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
        conv2d::conv2d(p, x, w, bias, out)
    }

    fn conv2d_backward(&self, p: &super::Conv2d, x: &[f32], w: &[f32], g: &[f32], dx: &mut [f32], dw: &mut [f32]) {
        conv2d::conv2d_backward(p, x, w, g, dx, dw)
    }

    fn pool2d(&self, p: &super::Pool2d, op: super::PoolOp, x: &[f32], out: &mut [f32], arg: &mut [u32]) {
        conv2d::pool2d(p, op, x, out, arg)
    }

    fn fill_random(&self, rng: &crate::rng::Philox, base: u64, dist: super::Distribution, out: &mut [f32]) {
        const CHUNK: usize = 4096;
        let fill = |(c, chunk): (usize, &mut [f32])| {
            for (j, v) in chunk.iter_mut().enumerate() {
                *v = super::random_value(rng, base, dist, c * CHUNK + j);
            }
        };
        if par(out.len()) {
            out.par_chunks_mut(CHUNK).enumerate().for_each(fill)
        } else {
            out.chunks_mut(CHUNK).enumerate().for_each(fill)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn par_chunks_hands_every_chunk_once_with_its_index() {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(3).build().unwrap();
        let team = Arc::new(team::Team::new(2).unwrap());
        for (total, len, min) in [(1000, 7, 1), (1000, 7, 40), (64, 64, 1), (5, 1, 1), (0, 3, 1), (100_003, 1 << 14, 1)]
        {
            let mut out = vec![usize::MAX; total];
            pool.install(|| {
                team.enter(|| {
                    par_chunks(&mut out, len, min, |c, chunk| {
                        assert!(chunk.len() == len || (c + 1) * len >= total, "chunk {c} of {} elements", chunk.len());
                        for (j, v) in chunk.iter_mut().enumerate() {
                            assert_eq!(*v, usize::MAX, "element written twice");
                            *v = c * len + j;
                        }
                    })
                })
            });
            assert!(out.iter().enumerate().all(|(i, v)| *v == i), "{total} in chunks of {len}");
        }
    }
}

#[cfg(test)]
mod task_size_tests {
    use super::task_sizes;

    #[test]
    fn task_sizes_cover_the_work_and_shrink_for_streaming_products() {
        for threads in [1, 2, 3, 8] {
            for total in [0, 1, 7, 16, 100, 4096, 1 << 20] {
                for m in [1, 4, 5, 64] {
                    let s = task_sizes(total, m, threads);
                    assert_eq!(s.iter().sum::<usize>(), total, "{total} over {threads} threads, {m} rows");
                    assert!(s.iter().all(|&n| n > 0));
                    assert!(s.windows(2).all(|w| w[0] >= w[1]), "sizes grow: {s:?}");
                    if m <= 4 && total >= 64 * threads {
                        // Long streams first (a 2 threads-th of the whole), short tasks last.
                        assert!(s[0] >= total / (2 * threads) && s[s.len() - 1] <= total.div_ceil(16 * threads));
                    }
                    if m > 4 && total >= 8 * threads {
                        // Eight equal tasks per worker (the last one what is left).
                        assert!(s.len() >= 4 * threads && s[..s.len() - 1].iter().all(|&n| n == s[0]), "{s:?}");
                    }
                }
            }
        }
    }
}
