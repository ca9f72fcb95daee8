//! Quantized dot products: weights in a ggml block format, activations quantized on the
//! fly to Q8_0, integer multiply-adds per 32-value block, one f32 scale product per block.
//!
//! The scalar functions are the spec; the AVX2 ones (runtime-detected) give their bits: each
//! block's integer sum is exact, and every kernel (one row, four, the 2 x 4 tile) scales and
//! adds the block sums in the spec's order, so a row's result does not depend on its batch.

use half::f16;

/// Bytes of one Q8_0 block (f16 scale + 32 int8).
pub const Q8_0_BYTES: usize = 34;
/// Bytes of one Q4_0 block (f16 scale + 16 bytes of nibbles).
pub const Q4_0_BYTES: usize = 18;

fn scale(b: &[u8]) -> f32 {
    f16::from_le_bytes([b[0], b[1]]).to_f32()
}

/// Quantizes an activation row to Q8_0 (`d = amax / 127`, round half away from zero).
pub fn quantize_row_q8_0(x: &[f32], out: &mut [u8]) {
    for (b, o) in x.chunks_exact(32).zip(out.chunks_exact_mut(Q8_0_BYTES)) {
        let amax = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        o[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        for (q, v) in o[2..].iter_mut().zip(b) {
            *q = (v * id).round() as i8 as u8;
        }
    }
}

/// Scalar spec: `sum_blocks d_w * d_a * sum_i w_i * a_i` for a Q8_0 weight row.
pub fn dot_q8_0_q8_0_scalar(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0.0f32;
    for (bw, ba) in w.chunks_exact(Q8_0_BYTES).zip(a.chunks_exact(Q8_0_BYTES)) {
        let s: i32 = bw[2..].iter().zip(&ba[2..]).map(|(x, y)| (*x as i8 as i32) * (*y as i8 as i32)).sum();
        acc += scale(bw) * scale(ba) * s as f32;
    }
    acc
}

/// Scalar spec for a Q4_0 weight row (nibbles minus 8).
pub fn dot_q4_0_q8_0_scalar(w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0.0f32;
    for (bw, ba) in w.chunks_exact(Q4_0_BYTES).zip(a.chunks_exact(Q8_0_BYTES)) {
        let qa = &ba[2..];
        let mut s = 0i32;
        for i in 0..16 {
            let lo = (bw[2 + i] & 0x0F) as i32 - 8;
            let hi = (bw[2 + i] >> 4) as i32 - 8;
            s += lo * qa[i] as i8 as i32 + hi * qa[i + 16] as i8 as i32;
        }
        acc += scale(bw) * scale(ba) * s as f32;
    }
    acc
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Q4_0_BYTES, Q8_0_BYTES};
    use crate::backend::x86::{f16c_at, hsum_i32x8};
    use std::arch::x86_64::*;

    /// Sum of the 32 products `u * s` (unsigned by signed bytes), as 8 i32 lanes; exact for
    /// Q8_0 quants (|q| <= 127, so maddubs' i16 pairs cannot saturate). (AVX-512 VNNI's
    /// `vpdpbusd` in its place measured no faster: these kernels are bound elsewhere.)
    #[inline(always)]
    unsafe fn mul_sum_u8_i8(u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe { _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)) }
    }

    /// AVX2 Q8_0 x Q8_0.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `w` and `a` hold the same number of whole blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q8_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_row::<false>(w, a) }
    }

    /// A block's f16 scale bits.
    #[inline(always)]
    fn scale_bits(b: &[u8]) -> u16 {
        u16::from_le_bytes([b[0], b[1]])
    }

    /// Two vectors' lanes summed in pairs within each 128-bit half: `[a0+a2, b0+b2, a1+a3,
    /// b1+b3]` per half. Unpacks and adds, one cycle each, where horizontal adds measured
    /// 10-25 % slower in the 2 x 4 tile on Zen 3.
    #[inline(always)]
    unsafe fn pair_sums(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: register-only AVX2 intrinsics; the caller enables AVX2.
        unsafe { _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b)) }
    }

    /// Two [`pair_sums`] results summed again: `[a, b, c, d]` per 128-bit half for the four
    /// vectors that went in, each the sum of that vector's four lanes in the half.
    #[inline(always)]
    unsafe fn quad_sums(ab: __m256i, cd: __m256i) -> __m256i {
        // SAFETY: register-only AVX2 intrinsics; the caller enables AVX2.
        unsafe { _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd)) }
    }

    /// The whole integer sums of eight blocks, from each block's eight partial lanes: lane
    /// `t` is block `t`'s sum (lanes in pairs, pairs of pairs, then the two 128-bit halves).
    /// Exact: each sum is at most 32 * 128 * 127 in magnitude.
    #[inline(always)]
    unsafe fn block_sums8(p: &[__m256i; 8]) -> __m256i {
        // SAFETY: register-only AVX2 intrinsics; the caller enables AVX2.
        unsafe {
            // [p0..p3 sums of the low 128 bits | p0..p3 sums of the high 128 bits].
            let lo = quad_sums(pair_sums(p[0], p[1]), pair_sums(p[2], p[3]));
            let hi = quad_sums(pair_sums(p[4], p[5]), pair_sums(p[6], p[7]));
            _mm256_add_epi32(_mm256_permute2x128_si256::<0x20>(lo, hi), _mm256_permute2x128_si256::<0x31>(lo, hi))
        }
    }

    /// The whole integer sums of four blocks (lane `t`: block `t`), as [`block_sums8`].
    #[inline(always)]
    unsafe fn block_sums4(p: &[__m256i; 4]) -> __m128i {
        // SAFETY: register-only AVX2 intrinsics; the caller enables AVX2.
        unsafe {
            let v = quad_sums(pair_sums(p[0], p[1]), pair_sums(p[2], p[3]));
            _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256::<1>(v))
        }
    }

    /// Eight f16 bit patterns in one vector, for one F16C conversion.
    #[inline(always)]
    fn f16x8(v: [u16; 8]) -> __m128i {
        // SAFETY: SSE2 (x86_64's baseline) builds the vector.
        unsafe { _mm_loadu_si128(v.as_ptr() as *const __m128i) }
    }

    /// One Q8_0 (`Q4: false`) or Q4_0 (`Q4: true`) weight row times one Q8_0 row, computed
    /// exactly as the scalar spec: each block's integer sum whole, times the product of the
    /// two scales (`(d_w * d_a) * s`, each an f32 rounding), added to one f32 sum in block
    /// order. So every kernel here (one row, four, the 2 x 4 tile) gives the spec's bits,
    /// and a row's result cannot depend on the batch it came in. Eight blocks at a time: their
    /// sums reduced into one vector, scaled by eight scale products (one F16C conversion per
    /// row's eight scales), then added in order.
    #[inline(always)]
    unsafe fn dot_row<const Q4: bool>(w: &[u8], a: &[u8]) -> f32 {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            let wb = if Q4 { Q4_0_BYTES } else { Q8_0_BYTES };
            let nb = w.len() / wb;
            assert!(a.len() >= nb * Q8_0_BYTES, "dot_q8_0: activation row shorter than the weight row");
            let mut acc = 0.0f32;
            let mut b = 0;
            while b + 8 <= nb {
                let mut p = [_mm256_setzero_si256(); 8];
                let mut sw = [0u16; 8];
                let mut sa = [0u16; 8];
                for t in 0..8 {
                    let bw = &w[(b + t) * wb..(b + t + 1) * wb];
                    let ba = &a[(b + t) * Q8_0_BYTES..(b + t + 1) * Q8_0_BYTES];
                    // SAFETY: `bw` is one whole weight block, `ba` one Q8_0 block (32 quant
                    // bytes after its scale); the caller enables AVX2.
                    let (x, y) = { (weight_block::<Q4>(bw), _mm256_loadu_si256(ba[2..].as_ptr() as *const __m256i)) };
                    p[t] = mul_sum_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
                    sw[t] = scale_bits(bw);
                    sa[t] = scale_bits(ba);
                }
                let s = _mm256_cvtepi32_ps(block_sums8(&p));
                let d = _mm256_mul_ps(_mm256_cvtph_ps(f16x8(sw)), _mm256_cvtph_ps(f16x8(sa)));
                let mut terms = [0.0f32; 8];
                _mm256_storeu_ps(terms.as_mut_ptr(), _mm256_mul_ps(d, s));
                for t in terms {
                    acc += t;
                }
                b += 8;
            }
            for b in b..nb {
                let bw = &w[b * wb..(b + 1) * wb];
                let ba = &a[b * Q8_0_BYTES..(b + 1) * Q8_0_BYTES];
                // SAFETY: as in the loop above.
                let (x, y) = { (weight_block::<Q4>(bw), _mm256_loadu_si256(ba[2..].as_ptr() as *const __m256i)) };
                let s = hsum_i32x8(mul_sum_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x)));
                acc += f16c_at(bw, 0) * f16c_at(ba, 0) * s as f32;
            }
            acc
        }
    }

    /// The 32 signed values of one Q8_0 (`Q4: false`) or Q4_0 (`Q4: true`, nibbles minus 8)
    /// weight block.
    ///
    /// # Safety
    /// AVX2 is enabled; `bw` is one whole block (its 16 or 32 quant bytes follow the scale).
    #[inline(always)]
    unsafe fn weight_block<const Q4: bool>(bw: &[u8]) -> __m256i {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            if Q4 {
                // SAFETY: a Q4_0 block has 16 nibble bytes after its scale.
                let packed = { _mm_loadu_si128(bw[2..].as_ptr() as *const __m128i) };
                let both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
                _mm256_sub_epi8(_mm256_and_si256(both, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8))
            } else {
                _mm256_loadu_si256(bw[2..].as_ptr() as *const __m256i)
            }
        }
    }

    /// One Q8_0 (`Q4: false`) or Q4_0 (`Q4: true`) weight row times four Q8_0 rows; the
    /// weight block is loaded and made unsigned once for all rows. Each block's four integer
    /// sums are reduced whole, then scaled and added as in [`dot_row`] (the spec's bits).
    #[inline(always)]
    unsafe fn dot_rows4<const Q4: bool>(w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            let wb = if Q4 { Q4_0_BYTES } else { Q8_0_BYTES };
            let mut acc = _mm_setzero_ps();
            for (bi, bw) in w.chunks_exact(wb).enumerate() {
                // SAFETY: the caller enables AVX2; `bw` is one whole block.
                let x = { weight_block::<Q4>(bw) };
                let ax = _mm256_sign_epi8(x, x);
                let mut p = [_mm256_setzero_si256(); 4];
                let mut sa = [0i16; 4];
                for r in 0..4 {
                    let ba = &a[r][bi * Q8_0_BYTES..(bi + 1) * Q8_0_BYTES];
                    // SAFETY: a Q8_0 block holds 32 quant bytes after its 2-byte scale.
                    let y = { _mm256_loadu_si256(ba[2..].as_ptr() as *const __m256i) };
                    p[r] = mul_sum_u8_i8(ax, _mm256_sign_epi8(y, x));
                    sa[r] = scale_bits(ba) as i16;
                }
                let s = _mm_cvtepi32_ps(block_sums4(&p));
                let da = _mm_cvtph_ps(_mm_setr_epi16(sa[0], sa[1], sa[2], sa[3], 0, 0, 0, 0));
                // SAFETY: F16C is enabled by the caller.
                let d = _mm_mul_ps(_mm_set1_ps(f16c_at(bw, 0)), da);
                acc = _mm_add_ps(acc, _mm_mul_ps(d, s));
            }
            let mut out = [0.0f32; 4];
            _mm_storeu_ps(out.as_mut_ptr(), acc);
            out
        }
    }

    /// Block `bi`'s eight terms `(d_w * d_a) * s` of the 2 x 4 tile, lanes `[w0 x a0..a3,
    /// w1 x a0..a3]`.
    ///
    /// # Safety
    /// AVX2 and F16C are enabled; both weight rows (`wp`) and the four activation rows (`ap`)
    /// hold more than `bi` whole blocks, `sa` at least `4 * bi + 4` scales.
    #[inline(always)]
    unsafe fn term_2x4<const Q4: bool>(wp: [*const u8; 2], ap: [*const u8; 4], sa: &[f32], bi: usize) -> __m256 {
        // SAFETY: the caller's contract: every block read here lies in its row.
        unsafe {
            let wb = if Q4 { Q4_0_BYTES } else { Q8_0_BYTES };
            // A loop, not `array::from_fn`: this fn gets its features from its caller, and a
            // closure would not, so its intrinsics could stay calls.
            let mut ys = [_mm256_setzero_si256(); 4];
            for r in 0..4 {
                ys[r] = _mm256_loadu_si256(ap[r].add(bi * Q8_0_BYTES + 2) as *const __m256i);
            }
            let mut p = [_mm256_setzero_si256(); 8];
            let mut dw_bits = 0u32;
            for h in 0..2 {
                let bw = std::slice::from_raw_parts(wp[h].add(bi * wb), wb);
                let x = weight_block::<Q4>(bw);
                let ax = _mm256_sign_epi8(x, x);
                dw_bits |= u32::from(scale_bits(bw)) << (16 * h);
                for r in 0..4 {
                    p[4 * h + r] = mul_sum_u8_i8(ax, _mm256_sign_epi8(ys[r], x));
                }
            }
            let s = _mm256_cvtepi32_ps(block_sums8(&p));
            // Both weight scales in one F16C conversion, spread to their four lanes (0..4 take
            // weight row 0's, 4..8 row 1's).
            let spread = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
            let dw = _mm256_permutevar8x32_ps(_mm256_cvtph_ps(_mm_cvtsi32_si128(dw_bits as i32)), spread);
            let da = _mm_loadu_ps(sa.as_ptr().add(4 * bi));
            _mm256_mul_ps(_mm256_mul_ps(dw, _mm256_set_m128(da, da)), s)
        }
    }

    /// Two Q8_0 (`Q4: false`) or Q4_0 (`Q4: true`) weight rows times four Q8_0 rows: each
    /// activation block is loaded once for both weight rows, each weight block once for all
    /// four activation rows. Each block's eight integer sums are reduced whole in registers
    /// and take one conversion, one scale product and one add for all eight outputs (lanes
    /// `[w0 x a0..a3, w1 x a0..a3]`), which round as [`dot_row`] does: the spec's bits.
    /// `sa` holds the four rows' block scales as f32, `sa[4 * b + r]`.
    #[inline(always)]
    unsafe fn dot_rows_2x4<const Q4: bool>(w: [&[u8]; 2], a: [&[u8]; 4], sa: &[f32]) -> [[f32; 4]; 2] {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            let wb = if Q4 { Q4_0_BYTES } else { Q8_0_BYTES };
            let nb = w[0].len() / wb;
            assert!(sa.len() >= 4 * nb, "dot_rows_2x4: activation scales");
            assert!(w[1].len() >= nb * wb, "dot_rows_2x4: weight rows of different lengths");
            assert!(a.iter().all(|r| r.len() >= nb * Q8_0_BYTES), "dot_rows_2x4: activation rows too short");
            let (wp, ap) = (w.map(<[u8]>::as_ptr), a.map(<[u8]>::as_ptr));
            let mut acc = _mm256_setzero_ps();
            // Two blocks per step, so that the second block's integer work overlaps the first's
            // reduction; the adds stay in block order.
            let mut bi = 0;
            while bi + 2 <= nb {
                let (t0, t1) = (term_2x4::<Q4>(wp, ap, sa, bi), term_2x4::<Q4>(wp, ap, sa, bi + 1));
                acc = _mm256_add_ps(_mm256_add_ps(acc, t0), t1);
                bi += 2;
            }
            if bi < nb {
                acc = _mm256_add_ps(acc, term_2x4::<Q4>(wp, ap, sa, bi));
            }
            let mut out = [0.0f32; 8];
            _mm256_storeu_ps(out.as_mut_ptr(), acc);
            [[out[0], out[1], out[2], out[3]], [out[4], out[5], out[6], out[7]]]
        }
    }

    /// Two Q8_0 rows times four Q8_0 rows.
    ///
    /// # Safety
    /// As for [`dot_q8_0_q8_0`], for each pair of rows; both weight rows have the same length.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q8_0_2x4(w: [&[u8]; 2], a: [&[u8]; 4], sa: &[f32]) -> [[f32; 4]; 2] {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_rows_2x4::<false>(w, a, sa) }
    }

    /// Two Q4_0 rows times four Q8_0 rows.
    ///
    /// # Safety
    /// As for [`dot_q4_0_q8_0`], for each pair of rows; both weight rows have the same length.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q4_0_2x4(w: [&[u8]; 2], a: [&[u8]; 4], sa: &[f32]) -> [[f32; 4]; 2] {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_rows_2x4::<true>(w, a, sa) }
    }

    /// One Q8_0 row times four Q8_0 rows.
    ///
    /// # Safety
    /// As for [`dot_q8_0_q8_0`], for each activation row.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q8_0_x4(w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_rows4::<false>(w, a) }
    }

    /// One Q4_0 row times four Q8_0 rows.
    ///
    /// # Safety
    /// As for [`dot_q4_0_q8_0`], for each activation row.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q4_0_x4(w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_rows4::<true>(w, a) }
    }

    /// AVX2 Q4_0 x Q8_0.
    ///
    /// # Safety
    /// As for [`dot_q8_0_q8_0`], with `w` in Q4_0 blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q4_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_row::<true>(w, a) }
    }
}

pub use super::native::simd::has_f16c;
pub use super::rowdot::{RowDot, RowDot2x4, RowDot4};

/// The fastest available Q8_0 (`q4: false`) or Q4_0 (`q4: true`) row kernel, chosen once
/// per matrix product. Calling it is safe for rows of whole, matching blocks.
pub fn row_kernel(q4: bool) -> RowDot {
    #[cfg(target_arch = "x86_64")]
    if super::native::simd::level().has_avx2() && has_f16c() {
        return if q4 { avx2::dot_q4_0_q8_0 } else { avx2::dot_q8_0_q8_0 };
    }
    if q4 {
        |w, a| dot_q4_0_q8_0_scalar(w, a)
    } else {
        |w, a| dot_q8_0_q8_0_scalar(w, a)
    }
}

/// A four-row Q8_0 (`q4: false`) or Q4_0 (`q4: true`) kernel where the CPU has one.
pub fn row_kernel_x4(q4: bool) -> Option<RowDot4> {
    #[cfg(target_arch = "x86_64")]
    if super::native::simd::level().has_avx2() && has_f16c() {
        return Some(if q4 { avx2::dot_q4_0_x4 } else { avx2::dot_q8_0_x4 });
    }
    let _ = q4;
    None
}

/// A two-weight-row by four-activation-row Q8_0 (`q4: false`) or Q4_0 (`q4: true`) kernel
/// where the CPU has one.
pub fn row_kernel_2x4(q4: bool) -> Option<RowDot2x4> {
    #[cfg(target_arch = "x86_64")]
    if super::native::simd::level().has_avx2() && has_f16c() {
        return Some(if q4 { avx2::dot_q4_0_2x4 } else { avx2::dot_q8_0_2x4 });
    }
    let _ = q4;
    None
}

/// Q8_0 x Q8_0 row dot product on the best available path.
pub fn dot_q8_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if super::native::simd::level().has_avx2() && has_f16c() {
        // SAFETY: checked above: the CPU reports AVX2, FMA and F16C.
        return unsafe { avx2::dot_q8_0_q8_0(w, a) };
    }
    dot_q8_0_q8_0_scalar(w, a)
}

/// Q4_0 x Q8_0 row dot product on the best available path.
pub fn dot_q4_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if super::native::simd::level().has_avx2() && has_f16c() {
        // SAFETY: checked above: the CPU reports AVX2, FMA and F16C.
        return unsafe { avx2::dot_q4_0_q8_0(w, a) };
    }
    dot_q4_0_q8_0_scalar(w, a)
}
