//! AVX helpers shared by the row-dot kernels (`fdot`, `qdot`, `qdot_k`).

use std::arch::x86_64::*;

/// Horizontal sum of eight f32 lanes: the two halves added, then the pairs, then the last
/// two lanes (the same order in every kernel that uses it).
///
/// # Safety
/// The CPU has AVX (the callers run under their AVX2 `target_feature`).
#[inline(always)]
pub(crate) unsafe fn hsum256(v: __m256) -> f32 {
    // SAFETY: register-only intrinsics; AVX is present per this fn's contract.
    unsafe {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)))
    }
}
