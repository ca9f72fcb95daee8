//! Quantized dot products: weights in a ggml block format, activations quantized on the
//! fly to Q8_0, integer multiply-adds per 32-value block, one f32 scale product per block.
//!
//! The scalar functions are the spec; the AVX2 ones (runtime-detected) must agree with them
//! to f32 rounding (the integer block sums are exact; only the f32 accumulation order differs).

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
    use crate::backend::x86::hsum256;
    use std::arch::x86_64::*;

    /// Sum of the 32 products of signed bytes `x * y`, as 8 i32 lanes.
    #[inline(always)]
    unsafe fn mul_sum_i8(x: __m256i, y: __m256i) -> __m256i {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            // maddubs needs an unsigned left operand: |x| * (y with x's sign).
            let ax = _mm256_sign_epi8(x, x);
            let sy = _mm256_sign_epi8(y, x);
            mul_sum_u8_i8(ax, sy)
        }
    }

    /// Sum of the 32 products `u * s` (unsigned by signed bytes), as 8 i32 lanes; exact for
    /// Q8_0 quants (|q| <= 127, so maddubs' i16 pairs cannot saturate). (AVX-512 VNNI's
    /// `vpdpbusd` in its place measured no faster: these kernels are bound elsewhere.)
    #[inline(always)]
    unsafe fn mul_sum_u8_i8(u: __m256i, s: __m256i) -> __m256i {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe { _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)) }
    }

    /// An f16 scale converted with F16C.
    #[inline(always)]
    unsafe fn scale_f16c(b: &[u8]) -> f32 {
        // SAFETY: the caller enables F16C; the two bytes are the block's f16 scale.
        unsafe { f16c_bits(u16::from_le_bytes([b[0], b[1]])) }
    }

    /// The f16 with these bits as f32, converted with F16C.
    #[inline(always)]
    unsafe fn f16c_bits(bits: u16) -> f32 {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            // Safe intrinsics under the caller's F16C.
            _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32)))
        }
    }

    /// AVX2 Q8_0 x Q8_0.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `w` and `a` hold the same number of whole blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q8_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_q8_0_body(w, a) }
    }

    /// Block by block into four independent accumulators: each block's integer sum is
    /// scaled by its two f16 scales (converted with F16C) and accumulated with one FMA.
    /// (An earlier version reduced eight blocks' sums with horizontal adds and gathered
    /// their scales into one vector; measured 2-3x slower.)
    #[inline(always)]
    unsafe fn dot_q8_0_body(w: &[u8], a: &[u8]) -> f32 {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            let nb = w.len() / Q8_0_BYTES;
            assert!(a.len() >= nb * Q8_0_BYTES, "dot_q8_0: activation row shorter than the weight row");
            let (wp, ap) = (w.as_ptr(), a.as_ptr());
            let mut acc = [_mm256_setzero_ps(); 4];
            let block = |o: usize, acc: &mut __m256| {
                // SAFETY: o + 34 <= nb * 34 bytes of both rows (checked above); the caller enables
                // AVX2 and F16C.
                {
                    let x = _mm256_loadu_si256(wp.add(o + 2) as *const __m256i);
                    let y = _mm256_loadu_si256(ap.add(o + 2) as *const __m256i);
                    let p = mul_sum_u8_i8(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
                    let scale = |p: *const u8| f16c_bits(u16::from_le((p as *const u16).read_unaligned()));
                    let d = _mm256_set1_ps(scale(wp.add(o)) * scale(ap.add(o)));
                    *acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), *acc);
                }
            };
            let mut b = 0;
            while b + 4 <= nb {
                for (t, at) in acc.iter_mut().enumerate() {
                    block((b + t) * Q8_0_BYTES, at);
                }
                b += 4;
            }
            for (t, i) in (b..nb).enumerate() {
                block(i * Q8_0_BYTES, &mut acc[t]);
            }
            hsum256(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])))
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

    /// One Q8_0 (`Q4: false`) or Q4_0 (`Q4: true`) weight row times `R` Q8_0 rows; the
    /// weight block is loaded and made unsigned once for all rows.
    #[inline(always)]
    unsafe fn dot_rows<const Q4: bool, const R: usize>(w: &[u8], a: [&[u8]; R]) -> [f32; R] {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            let wb = if Q4 { Q4_0_BYTES } else { Q8_0_BYTES };
            let mut acc = [_mm256_setzero_ps(); R];
            for (bi, bw) in w.chunks_exact(wb).enumerate() {
                // SAFETY: the caller enables AVX2; `bw` is one whole block.
                let x = { weight_block::<Q4>(bw) };
                let ax = _mm256_sign_epi8(x, x);
                // SAFETY: F16C is enabled by the caller.
                let dw = { scale_f16c(bw) };
                for r in 0..R {
                    let ba = &a[r][bi * Q8_0_BYTES..(bi + 1) * Q8_0_BYTES];
                    let y = { _mm256_loadu_si256(ba[2..].as_ptr() as *const __m256i) };
                    let p = { mul_sum_u8_i8(ax, _mm256_sign_epi8(y, x)) };
                    let d = _mm256_set1_ps(dw * { scale_f16c(ba) });
                    acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[r]);
                }
            }
            // SAFETY: AVX is enabled by the caller.
            std::array::from_fn(|r| hsum256(acc[r]))
        }
    }

    /// Two Q8_0 (`Q4: false`) or Q4_0 (`Q4: true`) weight rows times four Q8_0 rows: each
    /// activation block is loaded and its scale converted once for both weight rows, each
    /// weight block once for all four activation rows. Each of the eight sums is the same
    /// sequence of block products as [`dot_rows`] computes, so the results are identical.
    #[inline(always)]
    unsafe fn dot_rows_2x4<const Q4: bool>(w: [&[u8]; 2], a: [&[u8]; 4]) -> [[f32; 4]; 2] {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            let wb = if Q4 { Q4_0_BYTES } else { Q8_0_BYTES };
            let nb = w[0].len() / wb;
            let mut acc = [[_mm256_setzero_ps(); 4]; 2];
            for bi in 0..nb {
                let mut ys = [_mm256_setzero_si256(); 4];
                let mut da = [0.0f32; 4];
                for r in 0..4 {
                    let ba = &a[r][bi * Q8_0_BYTES..(bi + 1) * Q8_0_BYTES];
                    // SAFETY: a Q8_0 block holds 32 quant bytes after its 2-byte scale; F16C is
                    // enabled by the caller.
                    {
                        ys[r] = _mm256_loadu_si256(ba[2..].as_ptr() as *const __m256i);
                        da[r] = scale_f16c(ba);
                    }
                }
                for (h, wr) in w.iter().enumerate() {
                    let bw = &wr[bi * wb..(bi + 1) * wb];
                    // SAFETY: the caller enables AVX2; `bw` is one whole block.
                    let x = { weight_block::<Q4>(bw) };
                    let ax = _mm256_sign_epi8(x, x);
                    // SAFETY: F16C is enabled by the caller.
                    let dw = { scale_f16c(bw) };
                    for r in 0..4 {
                        // SAFETY: AVX2 is enabled by the caller.
                        let p = { mul_sum_u8_i8(ax, _mm256_sign_epi8(ys[r], x)) };
                        let d = _mm256_set1_ps(dw * da[r]);
                        acc[h][r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[h][r]);
                    }
                }
            }
            // SAFETY: AVX is enabled by the caller.
            std::array::from_fn(|h| std::array::from_fn(|r| hsum256(acc[h][r])))
        }
    }

    /// Two Q8_0 rows times four Q8_0 rows.
    ///
    /// # Safety
    /// As for [`dot_q8_0_q8_0`], for each pair of rows; both weight rows have the same length.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q8_0_2x4(w: [&[u8]; 2], a: [&[u8]; 4]) -> [[f32; 4]; 2] {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_rows_2x4::<false>(w, a) }
    }

    /// Two Q4_0 rows times four Q8_0 rows.
    ///
    /// # Safety
    /// As for [`dot_q4_0_q8_0`], for each pair of rows; both weight rows have the same length.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q4_0_2x4(w: [&[u8]; 2], a: [&[u8]; 4]) -> [[f32; 4]; 2] {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_rows_2x4::<true>(w, a) }
    }

    /// One Q8_0 row times four Q8_0 rows.
    ///
    /// # Safety
    /// As for [`dot_q8_0_q8_0`], for each activation row.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q8_0_x4(w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_rows::<false, 4>(w, a) }
    }

    /// One Q4_0 row times four Q8_0 rows.
    ///
    /// # Safety
    /// As for [`dot_q4_0_q8_0`], for each activation row.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q4_0_x4(w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_rows::<true, 4>(w, a) }
    }

    /// AVX2 Q4_0 x Q8_0.
    ///
    /// # Safety
    /// As for [`dot_q8_0_q8_0`], with `w` in Q4_0 blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q4_0_q8_0(w: &[u8], a: &[u8]) -> f32 {
        let mut acc = _mm256_setzero_ps();
        let low = _mm256_set1_epi8(0x0F);
        let eight = _mm256_set1_epi8(8);
        for (bw, ba) in w.chunks_exact(Q4_0_BYTES).zip(a.chunks_exact(Q8_0_BYTES)) {
            // SAFETY: a Q4_0 block has 16 nibble bytes after its scale; a Q8_0 block 32 bytes.
            let (packed, y) = unsafe {
                (
                    _mm_loadu_si128(bw[2..].as_ptr() as *const __m128i),
                    _mm256_loadu_si256(ba[2..].as_ptr() as *const __m256i),
                )
            };
            // Low nibbles are values 0..16, high nibbles values 16..32.
            let both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
            let x = _mm256_sub_epi8(_mm256_and_si256(both, low), eight);
            // SAFETY: AVX2 is enabled for this function.
            let p = unsafe { mul_sum_i8(x, y) };
            // SAFETY: F16C is enabled for this function.
            let d = _mm256_set1_ps(unsafe { scale_f16c(bw) * scale_f16c(ba) });
            acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc);
        }
        // SAFETY: AVX is enabled for this function.
        unsafe { hsum256(acc) }
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
