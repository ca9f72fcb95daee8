//! Decoding ggml block rows straight to bf16 (AVX-512 with BF16 conversion): the weight side
//! of the bf16 GEMM. Each value is computed as the scalar decoders compute it (`d * scale * q
//! - dmin * min` in f32, same operand order) and then rounded to bf16 (nearest even).

use crate::backend::qdot_k::QK_K;

/// The block formats with a vectorized bf16 decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockRow {
    /// 32 int8 and an f16 scale per block.
    Q8_0,
    /// 32 nibbles (minus 8) and an f16 scale per block.
    Q4_0,
    /// K-quant, 4-bit.
    Q4K,
    /// K-quant, 5-bit.
    Q5K,
    /// K-quant, 6-bit.
    Q6K,
}

/// Decodes one row of `fmt` blocks (`out.len()` values) to bf16 bits. The CPU must pass
/// [`super::has_bf16_dot`].
pub fn decode_row_bf16(fmt: BlockRow, src: &[u8], out: &mut [u16]) {
    assert!(super::has_bf16_dot(), "decode_row_bf16 needs AVX-512 BF16");
    let (bs, bb) = match fmt {
        BlockRow::Q8_0 => (32, 34),
        BlockRow::Q4_0 => (32, 18),
        BlockRow::Q4K => (QK_K, 144),
        BlockRow::Q5K => (QK_K, 176),
        BlockRow::Q6K => (QK_K, 210),
    };
    assert!(out.len().is_multiple_of(bs) && src.len() == out.len() / bs * bb, "decode_row_bf16: sizes");
    #[cfg(target_arch = "x86_64")]
    // SAFETY: checked above: the CPU has AVX-512F/BF16; `src` holds exactly the blocks of `out`.
    unsafe {
        x86::decode(fmt, src, out)
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::BlockRow;
    use crate::backend::qdot_k::scale_min_k4;
    use std::arch::x86_64::*;

    #[inline(always)]
    fn f16(b: &[u8], at: usize) -> f32 {
        half::f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
    }

    /// Stores `d * scale * q - dmin * min` (computed as the scalar decoder does) as 16 bf16.
    #[inline(always)]
    unsafe fn store(q: __m512i, ds: f32, dm: f32, out: *mut u16) {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            let v = _mm512_sub_ps(_mm512_mul_ps(_mm512_set1_ps(ds), _mm512_cvtepi32_ps(q)), _mm512_set1_ps(dm));
            _mm256_storeu_si256(out.cast(), std::mem::transmute::<__m256bh, __m256i>(_mm512_cvtneps_pbh(v)));
        }
    }

    /// Sixteen bytes at `p` widened to i32 lanes.
    #[inline(always)]
    unsafe fn bytes16(p: *const u8) -> __m512i {
        // SAFETY: the caller guarantees 16 readable bytes.
        unsafe { _mm512_cvtepu8_epi32(_mm_loadu_si128(p.cast())) }
    }

    /// # Safety
    /// AVX-512F and BF16 present; `src` holds exactly the blocks of `out`.
    #[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
    pub unsafe fn decode(fmt: BlockRow, src: &[u8], out: &mut [u16]) {
        let o = out.as_mut_ptr();
        let m4 = _mm512_set1_epi32(0xF);
        // SAFETY: (whole body) every read stays inside the current block of `src` and every
        // write inside the block's values in `out` (sizes checked by the caller).
        unsafe {
            match fmt {
                BlockRow::Q8_0 => {
                    for (bi, b) in src.chunks_exact(34).enumerate() {
                        let d = f16(b, 0);
                        for h in 0..2 {
                            let q = _mm512_cvtepi8_epi32(_mm_loadu_si128(b.as_ptr().add(2 + 16 * h).cast()));
                            // Scalar: q * d.
                            let v = _mm512_mul_ps(_mm512_cvtepi32_ps(q), _mm512_set1_ps(d));
                            let bf = std::mem::transmute::<__m256bh, __m256i>(_mm512_cvtneps_pbh(v));
                            _mm256_storeu_si256(o.add(bi * 32 + 16 * h).cast(), bf);
                        }
                    }
                }
                BlockRow::Q4_0 => {
                    for (bi, b) in src.chunks_exact(18).enumerate() {
                        let d = f16(b, 0);
                        let q = bytes16(b.as_ptr().add(2));
                        let eight = _mm512_set1_epi32(8);
                        let lo = _mm512_sub_epi32(_mm512_and_si512(q, m4), eight);
                        let hi = _mm512_sub_epi32(_mm512_srli_epi32(q, 4), eight);
                        // Scalar: d * q.
                        store(lo, d, 0.0, o.add(bi * 32));
                        store(hi, d, 0.0, o.add(bi * 32 + 16));
                    }
                }
                BlockRow::Q4K | BlockRow::Q5K => {
                    let q5 = fmt == BlockRow::Q5K;
                    let bb = if q5 { 176 } else { 144 };
                    for (bi, b) in src.chunks_exact(bb).enumerate() {
                        let (d, dmin) = (f16(b, 0), f16(b, 2));
                        let (s, m) = scale_min_k4(&b[4..16]);
                        let qs = if q5 { &b[48..176] } else { &b[16..144] };
                        for c in 0..4 {
                            for h in 0..2 {
                                // Values 64c + 16h .. (low nibbles) and 64c + 32 + 16h .. (high).
                                let q = bytes16(qs.as_ptr().add(32 * c + 16 * h));
                                let mut lo = _mm512_and_si512(q, m4);
                                let mut hi = _mm512_srli_epi32(q, 4);
                                if q5 {
                                    let qh = bytes16(b.as_ptr().add(16 + 16 * h));
                                    let b0 = _mm512_and_si512(
                                        _mm512_srlv_epi32(qh, _mm512_set1_epi32(2 * c as i32)),
                                        _mm512_set1_epi32(1),
                                    );
                                    let b1 = _mm512_and_si512(
                                        _mm512_srlv_epi32(qh, _mm512_set1_epi32(2 * c as i32 + 1)),
                                        _mm512_set1_epi32(1),
                                    );
                                    lo = _mm512_or_si512(lo, _mm512_slli_epi32(b0, 4));
                                    hi = _mm512_or_si512(hi, _mm512_slli_epi32(b1, 4));
                                }
                                let (g0, g1) = (2 * c, 2 * c + 1);
                                let base = o.add(bi * 256 + 64 * c + 16 * h);
                                store(lo, d * s[g0] as f32, dmin * m[g0] as f32, base);
                                store(hi, d * s[g1] as f32, dmin * m[g1] as f32, base.add(32));
                            }
                        }
                    }
                }
                BlockRow::Q6K => {
                    let m3 = _mm512_set1_epi32(3);
                    let thirty_two = _mm512_set1_epi32(32);
                    for (bi, b) in src.chunks_exact(210).enumerate() {
                        let d = f16(b, 208);
                        let (ql, qh, sc) = (&b[..128], &b[128..192], &b[192..208]);
                        for half in 0..2 {
                            for part in 0..4 {
                                for h in 0..2 {
                                    // Values 128 half + 32 part + 16 h ..
                                    let l = bytes16(ql.as_ptr().add(64 * half + 32 * (part % 2) + 16 * h));
                                    let l = if part < 2 { _mm512_and_si512(l, m4) } else { _mm512_srli_epi32(l, 4) };
                                    let hb = bytes16(qh.as_ptr().add(32 * half + 16 * h));
                                    let hb =
                                        _mm512_and_si512(_mm512_srlv_epi32(hb, _mm512_set1_epi32(2 * part as i32)), m3);
                                    let q = _mm512_sub_epi32(_mm512_or_si512(l, _mm512_slli_epi32(hb, 4)), thirty_two);
                                    let g = 8 * half + 2 * part + h;
                                    store(
                                        q,
                                        d * (sc[g] as i8) as f32,
                                        0.0,
                                        o.add(bi * 256 + 128 * half + 32 * part + 16 * h),
                                    );
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}
