//! Small products over time frames, for streaming models (the real-time amp): `out[t] +=
//! x[t] W` for `n` frames, where a frame is a short channel vector (2..64 values) and `W`
//! is `[ni, no]`. Register-blocked (4 frames by 8, then 4, outputs) under AVX2/FMA when the CPU has
//! it; no allocation, no threads, so it is safe on an audio thread.

use super::simd::{self, Level};
use crate::backend::frames::{frames_gemm_acc_spec, FrameGemm};

/// [`frames_gemm_acc_spec`] on the fastest path available (same sums per output, in the same
/// order of `i`, but fused multiply-adds under AVX2).
pub fn frames_gemm_acc(g: FrameGemm, x: &[f32], w: &[f32], out: &mut [f32]) {
    let FrameGemm { n, ni, no, xs, os } = g;
    if n == 0 || no == 0 {
        return;
    }
    // The unsafe path below relies on these bounds; `Kernels::frames_gemm_acc`'s callers
    // have checked them (`FrameGemm::check`), so this never fires on a checked call.
    assert!(g.check(x, w, out).is_ok(), "frames_gemm_acc: operand sizes");
    #[cfg(target_arch = "x86_64")]
    if simd::level().has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA; sizes were checked above.
        unsafe { avx2(n, ni, no, x, xs, w, out, os) };
        return;
    }
    let _ = Level::Portable;
    frames_gemm_acc_spec(g, x, w, out)
}

/// # Safety
/// AVX2 and FMA present; the operands hold what [`frames_gemm_acc`] checked.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn avx2(n: usize, ni: usize, no: usize, x: &[f32], xs: usize, w: &[f32], out: &mut [f32], os: usize) {
    let mut t = 0;
    // SAFETY: t + 4 <= n here and below t < n; the block helper's contract holds.
    unsafe {
        while t + 4 <= n {
            rows::<4>(t, ni, no, x.as_ptr(), xs, w.as_ptr(), out.as_mut_ptr(), os);
            t += 4;
        }
        while t < n {
            rows::<1>(t, ni, no, x.as_ptr(), xs, w.as_ptr(), out.as_mut_ptr(), os);
            t += 1;
        }
    }
}

/// `R` frames starting at `t`, all outputs: 8-wide column chunks, then one 4-wide chunk,
/// then single columns.
///
/// # Safety
/// AVX2/FMA enabled by the caller; frames `t..t+R` and every column `< no` lie inside the
/// operands.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn rows<const R: usize>(
    t: usize,
    ni: usize,
    no: usize,
    xp: *const f32,
    xs: usize,
    wp: *const f32,
    op: *mut f32,
    os: usize,
) {
    use std::arch::x86_64::*;
    let mut o = 0;
    // Full 8-wide chunks with plain loads and stores.
    while o + 8 <= no {
        // SAFETY: columns o..o+8 lie inside row (t + r) of out and row i of w.
        unsafe {
            let mut acc = [_mm256_setzero_ps(); R];
            for (r, a) in acc.iter_mut().enumerate() {
                *a = _mm256_loadu_ps(op.add((t + r) * os + o));
            }
            for i in 0..ni {
                let wv = _mm256_loadu_ps(wp.add(i * no + o));
                for (r, a) in acc.iter_mut().enumerate() {
                    *a = _mm256_fmadd_ps(_mm256_set1_ps(*xp.add((t + r) * xs + i)), wv, *a);
                }
            }
            for (r, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(op.add((t + r) * os + o), *a);
            }
        }
        o += 8;
    }
    // A 4-wide chunk in 128-bit registers (the channel counts of the small presets are often
    // 4 or 12): masked AVX loads and stores are slow on some cores.
    if o + 4 <= no {
        // SAFETY: columns o..o+4 lie inside row (t + r) of out and row i of w.
        unsafe {
            let mut acc = [_mm_setzero_ps(); R];
            for (r, a) in acc.iter_mut().enumerate() {
                *a = _mm_loadu_ps(op.add((t + r) * os + o));
            }
            for i in 0..ni {
                let wv = _mm_loadu_ps(wp.add(i * no + o));
                for (r, a) in acc.iter_mut().enumerate() {
                    *a = _mm_fmadd_ps(_mm_set1_ps(*xp.add((t + r) * xs + i)), wv, *a);
                }
            }
            for (r, a) in acc.iter().enumerate() {
                _mm_storeu_ps(op.add((t + r) * os + o), *a);
            }
        }
        o += 4;
    }
    // The last 0..3 columns, one at a time (each a sum over `ni`, in the same order).
    for c in o..no {
        for r in 0..R {
            // SAFETY: column c < no lies inside row (t + r) of out and row i of w.
            unsafe {
                let mut acc = *op.add((t + r) * os + c);
                for i in 0..ni {
                    acc = (*xp.add((t + r) * xs + i)).mul_add(*wp.add(i * no + c), acc);
                }
                *op.add((t + r) * os + c) = acc;
            }
        }
    }
}
