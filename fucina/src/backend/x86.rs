//! AVX helpers shared by the row-dot kernels (`fdot`, `qdot`, `qdot_k`) and the K-quant
//! tile unpackers (`native::kgemm`).

use std::arch::x86_64::*;

/// Horizontal sum of eight f32 lanes: the two halves added, then [`hsum128`] (the same
/// order in every kernel that uses it).
///
/// # Safety
/// The CPU has AVX (the callers run under their AVX2 `target_feature`).
#[inline(always)]
pub(crate) unsafe fn hsum256(v: __m256) -> f32 {
    // SAFETY: register-only intrinsics; AVX is present per this fn's contract.
    unsafe { hsum128(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1))) }
}

/// Horizontal sum of four f32 lanes: the pairs added (lanes 0+2, 1+3), then those two.
///
/// # Safety
/// The CPU has SSE3 (implied by the AVX2 the callers run under).
#[inline(always)]
pub(crate) unsafe fn hsum128(v: __m128) -> f32 {
    // SAFETY: register-only intrinsics; SSE3 is present per this fn's contract.
    unsafe {
        let s = _mm_add_ps(v, _mm_movehl_ps(v, v));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }
}

/// The largest of eight f32 lanes (none of them NaN): the two halves, then pairs, then the
/// last two.
///
/// # Safety
/// The CPU has AVX (the callers run under their AVX2 `target_feature`).
#[inline(always)]
pub(crate) unsafe fn hmax256(v: __m256) -> f32 {
    // SAFETY: register-only intrinsics; AVX is present per this fn's contract.
    unsafe {
        let m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)))
    }
}

/// The exact sum of eight i32 lanes: the two halves added, then [`hsum_i32x4`].
///
/// # Safety
/// The CPU has AVX2 (the callers run under their AVX2 `target_feature`).
#[inline(always)]
pub(crate) unsafe fn hsum_i32x8(v: __m256i) -> i32 {
    // SAFETY: register-only intrinsics; AVX2 is present per this fn's contract.
    unsafe { hsum_i32x4(_mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v))) }
}

/// The exact sum of four i32 lanes.
///
/// # Safety
/// The CPU has SSE2 (x86-64's baseline).
#[inline(always)]
pub(crate) unsafe fn hsum_i32x4(v: __m128i) -> i32 {
    // SAFETY: register-only SSE2 intrinsics.
    unsafe {
        let v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
        _mm_cvtsi128_si32(_mm_add_epi32(v, _mm_shuffle_epi32::<1>(v)))
    }
}

/// The f16 at byte `at` of `b` as f32, converted with F16C.
///
/// # Safety
/// The CPU has F16C (the callers run under their `target_feature`).
#[inline(always)]
pub(crate) unsafe fn f16c_at(b: &[u8], at: usize) -> f32 {
    let bits = u16::from_le_bytes([b[at], b[at + 1]]);
    // SAFETY: register-only intrinsics; F16C is present per this fn's contract.
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32))) }
}

/// Bit `s` of every byte of `v`, moved to bit `to` of that byte (`s < 8`, `to < 8`): the
/// high bits of Q3_K's and Q5_K's levels.
///
/// # Safety
/// The CPU has AVX2 (the callers run under their AVX2 `target_feature`).
#[inline(always)]
pub(crate) unsafe fn bit_of_bytes(v: __m256i, s: usize, to: i32) -> __m256i {
    // SAFETY: register-only AVX2 intrinsics per this fn's contract. The 16-bit shift moves
    // bits across the byte boundary, but only bit 0 of each byte is kept before the move to
    // `to`.
    unsafe {
        let bit = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(s as i32)), _mm256_set1_epi8(1));
        _mm256_sll_epi16(bit, _mm_cvtsi32_si128(to))
    }
}

/// The activation's sums over the eight 32-value sub-blocks of a Q8_K block (`ba`: its
/// sixteen i16 group sums at 260..292), as eight i16 lanes: sub-block `j` is groups `2j`
/// and `2j + 1` (at most 2 x 16 x 127 in magnitude, so the pairwise add cannot wrap).
///
/// # Safety
/// The CPU has AVX2 (the callers run under their AVX2 `target_feature`).
#[inline(always)]
pub(crate) unsafe fn q8k_sub_block_sums(ba: &[u8]) -> __m128i {
    assert!(ba.len() >= 292, "q8k_sub_block_sums: not a whole Q8_K block");
    // SAFETY: 32 bytes at 260 lie in the block (checked); AVX2 per this fn's contract.
    unsafe {
        let bs = _mm256_loadu_si256(ba.as_ptr().add(260) as *const __m256i);
        _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1))
    }
}
