//! AVX-512 K-quant row kernels (F, BW, VL and VNNI): the integer sums of the AVX2 kernels,
//! 64 values per instruction instead of 32, and the scale multiply-add of `maddubs`'
//! pairs fused into one `vpdpwssd`.
//!
//! A Q4_K chunk of 32 bytes holds two groups of 32 values (low nibbles, then high
//! nibbles), and the Q8_K activations of those two groups are 64 contiguous bytes: the
//! chunk is broadcast to both halves of a register and the upper half shifted by four, so one
//! 512-bit `maddubs` meets one 64-byte activation load. Q6_K works the same way on pairs of
//! its 32-value parts. The integer sums equal the scalar spec's exactly; only the f32
//! accumulation across super-blocks (16 lanes here, 8 in AVX2) rounds differently.

use super::{q8k_d, Q8_K_BYTES};
use crate::backend::x86::{f16c_at, hsum128, q8k_sub_block_sums};
use std::arch::x86_64::*;

/// 32 bytes at the start of `p`, unaligned.
#[inline(always)]
unsafe fn load256(p: &[u8]) -> __m256i {
    debug_assert!(p.len() >= 32);
    // SAFETY: callers pass slices of at least 32 bytes.
    unsafe { _mm256_loadu_si256(p.as_ptr() as *const __m256i) }
}

/// 64 bytes at the start of `p`, unaligned.
#[inline(always)]
unsafe fn load512(p: &[u8]) -> __m512i {
    debug_assert!(p.len() >= 64);
    // SAFETY: callers pass slices of at least 64 bytes.
    unsafe { _mm512_loadu_si512(p.as_ptr() as *const __m512i) }
}

/// The i16 lane indices that spread `groups` consecutive scales (starting at `first`) over
/// 32 lanes, `32 / groups` lanes each, for `vpermw`.
#[inline(always)]
unsafe fn spread(first: i16, groups: i16) -> __m512i {
    let per = 32 / groups;
    let idx: [i16; 32] = std::array::from_fn(|l| first + l as i16 / per);
    // SAFETY: 64 bytes are read from a 32-lane i16 array.
    unsafe { _mm512_loadu_si512(idx.as_ptr() as *const __m512i) }
}

/// One Q4_K row times `R` Q8_K rows.
///
/// # Safety
/// The CPU has AVX-512 F/BW/VL/VNNI, FMA and F16C (callers enable them); `w` holds whole
/// Q4_K blocks and each `a[r]` the matching Q8_K blocks.
#[inline(always)]
unsafe fn dot_q4k_rows<const R: usize>(w: &[u8], a: [&[u8]; R]) -> [f32; R] {
    // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
    // memory access below is in bounds as argued where it happens.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0F);
        // The upper 256 bits (the broadcast copy) shift by four: their low nibbles are the
        // chunk's high nibbles.
        let shift = _mm512_setr_epi64(0, 0, 0, 0, 4, 4, 4, 4);
        // In-lane byte shuffles that spread scale 2c (i16 lanes 0..16) and 2c + 1 (16..32) from
        // the eight i16 scales broadcast to every 128-bit lane.
        let pick: [__m512i; 4] = std::array::from_fn(|c| {
            let (lo, hi) = ((((4 * c + 1) << 8) | (4 * c)) as i16, (((4 * c + 3) << 8) | (4 * c + 2)) as i16);
            _mm512_mask_blend_epi16(0xFFFF_0000, _mm512_set1_epi16(lo), _mm512_set1_epi16(hi))
        });
        let mut acc = [_mm512_setzero_ps(); R];
        let mut acc_m = [_mm_setzero_ps(); R];
        for (bi, b) in w.chunks_exact(144).enumerate() {
            let ba: [&[u8]; R] = std::array::from_fn(|r| &a[r][bi * Q8_K_BYTES..(bi + 1) * Q8_K_BYTES]);
            // SAFETY: (this block) the features are enabled by the caller; every load stays in
            // the weight block (16 + 32c + 32 <= 144) or the activation block (4 + 64c + 64 <= 260).
            {
                let (d, dmin) = (f16c_at(b, 0), f16c_at(b, 2));
                let sm = super::avx2::k4_scales_mins(&b[4..20]);
                let mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
                for r in 0..R {
                    // Minimums: m[j] times the activation sum over the 32 values of scale j.
                    let pairs = q8k_sub_block_sums(ba[r]);
                    let prod = _mm_madd_epi16(mins, pairs);
                    acc_m[r] = _mm_fmadd_ps(_mm_set1_ps(dmin * q8k_d(ba[r])), _mm_cvtepi32_ps(prod), acc_m[r]);
                }
                let sc = _mm512_broadcast_i32x4(_mm_cvtepu8_epi16(sm));
                let mut sumi = [_mm512_setzero_si512(); R];
                for (c, pk) in pick.iter().enumerate() {
                    let q = _mm512_broadcast_i64x4(load256(&b[16 + 32 * c..]));
                    let u = _mm512_and_si512(_mm512_srlv_epi64(q, shift), m4);
                    let s = _mm512_shuffle_epi8(sc, *pk);
                    for r in 0..R {
                        let av = load512(&ba[r][4 + 64 * c..]);
                        sumi[r] = _mm512_dpwssd_epi32(sumi[r], _mm512_maddubs_epi16(u, av), s);
                    }
                }
                for r in 0..R {
                    let dd = _mm512_set1_ps(d * q8k_d(ba[r]));
                    acc[r] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(sumi[r]), acc[r]);
                }
            }
        }
        std::array::from_fn(|r| _mm512_reduce_add_ps(acc[r]) - hsum128(acc_m[r]))
    }
}

/// One Q6_K row times `R` Q8_K rows: levels stay unsigned (0..64) for `maddubs`; the offset
/// of 32 comes back out through the activation's group sums, as in the AVX2 kernel.
///
/// # Safety
/// As for [`dot_q4k_rows`], for Q6_K weight blocks.
#[inline(always)]
unsafe fn dot_q6k_rows<const R: usize>(w: &[u8], a: [&[u8]; R]) -> [f32; R] {
    // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
    // memory access below is in bounds as argued where it happens.
    unsafe {
        let m4 = _mm512_set1_epi8(0x0F);
        let m3 = _mm512_set1_epi8(3);
        // Parts 0 and 1 of a half take the high bits at shifts 0 and 2, parts 2 and 3 at 4 and 6.
        let sh01 = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2);
        let sh23 = _mm512_setr_epi64(4, 4, 4, 4, 6, 6, 6, 6);
        // SAFETY: (the index vectors) AVX-512F is enabled by the caller.
        let idx: [__m512i; 4] = std::array::from_fn(|q| spread(4 * q as i16, 4));
        let mut acc = [_mm512_setzero_ps(); R];
        for (bi, b) in w.chunks_exact(210).enumerate() {
            let ba: [&[u8]; R] = std::array::from_fn(|r| &a[r][bi * Q8_K_BYTES..(bi + 1) * Q8_K_BYTES]);
            let (ql, qh) = (&b[..128], &b[128..192]);
            // SAFETY: (this block) the features are enabled by the caller; every load stays in
            // the weight block (ql: 64h + 64 <= 128, qh: 32h + 32 <= 64, scales 192..208) or the
            // activation block (4 + 128h + 64p + 64 <= 260, sums 260..292).
            {
                let sc8 = _mm_loadu_si128(b[192..208].as_ptr() as *const __m128i);
                let sc16 = _mm256_cvtepi8_epi16(sc8);
                let sc = _mm512_castsi256_si512(sc16);
                // The offset's share: -32 * sum_g scale_g * bsum_g, in the low eight lanes.
                // A loop, not `array::from_fn`: a closure here does not get the caller's
                // features, so its intrinsics would be calls.
                let mut sumi = [_mm512_setzero_si512(); R];
                for r in 0..R {
                    let bias = _mm256_madd_epi16(sc16, load256(&ba[r][260..]));
                    sumi[r] =
                        _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(bias, 5)));
                }
                for h in 0..2 {
                    let l = load512(&ql[64 * h..]);
                    let hb = _mm512_broadcast_i64x4(load256(&qh[32 * h..]));
                    let hi01 = _mm512_and_si512(_mm512_srlv_epi64(hb, sh01), m3);
                    let hi23 = _mm512_and_si512(_mm512_srlv_epi64(hb, sh23), m3);
                    let parts = [
                        _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_slli_epi16(hi01, 4)),
                        _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_slli_epi16(hi23, 4)),
                    ];
                    for (p, u) in parts.into_iter().enumerate() {
                        let s = _mm512_permutexvar_epi16(idx[2 * h + p], sc);
                        for r in 0..R {
                            let av = load512(&ba[r][4 + 128 * h + 64 * p..]);
                            sumi[r] = _mm512_dpwssd_epi32(sumi[r], _mm512_maddubs_epi16(u, av), s);
                        }
                    }
                }
                let d = f16c_at(b, 208);
                for r in 0..R {
                    let dd = _mm512_set1_ps(q8k_d(ba[r]) * d);
                    acc[r] = _mm512_fmadd_ps(dd, _mm512_cvtepi32_ps(sumi[r]), acc[r]);
                }
            }
        }
        std::array::from_fn(|r| _mm512_reduce_add_ps(acc[r]))
    }
}

/// AVX-512 Q4_K row times a Q8_K row.
///
/// # Safety
/// The CPU must have AVX-512 F/BW/VL/VNNI, FMA and F16C; `w` and `a` hold the same number
/// of whole blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_q4k(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: the caller's guarantees are this function's.
    unsafe { dot_q4k_rows::<1>(w, [a])[0] }
}

/// One Q4_K row times four Q8_K rows.
///
/// # Safety
/// As for [`dot_q4k`], for each activation row.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_q4k_x4(w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    // SAFETY: the caller's guarantees are this function's.
    unsafe { dot_q4k_rows::<4>(w, a) }
}

/// AVX-512 Q6_K row times a Q8_K row.
///
/// # Safety
/// As for [`dot_q4k`], for Q6_K weight blocks.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_q6k(w: &[u8], a: &[u8]) -> f32 {
    // SAFETY: the caller's guarantees are this function's.
    unsafe { dot_q6k_rows::<1>(w, [a])[0] }
}

/// One Q6_K row times four Q8_K rows.
///
/// # Safety
/// As for [`dot_q6k`], for each activation row.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
pub unsafe fn dot_q6k_x4(w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
    // SAFETY: the caller's guarantees are this function's.
    unsafe { dot_q6k_rows::<4>(w, a) }
}
