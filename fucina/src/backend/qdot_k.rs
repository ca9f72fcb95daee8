//! K-quant dot products: weights in Q2_K..Q6_K super-blocks of 256, activations quantized on
//! the fly to Q8_K (one f32 scale, 256 int8, 16 sums of 16), integer multiply-adds per
//! super-block and two f32 products (scale and minimum) per super-block.
//!
//! The scalar path is the spec: it unpacks a weight super-block into 256 integer levels and 16
//! group scales and minimums, then does exact integer sums. The AVX2 paths compute the same
//! integers with `maddubs`/`madd`; only the f32 accumulation across super-blocks may round
//! differently.

use half::f16;

/// Values per K-quant super-block.
pub const QK_K: usize = 256;
/// Bytes of one Q8_K block (f32 scale, 256 int8, 16 i16 group sums).
pub const Q8_K_BYTES: usize = 292;

/// ggml's `nearest_int`: round half to even through the 1.5 * 2^23 trick.
pub fn nearest_int(v: f32) -> i32 {
    let val = v + 12_582_912.0;
    (val.to_bits() as i32 & 0x007f_ffff) - 0x0040_0000
}

/// Quantizes one activation row (a whole number of 256-value blocks) to Q8_K, exactly as
/// ggml's `quantize_row_q8_K_ref` (`iscale = -127 / max`; an all-zero block is all zero).
pub fn quantize_row_q8_k(x: &[f32], out: &mut [u8]) {
    for (b, o) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q8_K_BYTES)) {
        let (mut amax, mut max) = (0.0f32, 0.0f32);
        for v in b {
            if v.abs() > amax {
                amax = v.abs();
                max = *v;
            }
        }
        if amax == 0.0 {
            o.fill(0);
            continue;
        }
        let iscale = -127.0 / max;
        o[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
        for (q, v) in o[4..260].iter_mut().zip(b) {
            *q = nearest_int(iscale * v).min(127) as i8 as u8;
        }
        for g in 0..16 {
            let s: i16 = o[4 + 16 * g..20 + 16 * g].iter().map(|q| *q as i8 as i16).sum();
            o[260 + 2 * g..262 + 2 * g].copy_from_slice(&s.to_le_bytes());
        }
    }
}

fn f16_at(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

fn q8k_d(a: &[u8]) -> f32 {
    f32::from_le_bytes([a[0], a[1], a[2], a[3]])
}

fn q8k_bsum(a: &[u8], g: usize) -> i32 {
    i16::from_le_bytes([a[260 + 2 * g], a[261 + 2 * g]]) as i32
}

/// The K-quant weight formats these kernels take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KFormat {
    /// 2-bit levels, 4-bit scales and minimums per 16 (84 bytes).
    Q2K,
    /// 3-bit signed levels, 6-bit signed scales per 16 (110 bytes).
    Q3K,
    /// 4-bit levels, 6-bit scales and minimums per 32 (144 bytes).
    Q4K,
    /// 5-bit levels, 6-bit scales and minimums per 32 (176 bytes).
    Q5K,
    /// 6-bit signed levels, int8 scales per 16 (210 bytes).
    Q6K,
}

impl KFormat {
    /// Bytes of one super-block.
    pub fn block_bytes(self) -> usize {
        match self {
            KFormat::Q2K => 84,
            KFormat::Q3K => 110,
            KFormat::Q4K => 144,
            KFormat::Q5K => 176,
            KFormat::Q6K => 210,
        }
    }
}

/// One weight super-block in integer form: `value[i] = d * scale[i/16] * q[i] - dmin * min[i/16]`.
pub struct Unpacked {
    /// The 256 levels (signed, offsets already removed).
    pub q: [i32; QK_K],
    /// Per group of 16: the integer scale.
    pub scale: [i32; 16],
    /// Per group of 16: the integer minimum (zero for Q3_K and Q6_K).
    pub min: [i32; 16],
    /// The super-block scale.
    pub d: f32,
    /// The super-block scale of the minimums (zero for Q3_K and Q6_K).
    pub dmin: f32,
}

impl Unpacked {
    /// The decoded values, in the operand order gguf-py's dequantizers use (bit-identical).
    pub fn values(&self, out: &mut [f32]) {
        for (e, v) in out.iter_mut().enumerate().take(QK_K) {
            let g = e / 16;
            *v = self.d * self.scale[g] as f32 * self.q[e] as f32 - self.dmin * self.min[g] as f32;
        }
    }
}

/// The eight 6-bit scales and minimums of a Q4_K/Q5_K super-block (`sc` is its 12 bytes).
pub fn scale_min_k4(sc: &[u8]) -> ([u8; 8], [u8; 8]) {
    let mut s = [0u8; 8];
    let mut m = [0u8; 8];
    for j in 0..4 {
        s[j] = sc[j] & 63;
        m[j] = sc[j + 4] & 63;
        s[j + 4] = (sc[j + 8] & 0xF) | ((sc[j] >> 6) << 4);
        m[j + 4] = (sc[j + 8] >> 4) | ((sc[j + 4] >> 6) << 4);
    }
    (s, m)
}

/// The sixteen signed 6-bit scales of a Q3_K super-block (`sc` is its 12 bytes).
pub fn q3k_scales(sc: &[u8]) -> [i32; 16] {
    let mut out = [0i32; 16];
    for (j, o) in out.iter_mut().enumerate() {
        let lo = if j < 8 { sc[j] & 0xF } else { sc[j - 8] >> 4 };
        let hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
        *o = (lo | (hi << 4)) as i32 - 32;
    }
    out
}

/// The sixteen scales of a Q3_K super-block as [`q3k_scales`] gives them, plus 32 (so
/// 0..64), one byte each in four little-endian words, from 32-bit masks and shifts of the
/// 12 bytes four at a time: the form the SIMD unpackers load. Inlined, so that the words
/// stay in registers (returned through memory as an array, four 32-bit stores read back as
/// one 16-byte load stalled the store forwarding: a fifth of a Q3_K decode on Zen 3).
#[inline(always)]
pub(crate) fn q3k_scale_words(sc: &[u8]) -> [u32; 4] {
    let word = |at: usize| u32::from_le_bytes([sc[at], sc[at + 1], sc[at + 2], sc[at + 3]]);
    let (a0, a1, a2) = (word(0), word(4), word(8));
    let (nib, two) = (0x0f0f_0f0f_u32, 0x0303_0303_u32);
    // Scale j: a nibble of bytes 0..8 (low nibbles for j < 8, high for 8..16), and two bits
    // of byte 8 + j % 4 (bits 2 (j / 4)..) above it.
    [
        (a0 & nib) | ((a2 & two) << 4),
        (a1 & nib) | (((a2 >> 2) & two) << 4),
        ((a0 >> 4) & nib) | (((a2 >> 4) & two) << 4),
        ((a1 >> 4) & nib) | (((a2 >> 6) & two) << 4),
    ]
}

/// Unpacks one super-block of format `f` (`b` is its bytes).
pub fn unpack(f: KFormat, b: &[u8]) -> Unpacked {
    let mut u = Unpacked { q: [0; QK_K], scale: [0; 16], min: [0; 16], d: 0.0, dmin: 0.0 };
    match f {
        KFormat::Q2K => {
            let (sc, qs) = (&b[..16], &b[16..80]);
            (u.d, u.dmin) = (f16_at(b, 80), f16_at(b, 82));
            for (e, q) in u.q.iter_mut().enumerate() {
                *q = ((qs[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3) as i32;
            }
            for (g, &b) in sc.iter().enumerate() {
                u.scale[g] = (b & 0xF) as i32;
                u.min[g] = (b >> 4) as i32;
            }
        }
        KFormat::Q3K => {
            let (hmask, qs) = (&b[..32], &b[32..96]);
            u.d = f16_at(b, 108);
            for (e, q) in u.q.iter_mut().enumerate() {
                let low = ((qs[(e / 128) * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3) as i32;
                let high = ((hmask[e % 32] >> (e / 32)) & 1) as i32;
                *q = low - if high == 0 { 4 } else { 0 };
            }
            u.scale = q3k_scales(&b[96..108]);
        }
        KFormat::Q4K | KFormat::Q5K => {
            (u.d, u.dmin) = (f16_at(b, 0), f16_at(b, 2));
            let (s, m) = scale_min_k4(&b[4..16]);
            let (qh, qs) = if f == KFormat::Q5K { (Some(&b[16..48]), &b[48..176]) } else { (None, &b[16..144]) };
            for (e, q) in u.q.iter_mut().enumerate() {
                let low = ((qs[(e / 64) * 32 + e % 32] >> (4 * ((e / 32) % 2))) & 0xF) as i32;
                let high = qh.map_or(0, |qh| (((qh[e % 32] >> (e / 32)) & 1) as i32) << 4);
                *q = low | high;
            }
            for g in 0..16 {
                u.scale[g] = s[g / 2] as i32;
                u.min[g] = m[g / 2] as i32;
            }
        }
        KFormat::Q6K => {
            let (ql, qh, sc) = (&b[..128], &b[128..192], &b[192..208]);
            u.d = f16_at(b, 208);
            for (e, q) in u.q.iter_mut().enumerate() {
                let c = e / 128;
                let lo = (ql[c * 64 + e % 64] >> (4 * ((e / 64) % 2))) & 0xF;
                let hi = (qh[c * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 3;
                *q = (lo | (hi << 4)) as i32 - 32;
            }
            for (s, &b) in u.scale.iter_mut().zip(sc) {
                *s = b as i8 as i32;
            }
        }
    }
    u
}

/// Scalar spec: the dot product of a K-quant weight row with a Q8_K activation row.
pub fn dot_k_q8_k_scalar(f: KFormat, w: &[u8], a: &[u8]) -> f32 {
    let mut acc = 0.0f32;
    for (bw, ba) in w.chunks_exact(f.block_bytes()).zip(a.chunks_exact(Q8_K_BYTES)) {
        let u = unpack(f, bw);
        let qa = &ba[4..260];
        let (mut isum, mut msum) = (0i32, 0i32);
        for g in 0..16 {
            let s: i32 = (0..16).map(|i| u.q[16 * g + i] * qa[16 * g + i] as i8 as i32).sum();
            isum += u.scale[g] * s;
            msum += u.min[g] * q8k_bsum(ba, g);
        }
        acc = super_block_term(acc, u.d, u.dmin, q8k_d(ba), isum, msum);
    }
    acc
}

/// One super-block's share added to a row's sum, as the spec rounds it: `acc + ((d * da) *
/// isum - (dmin * da) * msum)`, each an f32 operation. The AVX2 row kernels reduce their
/// integer sums whole and call this too, so they give the spec's bits (as the tile GEMM does)
/// and a row's result does not depend on the batch it came in.
#[inline(always)]
pub(crate) fn super_block_term(acc: f32, d: f32, dmin: f32, da: f32, isum: i32, msum: i32) -> f32 {
    acc + (d * da * isum as f32 - dmin * da * msum as f32)
}

#[cfg(target_arch = "x86_64")]
mod avx512;

#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::k4_scales_mins;

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{q3k_scale_words, q8k_d, super_block_term, KFormat, Q8_K_BYTES};
    use crate::backend::x86::{bit_of_bytes, f16c_at, hsum_i32x4, hsum_i32x8, q8k_sub_block_sums};
    use std::arch::x86_64::*;

    #[inline(always)]
    unsafe fn load(p: &[u8]) -> __m256i {
        debug_assert!(p.len() >= 32);
        // SAFETY: callers pass slices of at least 32 bytes; the load is unaligned.
        unsafe { _mm256_loadu_si256(p.as_ptr() as *const __m256i) }
    }

    /// The Q8_K block's 16 group sums as i16 lanes.
    #[inline(always)]
    unsafe fn bsums(ba: &[u8]) -> __m256i {
        // SAFETY: a Q8_K block holds 32 bytes of sums at 260..292.
        unsafe { load(&ba[260..]) }
    }

    /// The 16 bytes `[x[i]; 8] ++ [x[i + 1]; 8]` of a 16-byte vector, for `i` even or odd.
    #[inline(always)]
    unsafe fn pair_mask(i: usize) -> __m128i {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            let (a, b) = (i as i8, i as i8 + 1);
            _mm_setr_epi8(a, a, a, a, a, a, a, a, b, b, b, b, b, b, b, b)
        }
    }

    /// The eight 6-bit scales (bytes 0..8) and minimums (bytes 8..16) of a Q4_K/Q5_K
    /// super-block, from the 12 packed bytes at the start of `sc` (which holds at least 16
    /// bytes: the block goes on): the same unpacking as [`super::scale_min_k4`], done on the
    /// three words side by side in one register.
    ///
    /// # Safety
    /// The caller enables AVX2; `sc.len() >= 16`.
    #[inline(always)]
    pub(crate) unsafe fn k4_scales_mins(sc: &[u8]) -> __m128i {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            assert!(sc.len() >= 16);
            // SAFETY: 16 bytes are readable (asserted).
            let v = { _mm_loadu_si128(sc.as_ptr() as *const __m128i) };
            // Words [w0, w1, w2, _]: low six bits of w0 / w1 are scales 0..4 / minimums 0..4.
            let lo = _mm_and_si128(v, _mm_set1_epi32(0x3f3f_3f3f));
            // Scales and minimums 4..8: w2's low / high nibbles, plus the top two bits of w0 / w1.
            let w2 = _mm_shuffle_epi32::<0b1010_1010>(v);
            let nib = _mm_and_si128(_mm_srlv_epi32(w2, _mm_setr_epi32(0, 4, 0, 0)), _mm_set1_epi32(0x0f0f_0f0f));
            let top = _mm_slli_epi32(_mm_and_si128(_mm_srli_epi32(v, 6), _mm_set1_epi32(0x0303_0303)), 4);
            let hi = _mm_or_si128(nib, top);
            // [s_lo, s_hi, m_lo, m_hi].
            _mm_unpacklo_epi32(lo, hi)
        }
    }

    /// AVX2 Q4_K (`hbits: false`) or Q5_K (`hbits: true`) row times a Q8_K row.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `w` and `a` hold the same number of whole blocks.
    #[inline(always)]
    unsafe fn dot_q45k<const Q5: bool, const R: usize>(w: &[u8], a: [&[u8]; R]) -> [f32; R] {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            let bytes = if Q5 { 176 } else { 144 };
            let m4 = _mm256_set1_epi8(0x0F);
            let sixteen = _mm256_set1_epi8(16);
            let mut acc = [0.0f32; R];
            for (bi, b) in w.chunks_exact(bytes).enumerate() {
                let ba: [&[u8]; R] = std::array::from_fn(|r| &a[r][bi * Q8_K_BYTES..(bi + 1) * Q8_K_BYTES]);
                // SAFETY: F16C is enabled by the caller.
                let (d, dmin) = { (f16c_at(b, 0), f16c_at(b, 2)) };
                // SAFETY: SSE2 is part of the caller's AVX2.
                let sm = { k4_scales_mins(&b[4..20]) };
                let mins = _mm_cvtepu8_epi16(_mm_srli_si128(sm, 8));
                let mut msum = [0i32; R];
                for r in 0..R {
                    // Minimums: m[j] times the activation sum over the 32 values of scale j.
                    // SAFETY: (this block) AVX2 is enabled by the caller; loads stay in the blocks.
                    let pairs = { q8k_sub_block_sums(ba[r]) };
                    msum[r] = hsum_i32x4(_mm_madd_epi16(mins, pairs));
                }
                let qs = if Q5 { &b[48..176] } else { &b[16..144] };
                let hm = if Q5 { load(&b[16..48]) } else { _mm256_setzero_si256() };
                // The eight scales as i16 in both 128-bit halves: each group's broadcast is then
                // one in-lane shuffle.
                let sc16 = _mm256_cvtepu8_epi16(sm);
                let sc16 = _mm256_permute2x128_si256(sc16, sc16, 0x00);
                let mut sumi = [_mm256_setzero_si256(); R];
                for c in 0..4 {
                    let q = { load(&qs[32 * c..]) };
                    let mut lo = _mm256_and_si256(q, m4);
                    let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                    if Q5 {
                        // Bit 2c of qh[i] is the fifth bit of value 64c + i, bit 2c+1 of 64c+32+i.
                        let b0 = _mm256_slli_epi16(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(2 * c as i32)), 4);
                        let b1 = _mm256_slli_epi16(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(2 * c as i32 + 1)), 4);
                        lo = _mm256_or_si256(lo, _mm256_and_si256(b0, sixteen));
                        hi = _mm256_or_si256(hi, _mm256_and_si256(b1, sixteen));
                    }
                    let s0 = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((((4 * c + 1) << 8) | (4 * c)) as i16));
                    let s1 = _mm256_shuffle_epi8(sc16, _mm256_set1_epi16((((4 * c + 3) << 8) | (4 * c + 2)) as i16));
                    for r in 0..R {
                        let qa = &ba[r][4..260];
                        let (a0, a1) = { (load(&qa[64 * c..]), load(&qa[64 * c + 32..])) };
                        let p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a0), s0);
                        let p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a1), s1);
                        sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(p0, p1));
                    }
                }
                for r in 0..R {
                    acc[r] = super_block_term(acc[r], d, dmin, q8k_d(ba[r]), hsum_i32x8(sumi[r]), msum[r]);
                }
            }
            acc
        }
    }

    /// AVX2 Q4_K row times a Q8_K row.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `w` and `a` hold the same number of whole blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q4k(w: &[u8], a: &[u8]) -> f32 {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_q45k::<false, 1>(w, [a])[0] }
    }

    /// One Q4_K row times four Q8_K rows (the weight is unpacked once for all four).
    ///
    /// # Safety
    /// As for [`dot_q4k`], for each activation row.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q4k_x4(w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_q45k::<false, 4>(w, a) }
    }

    /// One Q5_K row times four Q8_K rows.
    ///
    /// # Safety
    /// As for [`dot_q4k`], for each activation row.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q5k_x4(w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_q45k::<true, 4>(w, a) }
    }

    /// AVX2 Q5_K row times a Q8_K row.
    ///
    /// # Safety
    /// As for [`dot_q4k`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q5k(w: &[u8], a: &[u8]) -> f32 {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_q45k::<true, 1>(w, [a])[0] }
    }

    /// AVX2 Q6_K row times a Q8_K row: levels stay unsigned (0..64) for `maddubs`; the offset
    /// of 32 comes back out through the activation's group sums.
    ///
    /// # Safety
    /// As for [`dot_q4k`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q6k(w: &[u8], a: &[u8]) -> f32 {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_q6k_rows::<1>(w, [a])[0] }
    }

    /// One Q6_K row times four Q8_K rows.
    ///
    /// # Safety
    /// As for [`dot_q6k`], for each activation row.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q6k_x4(w: &[u8], a: [&[u8]; 4]) -> [f32; 4] {
        // SAFETY: the caller's guarantees are this function's.
        unsafe { dot_q6k_rows::<4>(w, a) }
    }

    #[inline(always)]
    unsafe fn dot_q6k_rows<const R: usize>(w: &[u8], a: [&[u8]; R]) -> [f32; R] {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0F);
            let m3 = _mm256_set1_epi8(3);
            let mut acc = [0.0f32; R];
            for (bi, b) in w.chunks_exact(210).enumerate() {
                let ba: [&[u8]; R] = std::array::from_fn(|r| &a[r][bi * Q8_K_BYTES..(bi + 1) * Q8_K_BYTES]);
                let (ql, qh) = (&b[..128], &b[128..192]);
                // SAFETY: (this block) AVX2 is enabled; every load leaves 32 bytes in the block.
                let sc = _mm_loadu_si128(b[192..208].as_ptr() as *const __m128i);
                let sc16 = _mm256_cvtepi8_epi16(sc);
                // The offset's share: 32 * sum_g scale_g * bsum_g.
                // A loop, not `array::from_fn`: a closure here is not an AVX2 function (this
                // one's features come from its caller), so its intrinsics were calls (38 % of
                // a Q6_K decode on Zen 3).
                let mut sumi = [_mm256_setzero_si256(); R];
                for r in 0..R {
                    let bias = _mm256_madd_epi16(sc16, bsums(ba[r]));
                    sumi[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(bias, 5));
                }
                for h in 0..2 {
                    let (l0, l1) = { (load(&ql[64 * h..]), load(&ql[64 * h + 32..])) };
                    let hb = { load(&qh[32 * h..]) };
                    let parts = [
                        _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m3), 4)),
                        _mm256_or_si256(
                            _mm256_and_si256(l1, m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m3), 4),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m3), 4),
                        ),
                        _mm256_or_si256(
                            _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 6), m3), 4),
                        ),
                    ];
                    for (o, u) in parts.into_iter().enumerate() {
                        let g = 8 * h + 2 * o;
                        let s = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, pair_mask(g)));
                        for r in 0..R {
                            let av = load(&ba[r][4 + 128 * h + 32 * o..]);
                            sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(u, av), s));
                        }
                    }
                }
                // SAFETY: F16C is enabled by the caller.
                let d = { f16c_at(b, 208) };
                for r in 0..R {
                    // No minimums (the spec's dmin and msum are zero).
                    acc[r] = super_block_term(acc[r], d, 0.0, q8k_d(ba[r]), hsum_i32x8(sumi[r]), 0);
                }
            }
            acc
        }
    }

    /// `[scale[g]; 8] ++ [scale[g + 1]; 8]` as i16 lanes, from sixteen i8 scales in `sc`.
    #[inline(always)]
    unsafe fn scale_pair(sc: __m128i, g: usize) -> __m256i {
        // SAFETY: register-only AVX2 intrinsics under the caller's features.
        unsafe { _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, pair_mask(g))) }
    }

    /// AVX2 Q2_K x Q8_K: levels 0..4 with 4-bit scales, the minimums' term through the
    /// activation's group sums. Integer sums reduced whole, then the spec's float step.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `w` and `a` hold the same number of whole blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q2k(w: &[u8], a: &[u8]) -> f32 {
        let (m3, m4) = (_mm256_set1_epi8(3), _mm_set1_epi8(0x0F));
        let mut acc = 0.0f32;
        for (b, ba) in w.chunks_exact(KFormat::Q2K.block_bytes()).zip(a.chunks_exact(Q8_K_BYTES)) {
            // SAFETY: a Q2_K block is 84 bytes (scales 0..16, levels 16..80, d and dmin
            // 80..84), a Q8_K block 292 (levels 4..260, group sums 260..292); every load
            // leaves 16 or 32 bytes inside its block; AVX2 and F16C are enabled.
            unsafe {
                let sc = _mm_loadu_si128(b.as_ptr().cast());
                let (scales, mins) = (_mm_and_si128(sc, m4), _mm_and_si128(_mm_srli_epi16::<4>(sc), m4));
                let mut sumi = _mm256_setzero_si256();
                for c in 0..2 {
                    let q = load(&b[16 + 32 * c..]);
                    for s in 0..4 {
                        let u = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * s as i32)), m3);
                        let av = load(&ba[4 + 128 * c + 32 * s..]);
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, av), scale_pair(scales, 8 * c + 2 * s));
                        sumi = _mm256_add_epi32(sumi, p);
                    }
                }
                let msum = hsum_i32x8(_mm256_madd_epi16(_mm256_cvtepu8_epi16(mins), bsums(ba)));
                let (d, dmin) = (f16c_at(b, 80), f16c_at(b, 82));
                acc = super_block_term(acc, d, dmin, q8k_d(ba), hsum_i32x8(sumi), msum);
            }
        }
        acc
    }

    /// AVX2 Q3_K x Q8_K: levels kept unsigned (plus 4) for `maddubs`, the offset taken back
    /// out through the activation's group sums; the sixteen 6-bit scales unpacked four at a
    /// time ([`super::q3k_scale_words`]). Integer sums reduced whole, then the spec's float
    /// step.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `w` and `a` hold the same number of whole blocks.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q3k(w: &[u8], a: &[u8]) -> f32 {
        let m3 = _mm256_set1_epi8(3);
        let mut acc = 0.0f32;
        for (b, ba) in w.chunks_exact(KFormat::Q3K.block_bytes()).zip(a.chunks_exact(Q8_K_BYTES)) {
            let sw = q3k_scale_words(&b[96..108]);
            // SAFETY: a Q3_K block is 110 bytes (high bits 0..32, levels 32..96, scales
            // 96..108, d 108..110), a Q8_K block 292; every load leaves 32 bytes inside its
            // block; AVX2 and F16C are enabled.
            unsafe {
                let scales = _mm_sub_epi8(
                    _mm_setr_epi32(sw[0] as i32, sw[1] as i32, sw[2] as i32, sw[3] as i32),
                    _mm_set1_epi8(32),
                );
                let hm = load(b);
                // The offset's share, 4 * sum_g scale_g * bsum_g, starts the integer sum (one
                // horizontal sum per super-block, exact in i32).
                let bias = _mm256_madd_epi16(_mm256_cvtepi8_epi16(scales), bsums(ba));
                let mut sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32::<2>(bias));
                for c in 0..2 {
                    let q = load(&b[32 + 32 * c..]);
                    for s in 0..4 {
                        let low = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * s as i32)), m3);
                        // The high bit of level e sits at bit e / 32 of hmask[e % 32]; level + 4.
                        let u = _mm256_or_si256(low, bit_of_bytes(hm, 4 * c + s, 2));
                        let av = load(&ba[4 + 128 * c + 32 * s..]);
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(u, av), scale_pair(scales, 8 * c + 2 * s));
                        sumi = _mm256_add_epi32(sumi, p);
                    }
                }
                acc = super_block_term(acc, f16c_at(b, 108), 0.0, q8k_d(ba), hsum_i32x8(sumi), 0);
            }
        }
        acc
    }
}

pub use super::rowdot::{RowDot, RowDot4};

/// A four-row kernel for `f` where one exists (Q4_K, Q5_K, Q6_K on AVX2).
pub fn row_kernel_x4(f: KFormat) -> Option<RowDot4> {
    #[cfg(target_arch = "x86_64")]
    if super::native::simd::has_avx512_int() {
        match f {
            KFormat::Q4K => return Some(avx512::dot_q4k_x4),
            KFormat::Q6K => return Some(avx512::dot_q6k_x4),
            _ => {}
        }
    }
    #[cfg(target_arch = "x86_64")]
    if super::native::simd::level().has_avx2() && super::native::simd::has_f16c() {
        return match f {
            KFormat::Q4K => Some(avx2::dot_q4k_x4),
            KFormat::Q5K => Some(avx2::dot_q5k_x4),
            KFormat::Q6K => Some(avx2::dot_q6k_x4),
            _ => None,
        };
    }
    let _ = f;
    None
}

/// The fastest available kernel for K-quant format `f`, chosen once per matrix product.
/// Calling it is safe for rows of whole blocks of `f` and matching Q8_K rows.
pub fn row_kernel(f: KFormat) -> RowDot {
    #[cfg(target_arch = "x86_64")]
    if super::native::simd::has_avx512_int() {
        match f {
            KFormat::Q4K => return avx512::dot_q4k,
            KFormat::Q6K => return avx512::dot_q6k,
            _ => {}
        }
    }
    #[cfg(target_arch = "x86_64")]
    if super::native::simd::level().has_avx2() && super::native::simd::has_f16c() {
        return match f {
            KFormat::Q4K => avx2::dot_q4k,
            KFormat::Q5K => avx2::dot_q5k,
            KFormat::Q6K => avx2::dot_q6k,
            KFormat::Q2K => avx2::dot_q2k,
            KFormat::Q3K => avx2::dot_q3k,
        };
    }
    match f {
        KFormat::Q2K => |w, a| dot_k_q8_k_scalar(KFormat::Q2K, w, a),
        KFormat::Q3K => |w, a| dot_k_q8_k_scalar(KFormat::Q3K, w, a),
        KFormat::Q4K => |w, a| dot_k_q8_k_scalar(KFormat::Q4K, w, a),
        KFormat::Q5K => |w, a| dot_k_q8_k_scalar(KFormat::Q5K, w, a),
        KFormat::Q6K => |w, a| dot_k_q8_k_scalar(KFormat::Q6K, w, a),
    }
}

/// A K-quant weight row times a Q8_K activation row on the best available path.
pub fn dot_k_q8_k(f: KFormat, w: &[u8], a: &[u8]) -> f32 {
    assert_eq!(w.len() / f.block_bytes(), a.len() / Q8_K_BYTES, "dot_k_q8_k: block counts differ");
    assert!(
        w.len().is_multiple_of(f.block_bytes()) && a.len().is_multiple_of(Q8_K_BYTES),
        "dot_k_q8_k: partial blocks"
    );
    // SAFETY: `row_kernel` checked the CPU features; both rows are whole, matching blocks.
    unsafe { row_kernel(f)(w, a) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The word-at-a-time Q3_K scale unpacking gives the spec's scales (plus 32), on 2000
    /// sets of twelve random bytes.
    #[test]
    fn q3k_scale_words_are_the_spec_scales() {
        let mut seed = 0x853c_49e6_748f_ea9bu64;
        for _ in 0..2000 {
            let sc: Vec<u8> = (0..12)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    (seed >> 32) as u8
                })
                .collect();
            let bytes: Vec<u8> = q3k_scale_words(&sc).iter().flat_map(|w| w.to_le_bytes()).collect();
            let got: Vec<i32> = bytes.iter().map(|&b| b as i32 - 32).collect();
            assert_eq!(got, q3k_scales(&sc), "scales of {sc:?}");
        }
    }
}
