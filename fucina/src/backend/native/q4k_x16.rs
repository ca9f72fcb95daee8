//! Products with Q4_K weights in the sixteen-row interleaved layout
//! ([`crate::backend::interleave`]): one 64-byte load holds four nibble bytes of each of
//! sixteen rows, so one `vpdpbusd` with the four matching activation bytes broadcast adds
//! sixteen rows' partial dot products; the scales, minimums and f16 factors of sixteen rows
//! are unpacked together, once per super-block, and shared by up to four activation rows.
//!
//! The integer sums per super-block equal the scalar spec's exactly (Q8_K activations, the
//! same `isum` and `msum`); only the f32 accumulation across super-blocks rounds
//! differently.

use super::super::interleave::{X16, X16_BLOCK, X16_QS, X16_SCALES};
use super::super::qdot_k::{self, Q8_K_BYTES};
use super::super::weights::{activation_row_bytes, quantize_activations, WeightMat};
use super::simd::has_avx512_int;
use rayon::prelude::*;

/// `y [m, n] = x [m, k] W^T` for an interleaved Q4_K weight (`w.format` is
/// [`crate::backend::WeightFormat::Q4KX16`]): groups of sixteen weight rows split over the pool.
pub fn matmul(w: &WeightMat<'_>, x: &[f32], m: usize, y: &mut [f32], parallel: bool) {
    let (n, k) = (w.rows, w.cols);
    let a_row = activation_row_bytes(w.format, k);
    let mut qa = vec![0u8; m * a_row];
    quantize_activations(w.format, x, k, &mut qa);
    let groups = n / X16;
    let per = if parallel { groups.div_ceil(8 * rayon::current_num_threads()).max(1) } else { groups };
    let out = Out(y.as_mut_ptr());
    let task = |t: usize| {
        let (g0, g1) = (t * per, ((t + 1) * per).min(groups));
        fill_groups(w, &qa, a_row, m, g0, g1, &out);
    };
    if parallel {
        (0..groups.div_ceil(per)).into_par_iter().for_each(task);
    } else {
        (0..groups.div_ceil(per)).for_each(task);
    }
}

/// The output `[m, n]`, written by ranges of sixteen-row groups from several tasks.
struct Out(*mut f32);

// SAFETY: `matmul` hands each task a disjoint range of groups, and a task writes only the
// columns of its groups.
unsafe impl Sync for Out {}

/// Fills the columns of groups `g0..g1` for every activation row.
fn fill_groups(w: &WeightMat<'_>, qa: &[u8], a_row: usize, m: usize, g0: usize, g1: usize, out: &Out) {
    let (n, k) = (w.rows, w.cols);
    let gb = k / qdot_k::QK_K * X16_BLOCK;
    let act = |i: usize| &qa[i * a_row..(i + 1) * a_row];
    let set = |i: usize, g: usize, v: &[f32; X16]| {
        for (r, x) in v.iter().enumerate() {
            // SAFETY: i < m and g * 16 + r < n; the group lies in this task's range.
            unsafe { *out.0.add(i * n + g * X16 + r) = *x };
        }
    };
    #[cfg(target_arch = "x86_64")]
    if has_avx512_int() {
        for g in g0..g1 {
            let blocks = &w.data[g * gb..(g + 1) * gb];
            let mut i = 0;
            while i < m {
                let r = (m - i).min(4);
                let mut res = [[0.0f32; X16]; 4];
                // SAFETY: has_avx512_int reports the features the kernels enable; `blocks`
                // holds whole interleaved super-blocks and each activation row the matching
                // Q8_K blocks.
                unsafe {
                    match r {
                        4 => avx512::dot_x16::<4>(blocks, [act(i), act(i + 1), act(i + 2), act(i + 3)], &mut res),
                        3 => avx512::dot_x16::<3>(blocks, [act(i), act(i + 1), act(i + 2)], &mut res),
                        2 => avx512::dot_x16::<2>(blocks, [act(i), act(i + 1)], &mut res),
                        _ => avx512::dot_x16::<1>(blocks, [act(i)], &mut res),
                    }
                }
                for (d, v) in res.iter().take(r).enumerate() {
                    set(i + d, g, v);
                }
                i += r;
            }
        }
        return;
    }
    // Elsewhere: each row gathered back to Q4_K and dotted by this CPU's row kernel.
    let kern = qdot_k::row_kernel(qdot_k::KFormat::Q4K);
    let mut buf = Vec::new();
    for g in g0..g1 {
        let mut cols = [0.0f32; X16];
        for i in 0..m {
            for (r, c) in cols.iter_mut().enumerate() {
                let row = w.gather_row(g * X16 + r, &mut buf);
                // SAFETY: the gathered row holds whole Q4_K blocks, the activation row the
                // matching Q8_K blocks; the kernel was chosen for this CPU.
                *c = unsafe { kern(row, act(i)) };
            }
            set(i, g, &cols);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::*;
    use std::arch::x86_64::*;

    /// Sixteen interleaved Q4_K rows (`blocks`, whole super-blocks) times `R` Q8_K rows,
    /// into `res[r][row]`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C; `blocks` holds whole interleaved
    /// super-blocks and each `a[r]` the matching Q8_K blocks.
    // The per-activation-row register arrays are indexed from loops over two axes.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub unsafe fn dot_x16<const R: usize>(blocks: &[u8], a: [&[u8]; R], res: &mut [[f32; X16]; 4]) {
        let m4 = _mm512_set1_epi8(0x0F);
        let m6 = _mm512_set1_epi8(63);
        let m30 = _mm512_set1_epi8(0x30);
        let mut acc = [_mm512_setzero_ps(); R];
        // Scales then minimums of the eight sub-blocks, sixteen rows each.
        let mut sm = [0u8; 256];
        for (b, blk) in blocks.chunks_exact(X16_BLOCK).enumerate() {
            let ab: [&[u8]; R] = std::array::from_fn(|r| &a[r][b * Q8_K_BYTES..(b + 1) * Q8_K_BYTES]);
            // SAFETY (this block): the features are enabled; every load stays inside the
            // interleaved block (scales 64..256, nibbles 256 + 64 (8c + t) + 64 <= 2304) or the
            // activation block (4 + 64c + 32 + 4t + 4 <= 260, sums 260..292), or the arrays.
            unsafe {
                let p = blk.as_ptr();
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i));
                let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(p.add(32) as *const __m256i));
                // Bytes 0..4, 4..8 and 8..12 of the sixteen rows' scale fields.
                let s0 = _mm512_loadu_si512(p.add(X16_SCALES) as *const __m512i);
                let s1 = _mm512_loadu_si512(p.add(X16_SCALES + 64) as *const __m512i);
                let s2 = _mm512_loadu_si512(p.add(X16_SCALES + 128) as *const __m512i);
                let sc_lo = _mm512_and_si512(s0, m6);
                let mn_lo = _mm512_and_si512(s1, m6);
                let sc_hi = _mm512_or_si512(_mm512_and_si512(s2, m4), _mm512_and_si512(_mm512_srli_epi16(s0, 2), m30));
                let mn_hi = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16(s2, 4), m4),
                    _mm512_and_si512(_mm512_srli_epi16(s1, 2), m30),
                );
                let q = sm.as_mut_ptr();
                _mm512_storeu_si512(q as *mut __m512i, sc_lo);
                _mm512_storeu_si512(q.add(64) as *mut __m512i, sc_hi);
                _mm512_storeu_si512(q.add(128) as *mut __m512i, mn_lo);
                _mm512_storeu_si512(q.add(192) as *mut __m512i, mn_hi);

                // Minimums: sum over sub-blocks s of min[row][s] * (activation sum of s),
                // two sub-blocks per vpdpwssd (i16 pairs per row).
                let mut msum = [_mm512_setzero_si512(); R];
                let mut pairs = [[0i32; 4]; R];
                for r in 0..R {
                    let bs = _mm256_loadu_si256(ab[r].as_ptr().add(260) as *const __m256i);
                    let s8 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
                    _mm_storeu_si128(pairs[r].as_mut_ptr() as *mut __m128i, s8);
                }
                for pr in 0..4 {
                    let ms = _mm_loadu_si128(q.add(128 + 32 * pr) as *const __m128i);
                    let ms1 = _mm_loadu_si128(q.add(128 + 32 * pr + 16) as *const __m128i);
                    let lo = _mm_unpacklo_epi8(ms, ms1);
                    let hi = _mm_unpackhi_epi8(ms, ms1);
                    let mw = _mm512_cvtepu8_epi16(_mm256_set_m128i(hi, lo));
                    for r in 0..R {
                        msum[r] = _mm512_dpwssd_epi32(msum[r], mw, _mm512_set1_epi32(pairs[r][pr]));
                    }
                }

                let mut isum = [_mm512_setzero_si512(); R];
                for c in 0..4 {
                    let mut lo = [_mm512_setzero_si512(); R];
                    let mut hi = [_mm512_setzero_si512(); R];
                    for t in 0..8 {
                        let v = _mm512_loadu_si512(p.add(X16_QS + 64 * (8 * c + t)) as *const __m512i);
                        let l = _mm512_and_si512(v, m4);
                        let h = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                        for r in 0..R {
                            let ap = ab[r].as_ptr().add(4 + 64 * c + 4 * t);
                            let a_lo = _mm512_set1_epi32((ap as *const i32).read_unaligned());
                            let a_hi = _mm512_set1_epi32((ap.add(32) as *const i32).read_unaligned());
                            lo[r] = _mm512_dpbusd_epi32(lo[r], l, a_lo);
                            hi[r] = _mm512_dpbusd_epi32(hi[r], h, a_hi);
                        }
                    }
                    let s_lo = _mm512_cvtepu8_epi32(_mm_loadu_si128(q.add(32 * c) as *const __m128i));
                    let s_hi = _mm512_cvtepu8_epi32(_mm_loadu_si128(q.add(32 * c + 16) as *const __m128i));
                    for r in 0..R {
                        let both = _mm512_add_epi32(_mm512_mullo_epi32(lo[r], s_lo), _mm512_mullo_epi32(hi[r], s_hi));
                        isum[r] = _mm512_add_epi32(isum[r], both);
                    }
                }
                for r in 0..R {
                    let da = _mm512_set1_ps(f32::from_le_bytes([ab[r][0], ab[r][1], ab[r][2], ab[r][3]]));
                    acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(isum[r]), acc[r]);
                    acc[r] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, da), _mm512_cvtepi32_ps(msum[r]), acc[r]);
                }
            }
        }
        for r in 0..R {
            // SAFETY: 64 bytes are written into a 16-float row.
            unsafe { _mm512_storeu_ps(res[r].as_mut_ptr(), acc[r]) };
        }
    }
}
