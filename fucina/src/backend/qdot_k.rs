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
            for g in 0..16 {
                u.scale[g] = (sc[g] & 0xF) as i32;
                u.min[g] = (sc[g] >> 4) as i32;
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
            for g in 0..16 {
                u.scale[g] = sc[g] as i8 as i32;
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
        let da = q8k_d(ba);
        acc += u.d * da * isum as f32 - u.dmin * da * msum as f32;
    }
    acc
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{f16_at, q3k_scales, q8k_bsum, q8k_d, scale_min_k4, KFormat, Q8_K_BYTES};
    use std::arch::x86_64::*;

    #[inline(always)]
    unsafe fn load(p: &[u8]) -> __m256i {
        debug_assert!(p.len() >= 32);
        // SAFETY: callers pass slices of at least 32 bytes; the load is unaligned.
        unsafe { _mm256_loadu_si256(p.as_ptr() as *const __m256i) }
    }

    /// `sum_k u[k] * a[k]` per 16-byte half, each half weighted by its own i16 scale:
    /// the result's lanes 0..4 come from bytes 0..16 (scale `s0`), 4..8 from 16..32 (`s1`).
    #[inline(always)]
    unsafe fn dot32(u: __m256i, a: __m256i, s0: i32, s1: i32) -> __m256i {
        let p = _mm256_maddubs_epi16(u, a);
        let s = _mm256_set_m128i(_mm_set1_epi16(s1 as i16), _mm_set1_epi16(s0 as i16));
        _mm256_madd_epi16(p, s)
    }

    #[inline(always)]
    unsafe fn hsum_i32(v: __m256i) -> i32 {
        let s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b01_00_11_10));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0b10_11_00_01));
        _mm_cvtsi128_si32(s)
    }

    /// AVX2 K-quant x Q8_K. Levels are kept unsigned for `maddubs` (offset `bias`), and the
    /// offset is taken back out through the activation's group sums.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA; `w` and `a` hold the same number of whole blocks.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn dot_k_q8_k(f: KFormat, w: &[u8], a: &[u8]) -> f32 {
        let m3 = _mm256_set1_epi8(3);
        let m4 = _mm256_set1_epi8(0x0F);
        let one = _mm256_set1_epi8(1);
        let mut acc = 0.0f32;
        for (b, ba) in w.chunks_exact(f.block_bytes()).zip(a.chunks_exact(Q8_K_BYTES)) {
            let qa = &ba[4..260];
            let mut sumi = _mm256_setzero_si256();
            // `bias`: the level offset's share of the integer sum (Q3_K, Q6_K); `msum`: the
            // minimums' integer sum, scaled by `dmin` (Q2_K, Q4_K, Q5_K).
            let (d, dmin): (f32, f32);
            let (mut bias, mut msum) = (0i32, 0i32);
            // SAFETY (all loads below): every offset leaves 32 bytes inside the block / row.
            match f {
                KFormat::Q2K => {
                    let (sc, qs) = (&b[..16], &b[16..80]);
                    for c in 0..2 {
                        let q = unsafe { load(&qs[32 * c..]) };
                        for s in 0..4 {
                            let u = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * s as i32)), m3);
                            let g = 8 * c + 2 * s;
                            let av = unsafe { load(&qa[128 * c + 32 * s..]) };
                            let p = unsafe { dot32(u, av, (sc[g] & 0xF) as i32, (sc[g + 1] & 0xF) as i32) };
                            sumi = _mm256_add_epi32(sumi, p);
                        }
                    }
                    (d, dmin) = (f16_at(b, 80), f16_at(b, 82));
                    msum = (0..16).map(|g| (sc[g] >> 4) as i32 * q8k_bsum(ba, g)).sum();
                }
                KFormat::Q3K => {
                    let (hmask, qs) = (&b[..32], &b[32..96]);
                    let scales = q3k_scales(&b[96..108]);
                    let hm = unsafe { load(hmask) };
                    for c in 0..2 {
                        let q = unsafe { load(&qs[32 * c..]) };
                        for s in 0..4 {
                            let low = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * s as i32)), m3);
                            // The high bit of value e sits at bit e/32 of hmask[e % 32]; level + 4.
                            let bit = (4 * c + s) as i32;
                            let high = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(bit)), one);
                            let u = _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
                            let g = 8 * c + 2 * s;
                            let av = unsafe { load(&qa[128 * c + 32 * s..]) };
                            let p = unsafe { dot32(u, av, scales[g], scales[g + 1]) };
                            sumi = _mm256_add_epi32(sumi, p);
                        }
                    }
                    (d, dmin) = (f16_at(b, 108), 0.0);
                    bias = (0..16).map(|g| 4 * scales[g] * q8k_bsum(ba, g)).sum();
                }
                KFormat::Q4K | KFormat::Q5K => {
                    let (s8, m8) = scale_min_k4(&b[4..16]);
                    let q5 = f == KFormat::Q5K;
                    let qs = if q5 { &b[48..176] } else { &b[16..144] };
                    let hm = if q5 { unsafe { load(&b[16..48]) } } else { _mm256_setzero_si256() };
                    for c in 0..4 {
                        let q = unsafe { load(&qs[32 * c..]) };
                        let mut lo = _mm256_and_si256(q, m4);
                        let mut hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                        if q5 {
                            let b0 = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(2 * c as i32)), one);
                            let b1 = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(2 * c as i32 + 1)), one);
                            lo = _mm256_or_si256(lo, _mm256_slli_epi16(b0, 4));
                            hi = _mm256_or_si256(hi, _mm256_slli_epi16(b1, 4));
                        }
                        let (a0, a1) = unsafe { (load(&qa[64 * c..]), load(&qa[64 * c + 32..])) };
                        let (s0, s1) = (s8[2 * c] as i32, s8[2 * c + 1] as i32);
                        let p0 = unsafe { dot32(lo, a0, s0, s0) };
                        let p1 = unsafe { dot32(hi, a1, s1, s1) };
                        sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p0, p1));
                    }
                    (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
                    msum = (0..8).map(|j| m8[j] as i32 * (q8k_bsum(ba, 2 * j) + q8k_bsum(ba, 2 * j + 1))).sum();
                }
                KFormat::Q6K => {
                    let (ql, qh, sc) = (&b[..128], &b[128..192], &b[192..208]);
                    let scale = |g: usize| sc[g] as i8 as i32;
                    for h in 0..2 {
                        let (l0, l1) = unsafe { (load(&ql[64 * h..]), load(&ql[64 * h + 32..])) };
                        let hb = unsafe { load(&qh[32 * h..]) };
                        let high = |s: i32| {
                            _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(hb, _mm_cvtsi32_si128(s)), m3), 4)
                        };
                        let parts = [
                            _mm256_or_si256(_mm256_and_si256(l0, m4), high(0)),
                            _mm256_or_si256(_mm256_and_si256(l1, m4), high(2)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), high(4)),
                            _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), high(6)),
                        ];
                        for (o, u) in parts.into_iter().enumerate() {
                            let g = 8 * h + 2 * o;
                            let av = unsafe { load(&qa[128 * h + 32 * o..]) };
                            let p = unsafe { dot32(u, av, scale(g), scale(g + 1)) };
                            sumi = _mm256_add_epi32(sumi, p);
                        }
                    }
                    (d, dmin) = (f16_at(b, 208), 0.0);
                    bias = (0..16).map(|g| 32 * scale(g) * q8k_bsum(ba, g)).sum();
                }
            }
            let da = q8k_d(ba);
            // SAFETY: AVX2 is enabled for this function.
            let isum = unsafe { hsum_i32(sumi) };
            acc += d * da * (isum - bias) as f32 - dmin * da * msum as f32;
        }
        acc
    }
}

/// A K-quant weight row times a Q8_K activation row on the best available path.
pub fn dot_k_q8_k(f: KFormat, w: &[u8], a: &[u8]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    if super::native::simd::level().has_avx2() {
        // SAFETY: checked above: the CPU reports AVX2 and FMA.
        return unsafe { avx2::dot_k_q8_k(f, w, a) };
    }
    dot_k_q8_k_scalar(f, w, a)
}
