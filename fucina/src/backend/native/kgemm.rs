//! The integer GEMM of K-quant weights for batches (prefill): each super-block of a weight
//! row is unpacked once per call into a [`KTile`] (one unsigned byte per level, the scales
//! laid out as the vectors `vpmaddwd` takes), and the tile meets the activation rows eight
//! at a time: per 32 levels one weight load and one scale load serve eight `maddubs` /
//! `madd` / `add` triples, and the group and minimum terms are summed for the eight rows
//! together. The sums are the scalar spec's ([`super::super::qdot_k::dot_k_q8_k_scalar`])
//! integer for integer, combined in the same float order, so the results are the spec's
//! bit for bit.

use super::super::qdot_k::{unpack, KFormat, Q8_K_BYTES, QK_K};
use super::simd::prefetch;

/// Activation rows per micro-kernel call.
pub const GROUP: usize = 8;

/// One weight super-block, unpacked for the micro-kernel.
#[repr(C, align(32))]
#[derive(Clone)]
pub struct KTile {
    /// The 256 levels made unsigned (`q + offset`, at most 63).
    pub q: [u8; QK_K],
    /// Per 32 levels: the scale of their first 16 in lanes 0..8, of the second 16 in 8..16.
    pub scv: [[i16; 16]; 8],
    /// Per 16 levels: `offset * scale`, what making the levels unsigned added.
    pub offsc: [i16; 16],
    /// Per 16 levels: the integer minimum.
    pub min: [i16; 16],
    /// The super-block scale.
    pub d: f32,
    /// The super-block scale of the minimums.
    pub dmin: f32,
}

impl Default for KTile {
    fn default() -> Self {
        KTile { q: [0; QK_K], scv: [[0; 16]; 8], offsc: [0; 16], min: [0; 16], d: 0.0, dmin: 0.0 }
    }
}

/// What a format's levels are shifted by to be unsigned, and whether it has minimums.
pub fn traits(f: KFormat) -> (i32, bool) {
    match f {
        KFormat::Q3K => (4, false),
        KFormat::Q6K => (32, false),
        KFormat::Q2K | KFormat::Q4K | KFormat::Q5K => (0, true),
    }
}

/// Unpacks one super-block of `f` into `t` (the specification of every faster unpacker).
pub fn fill_tile(f: KFormat, block: &[u8], t: &mut KTile) {
    let u = unpack(f, block);
    let (off, _) = traits(f);
    for (o, q) in t.q.iter_mut().zip(u.q.iter()) {
        *o = (q + off) as u8;
    }
    for (s, v) in t.scv.iter_mut().enumerate() {
        for (l, o) in v.iter_mut().enumerate() {
            *o = u.scale[2 * s + l / 8] as i16;
        }
    }
    for g in 0..16 {
        t.offsc[g] = (off * u.scale[g]) as i16;
        t.min[g] = u.min[g] as i16;
    }
    (t.d, t.dmin) = (u.d, u.dmin);
}

/// Unpacks one super-block into `t`: AVX2 where the CPU has it, [`fill_tile`] otherwise (the
/// same tile, byte for byte).
pub fn fill_tile_fast(f: KFormat, block: &[u8], t: &mut KTile) {
    assert!(block.len() >= f.block_bytes(), "kgemm: block size");
    #[cfg(target_arch = "x86_64")]
    if available() {
        // SAFETY: AVX2 and F16C are present (`available`), the block is whole (asserted above).
        unsafe {
            match f {
                KFormat::Q2K => x86::fill_q2k(block, t),
                KFormat::Q3K => x86::fill_q3k(block, t),
                KFormat::Q4K => x86::fill_q4k(block, t),
                KFormat::Q5K => x86::fill_q5k(block, t),
                KFormat::Q6K => x86::fill_q6k(block, t),
            }
        }
        return;
    }
    fill_tile(f, block, t)
}

/// Whether this CPU runs the tile GEMM (AVX2); elsewhere the row kernels serve batches.
pub fn available() -> bool {
    super::simd::level().has_avx2() && super::simd::has_f16c()
}

/// `set(i, j, y[i, j])` for weight rows `j0..j1` and all `m` activation rows (`qa`: `m`
/// Q8_K rows of `a_row` bytes), `w_row(j)` giving weight row `j`'s bytes. Needs
/// [`available`].
#[allow(clippy::too_many_arguments)]
pub fn fill_rows<'w>(
    f: KFormat,
    w_row: impl Fn(usize) -> &'w [u8],
    k: usize,
    qa: &[u8],
    a_row: usize,
    m: usize,
    (j0, j1): (usize, usize),
    mut set: impl FnMut(usize, usize, f32),
) {
    assert!(available(), "kgemm: needs AVX2");
    const P: usize = 8;
    let blocks = k / QK_K;
    let bb = f.block_bytes();
    assert!(qa.len() >= m * a_row && a_row >= blocks * Q8_K_BYTES, "kgemm: activation sizes");
    let m8 = m.div_ceil(GROUP) * GROUP;
    let (_, has_min) = traits(f);
    let mut tiles: Vec<KTile> = vec![KTile::default(); P];
    let mut buf = vec![0.0f32; P * m8];
    let mut p0 = j0;
    while p0 < j1 {
        let rows = P.min(j1 - p0);
        buf.fill(0.0);
        for b in 0..blocks {
            // Start reading what comes next (this panel's next super-block, or the next
            // panel's first) while this one is unpacked and multiplied.
            let (nb, np) = if b + 1 < blocks { (b + 1, p0) } else { (0, p0 + rows) };
            for j in np..(np + P).min(j1) {
                let row = w_row(j);
                if row.len() >= (nb + 1) * bb {
                    prefetch(&row[nb * bb..(nb + 1) * bb]);
                }
            }
            for (r, t) in tiles.iter_mut().take(rows).enumerate() {
                let row = w_row(p0 + r);
                assert!(row.len() >= (b + 1) * bb, "kgemm: weight row");
                fill_tile_fast(f, &row[b * bb..(b + 1) * bb], t);
            }
            for t0 in (0..m).step_by(GROUP) {
                // Rows past `m` repeat the last one; their sums land in `buf`'s padding.
                let acts: [&[u8]; GROUP] = std::array::from_fn(|i| {
                    let a = (t0 + i).min(m - 1) * a_row + b * Q8_K_BYTES;
                    &qa[a..a + Q8_K_BYTES]
                });
                for (r, t) in tiles.iter().take(rows).enumerate() {
                    let out = &mut buf[r * m8 + t0..r * m8 + t0 + GROUP];
                    // SAFETY: AVX2 was checked above; each activation slice is one whole Q8_K
                    // block and `out` holds GROUP floats.
                    unsafe {
                        match (f, has_min) {
                            (KFormat::Q3K | KFormat::Q6K, _) => x86::micro::<true, false>(t, &acts, out),
                            (_, true) => x86::micro::<false, true>(t, &acts, out),
                            (_, false) => x86::micro::<false, false>(t, &acts, out),
                        }
                    }
                }
            }
        }
        // Row by row of the output: the panel's columns are neighbours there.
        for i in 0..m {
            for r in 0..rows {
                set(i, p0 + r, buf[r * m8 + i]);
            }
        }
        p0 += rows;
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    use super::{KTile, GROUP};
    /// Never called: [`super::available`] is false off x86-64.
    pub unsafe fn micro<const OFF: bool, const MIN: bool>(_: &KTile, _: &[&[u8]; GROUP], _: &mut [f32]) {
        unreachable!("kgemm: no AVX2 on this target")
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::super::qdot_k::{k4_scales_mins, q3k_scale_words};
    use super::super::super::x86::{bit_of_bytes, f16c_at};
    use super::{KTile, GROUP};
    use std::arch::x86_64::*;

    /// A little-endian u32 at `b[at..at + 4]`.
    #[inline(always)]
    fn word(b: &[u8], at: usize) -> u32 {
        u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    /// The f16 pair at `b[at..at + 4]` as two f32 (one F16C conversion).
    ///
    /// # Safety
    /// F16C is enabled by the caller.
    #[inline(always)]
    unsafe fn f16_pair(b: &[u8], at: usize) -> (f32, f32) {
        // SAFETY: register-only F16C/SSE intrinsics under the caller's features.
        unsafe {
            let v = _mm_cvtph_ps(_mm_cvtsi32_si128(word(b, at) as i32));
            (_mm_cvtss_f32(v), _mm_cvtss_f32(_mm_shuffle_ps::<1>(v, v)))
        }
    }

    /// The header shared by Q4_K and Q5_K (bytes 0..16: d, dmin, then eight 6-bit scales and
    /// minimums in 12 bytes) into the tile's `d`, `dmin`, `scv`, `min` and `offsc`: the
    /// scales and minimums unpacked together in one register (the row kernels'
    /// [`k4_scales_mins`]), spread to the tile's 16-lane vectors by byte shuffles.
    ///
    /// # Safety
    /// AVX2 and F16C are enabled by the caller; `b` holds at least 20 bytes.
    #[inline(always)]
    unsafe fn k4_header(b: &[u8], t: &mut KTile) {
        // SAFETY: register work and aligned stores into the tile, under the caller's
        // features; bytes 0..4 hold d and dmin, 4..20 are readable.
        unsafe {
            (t.d, t.dmin) = f16_pair(b, 0);
            // Bytes 0..8: the scales; 8..16: the minimums.
            let sm = _mm256_broadcastsi128_si256(k4_scales_mins(&b[4..20]));
            // Scale byte s (zero-extended to 16 bits) into all sixteen lanes of scv[s].
            for s in 0..8 {
                let pick = _mm256_set1_epi16((0x8000 | s) as u16 as i16);
                _mm256_store_si256(t.scv[s].as_mut_ptr().cast(), _mm256_shuffle_epi8(sm, pick));
            }
            // Minimum byte 8 + g / 2 into lane g.
            let z = -128i8; // a shuffle index with the top bit set gives a zero byte
            #[rustfmt::skip]
            let pick = _mm256_setr_epi8(
                8, z, 8, z, 9, z, 9, z, 10, z, 10, z, 11, z, 11, z,
                12, z, 12, z, 13, z, 13, z, 14, z, 14, z, 15, z, 15, z,
            );
            _mm256_store_si256(t.min.as_mut_ptr().cast(), _mm256_shuffle_epi8(sm, pick));
            _mm256_store_si256(t.offsc.as_mut_ptr().cast(), _mm256_setzero_si256());
        }
    }

    /// Sixteen per-group scales (lane g: the scale of levels 16g..16g + 16) into the tile's
    /// `scv`: scale 2s in lanes 0..8 of scv[s], scale 2s + 1 in 8..16. The 32-bit lane s of
    /// `sc16` holds that pair; it goes to every lane, and a byte shuffle keeps its first half
    /// in the low 128 bits and its second in the high.
    ///
    /// # Safety
    /// AVX2 is enabled by the caller.
    #[inline(always)]
    unsafe fn scale_pairs(sc16: __m256i, t: &mut KTile) {
        // SAFETY: register work and aligned stores into the tile, under the caller's AVX2.
        unsafe {
            #[rustfmt::skip]
            let halves = _mm256_setr_epi8(
                0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3,
            );
            for s in 0..8 {
                let pair = _mm256_permutevar8x32_epi32(sc16, _mm256_set1_epi32(s as i32));
                _mm256_store_si256(t.scv[s].as_mut_ptr().cast(), _mm256_shuffle_epi8(pair, halves));
            }
        }
    }

    /// Q4_K (144 bytes: d, dmin, 12 bytes of scales and minimums, 128 bytes of nibbles) and,
    /// with `Q5`, Q5_K (176 bytes: the same header, 32 bytes of fifth bits, then the
    /// nibbles): level `32s + l` is its nibble, plus for Q5_K 16 times bit `s` of byte `l` of
    /// the fifth bits.
    ///
    /// # Safety
    /// AVX2 and F16C are enabled by the caller; `b` holds a whole block.
    #[inline(always)]
    unsafe fn fill_q45k<const Q5: bool>(b: &[u8], t: &mut KTile) {
        let (bytes, nibbles) = if Q5 { (176, 48) } else { (144, 16) };
        assert!(b.len() >= bytes, "kgemm: Q4_K/Q5_K block");
        // SAFETY: the fifth bits are bytes 16..48 (Q5_K), the nibbles `nibbles + 32c + 32 <=
        // bytes`; the tile's levels are 32-byte aligned; the caller enables the features.
        unsafe {
            let m4 = _mm256_set1_epi8(0x0F);
            k4_header(b, t);
            let qh = if Q5 { _mm256_loadu_si256(b.as_ptr().add(16).cast()) } else { _mm256_setzero_si256() };
            for c in 0..4 {
                let v = _mm256_loadu_si256(b.as_ptr().add(nibbles + 32 * c).cast());
                let (mut lo, mut hi) = (_mm256_and_si256(v, m4), _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4));
                if Q5 {
                    lo = _mm256_or_si256(lo, bit_of_bytes(qh, 2 * c, 4));
                    hi = _mm256_or_si256(hi, bit_of_bytes(qh, 2 * c + 1, 4));
                }
                let q = t.q.as_mut_ptr().add(64 * c);
                _mm256_store_si256(q.cast(), lo);
                _mm256_store_si256(q.add(32).cast(), hi);
            }
        }
    }

    /// Q4_K (`fill_q45k`).
    ///
    /// # Safety
    /// AVX2 and F16C are present; `b` holds 144 bytes.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn fill_q4k(b: &[u8], t: &mut KTile) {
        // SAFETY: the caller's guarantees are the body's.
        unsafe { fill_q45k::<false>(b, t) }
    }

    /// Q5_K (`fill_q45k`).
    ///
    /// # Safety
    /// AVX2 and F16C are present; `b` holds 176 bytes.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn fill_q5k(b: &[u8], t: &mut KTile) {
        // SAFETY: the caller's guarantees are the body's.
        unsafe { fill_q45k::<true>(b, t) }
    }

    /// Q2_K (84 bytes: 16 bytes of 4-bit scales and minimums, 64 bytes of 2-bit levels, d,
    /// dmin): level `128c + 32j + l` is bits 2j..2j + 2 of byte `32c + l`.
    ///
    /// # Safety
    /// AVX2 and F16C are present; `b` holds 84 bytes.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn fill_q2k(b: &[u8], t: &mut KTile) {
        assert!(b.len() >= 84, "kgemm: Q2_K block");
        let m3 = _mm256_set1_epi8(3);
        // SAFETY: the scales are bytes 0..16, the levels 16..80, d and dmin 80..84; the
        // tile's vectors are 32-byte aligned.
        unsafe {
            for c in 0..2 {
                let v = _mm256_loadu_si256(b.as_ptr().add(16 + 32 * c).cast());
                for j in 0..4 {
                    let q = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * j as i32)), m3);
                    _mm256_store_si256(t.q.as_mut_ptr().add(128 * c + 32 * j).cast(), q);
                }
            }
            let sc = _mm_loadu_si128(b.as_ptr().cast());
            let m4 = _mm_set1_epi8(0x0F);
            scale_pairs(_mm256_cvtepu8_epi16(_mm_and_si128(sc, m4)), t);
            let mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16::<4>(sc), m4));
            _mm256_store_si256(t.min.as_mut_ptr().cast(), mn);
            _mm256_store_si256(t.offsc.as_mut_ptr().cast(), _mm256_setzero_si256());
            (t.d, t.dmin) = f16_pair(b, 80);
        }
    }

    /// Q3_K (110 bytes: 32 bytes of high bits, 64 bytes of 2-bit levels, 12 bytes of 6-bit
    /// scales, d): level `128c + 32j + l` is bits 2j..2j + 2 of byte `32 + 32c + l`, less 4
    /// unless bit `4c + j` of byte `l` of the high bits is set. The tile holds it plus 4
    /// (the two low bits, and the high bit as bit 2); the sixteen scales, less 32, come out
    /// of their 12 bytes four at a time ([`q3k_scale_words`]).
    ///
    /// # Safety
    /// AVX2 and F16C are present; `b` holds 110 bytes.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn fill_q3k(b: &[u8], t: &mut KTile) {
        assert!(b.len() >= 110, "kgemm: Q3_K block");
        let m3 = _mm256_set1_epi8(3);
        let raw = q3k_scale_words(&b[96..108]);
        // SAFETY: the high bits are bytes 0..32, the levels 32..96, d bytes 108..110; the
        // tile's vectors are 32-byte aligned.
        unsafe {
            let hm = _mm256_loadu_si256(b.as_ptr().cast());
            for c in 0..2 {
                let v = _mm256_loadu_si256(b.as_ptr().add(32 + 32 * c).cast());
                for j in 0..4 {
                    let low = _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(2 * j as i32)), m3);
                    let q = _mm256_or_si256(low, bit_of_bytes(hm, 4 * c + j, 2));
                    _mm256_store_si256(t.q.as_mut_ptr().add(128 * c + 32 * j).cast(), q);
                }
            }
            let bytes = _mm_setr_epi32(raw[0] as i32, raw[1] as i32, raw[2] as i32, raw[3] as i32);
            let sc16 = _mm256_sub_epi16(_mm256_cvtepu8_epi16(bytes), _mm256_set1_epi16(32));
            scale_pairs(sc16, t);
            _mm256_store_si256(t.offsc.as_mut_ptr().cast(), _mm256_slli_epi16::<2>(sc16));
            _mm256_store_si256(t.min.as_mut_ptr().cast(), _mm256_setzero_si256());
            (t.d, t.dmin) = (f16c_at(b, 108), 0.0);
        }
    }

    /// Q6_K (210 bytes: 128 bytes of low nibbles, 64 of high pairs, 16 int8 scales, d).
    ///
    /// # Safety
    /// AVX2 and F16C are present; `b` holds 210 bytes.
    #[target_feature(enable = "avx2,f16c")]
    pub unsafe fn fill_q6k(b: &[u8], t: &mut KTile) {
        assert!(b.len() >= 210, "kgemm: Q6_K block");
        let (m4, m3) = (_mm256_set1_epi8(0x0F), _mm256_set1_epi8(3));
        // SAFETY: the loads stay in ql (0..128) and qh (128..192); the stores in the tile.
        unsafe {
            for h in 0..2 {
                let l0 = _mm256_loadu_si256(b.as_ptr().add(64 * h).cast());
                let l1 = _mm256_loadu_si256(b.as_ptr().add(64 * h + 32).cast());
                let hb = _mm256_loadu_si256(b.as_ptr().add(128 + 32 * h).cast());
                let high = |shift: __m128i| _mm256_slli_epi16::<4>(_mm256_and_si256(_mm256_srl_epi16(hb, shift), m3));
                let parts = [
                    _mm256_or_si256(_mm256_and_si256(l0, m4), high(_mm_cvtsi32_si128(0))),
                    _mm256_or_si256(_mm256_and_si256(l1, m4), high(_mm_cvtsi32_si128(2))),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(l0), m4), high(_mm_cvtsi32_si128(4))),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(l1), m4), high(_mm_cvtsi32_si128(6))),
                ];
                for (o, v) in parts.into_iter().enumerate() {
                    _mm256_store_si256(t.q.as_mut_ptr().add(128 * h + 32 * o).cast(), v);
                }
            }
        }
        // SAFETY: the 16 scales are bytes 192..208; the tile's vectors are 32-byte aligned.
        unsafe {
            let sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(b.as_ptr().add(192).cast()));
            _mm256_store_si256(t.offsc.as_mut_ptr().cast(), _mm256_slli_epi16::<5>(sc16));
            scale_pairs(sc16, t);
            _mm256_store_si256(t.min.as_mut_ptr().cast(), _mm256_setzero_si256());
            (t.d, t.dmin) = (f16c_at(b, 208), 0.0);
        }
    }

    /// Eight vectors of eight i32 to one vector of their eight sums (`out[i] = sum(v[i])`).
    #[inline(always)]
    unsafe fn reduce8(v: [__m256i; 8]) -> __m256i {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            let h01 = _mm256_hadd_epi32(v[0], v[1]);
            let h23 = _mm256_hadd_epi32(v[2], v[3]);
            let h45 = _mm256_hadd_epi32(v[4], v[5]);
            let h67 = _mm256_hadd_epi32(v[6], v[7]);
            let a = _mm256_hadd_epi32(h01, h23);
            let b = _mm256_hadd_epi32(h45, h67);
            _mm256_add_epi32(_mm256_permute2x128_si256::<0x20>(a, b), _mm256_permute2x128_si256::<0x31>(a, b))
        }
    }

    /// `out[i] += (d * da_i) * S1_i - (dmin * da_i) * S2_i` for the eight activation
    /// blocks `a` (Q8_K: f32 scale, 256 levels, 16 group sums), S1 the scaled level products
    /// less the offset term (`OFF`), S2 the minimum term (`MIN`).
    ///
    /// # Safety
    /// AVX2 is present; every `a[i]` holds a whole Q8_K block; `out` holds 8 floats.
    #[target_feature(enable = "avx2")]
    pub unsafe fn micro<const OFF: bool, const MIN: bool>(t: &KTile, a: &[&[u8]; GROUP], out: &mut [f32]) {
        debug_assert!(out.len() >= GROUP && a.iter().all(|x| x.len() >= 292));
        let ap: [*const u8; GROUP] = std::array::from_fn(|i| a[i].as_ptr());
        // SAFETY: (loads) the tile's arrays are 32-byte aligned and whole; each activation
        // block has its levels at 4..260 and its group sums at 260..292.
        unsafe {
            let mut acc = [_mm256_setzero_si256(); GROUP];
            for s in 0..8 {
                let w = _mm256_load_si256(t.q.as_ptr().add(32 * s).cast());
                let sc = _mm256_load_si256(t.scv[s].as_ptr().cast());
                for i in 0..GROUP {
                    let av = _mm256_loadu_si256(ap[i].add(4 + 32 * s).cast());
                    acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(w, av), sc));
                }
            }
            if OFF {
                let o = _mm256_load_si256(t.offsc.as_ptr().cast());
                for i in 0..GROUP {
                    let bs = _mm256_loadu_si256(ap[i].add(260).cast());
                    acc[i] = _mm256_sub_epi32(acc[i], _mm256_madd_epi16(o, bs));
                }
            }
            let s1 = reduce8(acc);
            let da = _mm256_setr_ps(
                ap[0].cast::<f32>().read_unaligned(),
                ap[1].cast::<f32>().read_unaligned(),
                ap[2].cast::<f32>().read_unaligned(),
                ap[3].cast::<f32>().read_unaligned(),
                ap[4].cast::<f32>().read_unaligned(),
                ap[5].cast::<f32>().read_unaligned(),
                ap[6].cast::<f32>().read_unaligned(),
                ap[7].cast::<f32>().read_unaligned(),
            );
            let mut res = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(t.d), da), _mm256_cvtepi32_ps(s1));
            if MIN {
                let mv = _mm256_load_si256(t.min.as_ptr().cast());
                let m: [__m256i; GROUP] =
                    std::array::from_fn(|i| _mm256_madd_epi16(mv, _mm256_loadu_si256(ap[i].add(260).cast())));
                let s2 = reduce8(m);
                let t2 = _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(t.dmin), da), _mm256_cvtepi32_ps(s2));
                res = _mm256_sub_ps(res, t2);
            }
            let o = out.as_mut_ptr();
            _mm256_storeu_ps(o, _mm256_add_ps(_mm256_loadu_ps(o), res));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::qdot_k::{dot_k_q8_k_scalar, quantize_row_q8_k};
    use super::*;

    /// `n` arbitrary bytes from a xorshift generator.
    fn bytes(seed: &mut u64, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                *seed ^= *seed << 13;
                *seed ^= *seed >> 7;
                *seed ^= *seed << 17;
                (*seed >> 24) as u8
            })
            .collect()
    }

    /// The tile GEMM gives the scalar spec's dots bit for bit, over a partial panel of
    /// weight rows and a partial group of activation rows.
    #[test]
    fn tile_gemm_is_the_spec_bit_for_bit() {
        if !available() {
            return;
        }
        let (n, m, k) = (11, 19, 512);
        let val = |s: usize, i: usize| ((i * 7919 + s * 104_729) % 2003) as f32 / 1001.5 - 1.0;
        let a_row = k / QK_K * Q8_K_BYTES;
        let mut qa = vec![0u8; m * a_row];
        for i in 0..m {
            let x: Vec<f32> = (0..k).map(|t| val(i + 3, t)).collect();
            quantize_row_q8_k(&x, &mut qa[i * a_row..(i + 1) * a_row]);
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        for f in [KFormat::Q2K, KFormat::Q3K, KFormat::Q4K, KFormat::Q5K, KFormat::Q6K] {
            let rb = k / QK_K * f.block_bytes();
            // Arbitrary bytes, with each block's f16 scales set to finite values.
            let mut w = bytes(&mut seed, n * rb);
            let d_at: &[usize] = match f {
                KFormat::Q2K => &[80, 82],
                KFormat::Q3K => &[108],
                KFormat::Q4K | KFormat::Q5K => &[0, 2],
                KFormat::Q6K => &[208],
            };
            for blk in w.chunks_exact_mut(f.block_bytes()) {
                for &at in d_at {
                    blk[at + 1] &= 0x3b; // exponent well below infinity
                }
            }
            let mut got = vec![f32::NAN; m * n];
            fill_rows(f, |j| &w[j * rb..(j + 1) * rb], k, &qa, a_row, m, (0, n), |i, j, v| got[i * n + j] = v);
            for i in 0..m {
                for j in 0..n {
                    let want = dot_k_q8_k_scalar(f, &w[j * rb..(j + 1) * rb], &qa[i * a_row..(i + 1) * a_row]);
                    assert_eq!(
                        got[i * n + j].to_bits(),
                        want.to_bits(),
                        "{f:?} [{i},{j}]: {} vs {want}",
                        got[i * n + j]
                    );
                }
            }
        }
    }

    /// The AVX2 unpackers give the spec's tile byte for byte, on blocks of arbitrary bytes.
    #[test]
    fn fast_tiles_match_the_spec() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for f in [KFormat::Q2K, KFormat::Q3K, KFormat::Q4K, KFormat::Q5K, KFormat::Q6K] {
            for _ in 0..200 {
                let block = bytes(&mut seed, f.block_bytes());
                let (mut a, mut b) = (KTile::default(), KTile::default());
                fill_tile(f, &block, &mut a);
                fill_tile_fast(f, &block, &mut b);
                assert_eq!(a.q, b.q, "{f:?} levels");
                assert_eq!(a.scv, b.scv, "{f:?} scales");
                assert_eq!(a.offsc, b.offsc, "{f:?} offsets");
                assert_eq!(a.min, b.min, "{f:?} minimums");
                assert_eq!((a.d.to_bits(), a.dmin.to_bits()), (b.d.to_bits(), b.dmin.to_bits()), "{f:?} scales");
            }
        }
    }
}
