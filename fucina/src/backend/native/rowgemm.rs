//! GEMM of row-major activations `x [m, k]` with a row-major float weight `w [n, k]`
//! (f32, f16 or bf16 bytes, as stored in a model file): `y = x w^T`, with no packing. A
//! register tile of `RM` activation rows by `RN` weight rows keeps `RM x RN` vector
//! accumulators running along `k`; the weight is widened to f32 as it is loaded, and each
//! accumulator is summed across lanes once at the end. Both operands are read along their
//! contiguous axis, so nothing is transposed or copied, and a weight row is read once per
//! tile of activation rows (in L1 across the tiles of a block).

use super::simd::{self, Level};
use crate::backend::fdot::{self, FloatRow};

/// Activation rows per block: the block stays in L2 while a task's weight rows meet it.
const IBLOCK: usize = 16;

/// The output pointer; tasks write disjoint column ranges.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: each task writes only the columns of its own weight-row range.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

/// A tile kernel: `out[i * ldo + j] = dot(x row i, w row j)` for the tile's rows.
type Tile = unsafe fn(FloatRow, &[f32], usize, &[u8], usize, usize, *mut f32, usize);

/// The register tiles of this CPU: `pick(rm, rn)` for `rm` in {1, `rm`} and `rn` in
/// `1..=rn`, so that the edges of a product (rows past the last whole tile, weight rows past
/// the last whole tile) also run as tiles of lane sums rather than one dot product each.
struct Tiles {
    rm: usize,
    rn: usize,
    pick: fn(usize, usize) -> Tile,
}

impl Tiles {
    /// The tiles for this CPU, if it has them (AVX-512 or AVX2 with F16C).
    fn detect() -> Option<Tiles> {
        match simd::level() {
            #[cfg(target_arch = "x86_64")]
            Level::Avx512 if crate::backend::qdot::has_f16c() => Some(Tiles { rm: 4, rn: 6, pick: x86::pick_avx512 }),
            #[cfg(target_arch = "x86_64")]
            // Two rows by six: twelve accumulators, two activation vectors and the weight vector
            // in hand fit the sixteen ymm registers with one to spare. The 3 x 4 tile this
            // replaced needed all sixteen, and LLVM's schedule kept two weight vectors live, so
            // one accumulator went through the stack every step (Qwen3-0.6B F16 on Zen 3, 2
            // threads, pp64: 78-83 -> 89-152 tok/s, 137-152 without one outlier).
            Level::Avx2Fma if crate::backend::qdot::has_f16c() => Some(Tiles { rm: 2, rn: 6, pick: x86::pick_avx2 }),
            _ => None,
        }
    }
}

/// Whether this CPU has the register tiles (AVX-512, or AVX2 with F16C); without them
/// [`gemm_rows`] runs one dot product per output.
pub fn has_tiles() -> bool {
    Tiles::detect().is_some()
}

/// `y [m, n] = x [m, k] * w [n, k]^T` for a float weight stored as bytes of `fmt`.
#[allow(clippy::too_many_arguments)]
pub fn gemm_rows(m: usize, n: usize, k: usize, x: &[f32], w: &[u8], fmt: FloatRow, y: &mut [f32], parallel: bool) {
    assert!(x.len() >= m * k && w.len() >= n * k * fmt.width() && y.len() >= m * n, "gemm_rows: sizes");
    if m == 0 || n == 0 {
        return;
    }
    let tiles = Tiles::detect();
    let rn = tiles.as_ref().map_or(1, |t| t.rn);
    let row = fdot::row_kernel(fmt);
    let wb = k * fmt.width();
    let out = OutPtr(y.as_mut_ptr());
    // Columns j0..j1 (a block of weight rows that stays in L2) for all rows: whole tiles, then
    // the leftover rows one at a time, then the leftover weight rows as narrower tiles.
    let block = |j0: usize, j1: usize| {
        let o = out;
        for i0 in (0..m).step_by(IBLOCK) {
            let i1 = (i0 + IBLOCK).min(m);
            let mut j = j0;
            while j < j1 {
                let cols = rn.min(j1 - j);
                let Some(t) = &tiles else {
                    for ii in i0..i1 {
                        // SAFETY: row lengths match (k values each); (ii, j) is this task's.
                        unsafe { *o.0.add(ii * n + j) = row(&w[j * wb..(j + 1) * wb], &x[ii * k..(ii + 1) * k]) };
                    }
                    j += 1;
                    continue;
                };
                let (full, one) = ((t.pick)(t.rm, cols), (t.pick)(1, cols));
                // The first tile of the block's rows asks L2 for the next tile's weight rows
                // while it reads this tile's: one stream at a time from memory, met by the
                // next tile in L2 (Qwen3-0.6B F16 on 1 thread, pp16: 77 -> 93 tok/s).
                let next = if j + cols + rn <= n { rn * wb } else { 0 };
                let mut i = i0;
                while i < i1 {
                    let (tile, rows) = if i + t.rm <= i1 { (full, t.rm) } else { (one, 1) };
                    let pf = if i == i0 { next } else { 0 };
                    // SAFETY: rows i..i+rows of x and j..j+cols of w exist (and, where `pf` is not
                    // zero, rows j+cols..j+cols+rn for the prefetches); the tile writes
                    // out[(i..i+rows) * n + (j..j+cols)], inside y and inside this task's columns;
                    // `pick` returned a kernel of exactly that shape for this CPU.
                    unsafe { tile(fmt, &x[i * k..], k, &w[j * wb..], wb, pf, o.0.add(i * n + j), n) };
                    i += rows;
                }
                j += cols;
            }
        }
    };
    // A task's weight rows in blocks of whole tiles: each block is read from memory once and
    // met by every activation row before the next.
    let jblock = rn * 8;
    let task = |j0: usize, j1: usize| {
        for jb in (j0..j1).step_by(jblock) {
            block(jb, (jb + jblock).min(j1));
        }
    };
    if parallel {
        let threads = rayon::current_num_threads().max(1);
        // Ranges of whole tiles, about eight per thread.
        let per = n.div_ceil(8 * threads).div_ceil(rn).max(1) * rn;
        super::team::for_each(n.div_ceil(per), |c| task(c * per, ((c + 1) * per).min(n)));
    } else {
        task(0, n);
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::FloatRow;
    use std::arch::x86_64::*;

    /// Writes a register-tiled dot-product kernel of `RM` activation rows by up to `RN`
    /// weight rows over `LANES`-wide vectors.
    macro_rules! tile_kernel {
        ($name:ident, $feature:literal, lanes: $lanes:literal,
         vec: $vec:ty, zero: $zero:ident, loadu: $loadu:ident, fma: $fma:ident, store: $store:ident,
         f16: $f16:ident, bf16: $bf16:ident) => {
            /// Tile kernel (see the module docs).
            ///
            /// # Safety
            /// The CPU has the enabled features; `x` holds `RM` rows of `k` f32 at stride `k`;
            /// `w` holds `RN` rows of `k` values of `fmt` at stride `wb` bytes; `out` is valid
            /// for `RM` rows of `RN` floats at stride `ldo`. Unless `pf` is 0, the `RN` rows of
            /// the same allocation starting `pf` bytes past `w` are prefetched into L2 (the next
            /// tile's rows), one cache line per row as the loop reaches it.
            #[target_feature(enable = $feature)]
            #[allow(clippy::too_many_arguments)]
            pub unsafe fn $name<const RM: usize, const RN: usize>(
                fmt: FloatRow,
                x: &[f32],
                k: usize,
                w: &[u8],
                wb: usize,
                pf: usize,
                out: *mut f32,
                ldo: usize,
            ) {
                const L: usize = $lanes;
                let xp = x.as_ptr();
                let wp = w.as_ptr();
                let steps = k / L;
                // SAFETY: (loads) p * L + L <= k values of every row; weights widened per format;
                // the features of this function are enabled and `out` is valid for the tile (the
                // caller's contract).
                unsafe {
                    // The loop and the write of the tile's sums, with the weight load spelled out
                    // per format (no closures, so everything inlines under this function's target
                    // features; one accumulator array per arm, so LLVM keeps it in registers).
                    macro_rules! run {
                        ($bp:ident, $p:ident, $width:literal => $load_w:expr) => {{
                            let mut acc: [[$vec; RN]; RM] = [[$zero(); RN]; RM];
                            // One step: RM activation vectors against RN weight vectors.
                            macro_rules! step {
                                ($q:ident, $wrow:ident, $lw:expr) => {{
                                    let mut a: [$vec; RM] = [$zero(); RM];
                                    for i in 0..RM {
                                        a[i] = $loadu(xp.add(i * k + $q * L));
                                    }
                                    for j in 0..RN {
                                        let $wrow = wp.add(j * wb);
                                        let b: $vec = $lw;
                                        for i in 0..RM {
                                            acc[i][j] = $fma(a[i], b, acc[i][j]);
                                        }
                                    }
                                }};
                            }
                            // The steps of one 64-byte line of weight rows, unrolled, with the
                            // prefetch (when asked) once per line rather than a test per step.
                            const PER: usize = 64 / (L * $width);
                            let whole = steps / PER * PER;
                            let mut $p = 0;
                            while $p < whole {
                                if pf != 0 {
                                    for j in 0..RN {
                                        _mm_prefetch::<_MM_HINT_T1>(wp.add(pf + j * wb + $p * L * $width).cast());
                                    }
                                }
                                for _ in 0..PER {
                                    step!($p, $bp, $load_w);
                                    $p += 1;
                                }
                            }
                            while $p < steps {
                                step!($p, $bp, $load_w);
                                $p += 1;
                            }
                            // All RM x RN lane sums at once, in registers, written row by row.
                            $store::<RM, RN>(&acc, out, ldo);
                        }};
                    }
                    match fmt {
                        FloatRow::F32 => run!(bp, p, 4 => $loadu(bp.cast::<f32>().add(p * L))),
                        FloatRow::F16 => run!(bp, p, 2 => $f16(bp.add(2 * p * L))),
                        FloatRow::BF16 => run!(bp, p, 2 => $bf16(bp.add(2 * p * L))),
                    }
                }
                if steps * L < k {
                    for i in 0..RM {
                        for j in 0..RN {
                            let mut s = 0.0f32;
                            for q in steps * L..k {
                                s += x[i * k + q] * fmt.get(&w[j * wb..], q);
                            }
                            // SAFETY: (i, j) is inside the tile the caller guarantees.
                            unsafe { *out.add(i * ldo + j) += s };
                        }
                    }
                }
            }
        };
    }

    /// Lane `l` of the result is the sum of the sixteen lanes of `v[l]`: four rounds of
    /// shuffles and adds, each halving the vectors (45 instructions for 16 sums, where one
    /// reduction per vector takes about 7 and a trip through memory). Written out without
    /// loops or indexing so that everything stays in registers.
    #[inline(always)]
    unsafe fn hsum16_512(v: [__m512; 16]) -> __m512 {
        // SAFETY: the caller guarantees AVX-512F; no memory is touched.
        unsafe {
            // Pairs: 128-bit chunk q holds [a0+a2, b0+b2, a1+a3, b1+b3] of that chunk.
            let pair = |a: __m512, b: __m512| _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
            // Quads: chunk q holds the chunk-q sums of four vectors in its four lanes.
            let quad =
                |c: __m512, d: __m512| _mm512_add_ps(_mm512_shuffle_ps::<0x44>(c, d), _mm512_shuffle_ps::<0xEE>(c, d));
            // Chunks: [e0+e1, e2+e3, f0+f1, f2+f3].
            let chunks = |e: __m512, f: __m512| {
                _mm512_add_ps(_mm512_shuffle_f32x4::<0x88>(e, f), _mm512_shuffle_f32x4::<0xDD>(e, f))
            };
            let [v0, v1, v2, v3, v4, v5, v6, v7, v8, v9, v10, v11, v12, v13, v14, v15] = v;
            let q0 = quad(pair(v0, v1), pair(v2, v3));
            let q1 = quad(pair(v4, v5), pair(v6, v7));
            let q2 = quad(pair(v8, v9), pair(v10, v11));
            let q3 = quad(pair(v12, v13), pair(v14, v15));
            chunks(chunks(q0, q1), chunks(q2, q3))
        }
    }

    /// Writes the lane sums of an `RM x RN` tile of accumulators (`RM * RN <= 32`, `RN <= 16`):
    /// `out[i * ldo + j] = sum of acc[i][j]`.
    #[inline(always)]
    unsafe fn store_512<const RM: usize, const RN: usize>(acc: &[[__m512; RN]; RM], out: *mut f32, ldo: usize) {
        const { assert!(RM * RN <= 32 && RN <= 16) };
        // SAFETY: the caller guarantees AVX-512F and that `out` is valid for RM rows of RN
        // floats at stride `ldo`; each masked store writes RN floats of one row.
        unsafe {
            // Accumulator f of the row-major tile, zero past its end (constant after inlining).
            let g = |f: usize| if f < RM * RN { acc[f / RN][f % RN] } else { _mm512_setzero_ps() };
            let lo = hsum16_512([
                g(0),
                g(1),
                g(2),
                g(3),
                g(4),
                g(5),
                g(6),
                g(7),
                g(8),
                g(9),
                g(10),
                g(11),
                g(12),
                g(13),
                g(14),
                g(15),
            ]);
            let hi = if RM * RN > 16 {
                hsum16_512([
                    g(16),
                    g(17),
                    g(18),
                    g(19),
                    g(20),
                    g(21),
                    g(22),
                    g(23),
                    g(24),
                    g(25),
                    g(26),
                    g(27),
                    g(28),
                    g(29),
                    g(30),
                    g(31),
                ])
            } else {
                lo
            };
            let mask: __mmask16 = ((1u32 << RN) - 1) as __mmask16;
            let lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
            for i in 0..RM {
                // Lanes i*RN .. i*RN+RN of (lo, hi): indices 0..15 pick lo, 16..31 hi.
                let idx = _mm512_and_si512(
                    _mm512_add_epi32(_mm512_set1_epi32((i * RN) as i32), lanes),
                    _mm512_set1_epi32(31),
                );
                _mm512_mask_storeu_ps(out.add(i * ldo), mask, _mm512_permutex2var_ps(lo, idx, hi));
            }
        }
    }

    #[inline(always)]
    unsafe fn f16_512(p: *const u8) -> __m512 {
        // SAFETY: the caller guarantees 32 readable bytes at `p`.
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())) }
    }

    #[inline(always)]
    unsafe fn bf16_512(p: *const u8) -> __m512 {
        // SAFETY: the caller guarantees 32 readable bytes at `p`.
        unsafe { _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p.cast())), 16)) }
    }

    /// Lane `l` of the result is the sum of the eight lanes of `v[l]` (three rounds of
    /// shuffles and adds, as [`hsum16_512`]).
    #[inline(always)]
    unsafe fn hsum8_256(v: [__m256; 8]) -> __m256 {
        // SAFETY: the caller guarantees AVX; no memory is touched.
        unsafe {
            let pair = |a: __m256, b: __m256| _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
            let quad =
                |c: __m256, d: __m256| _mm256_add_ps(_mm256_shuffle_ps::<0x44>(c, d), _mm256_shuffle_ps::<0xEE>(c, d));
            let [v0, v1, v2, v3, v4, v5, v6, v7] = v;
            let (e, f) = (quad(pair(v0, v1), pair(v2, v3)), quad(pair(v4, v5), pair(v6, v7)));
            _mm256_add_ps(_mm256_permute2f128_ps::<0x20>(e, f), _mm256_permute2f128_ps::<0x31>(e, f))
        }
    }

    /// Writes the lane sums of an `RM x RN` tile of accumulators (`RM * RN <= 16`):
    /// `out[i * ldo + j] = sum of acc[i][j]`.
    #[inline(always)]
    unsafe fn store_256<const RM: usize, const RN: usize>(acc: &[[__m256; RN]; RM], out: *mut f32, ldo: usize) {
        const { assert!(RM * RN <= 16) };
        // SAFETY: the caller guarantees AVX and that `out` is valid for RM rows of RN floats at
        // stride `ldo`; the sums go through a local buffer.
        unsafe {
            let g = |f: usize| if f < RM * RN { acc[f / RN][f % RN] } else { _mm256_setzero_ps() };
            let mut sums = [0.0f32; 16];
            _mm256_storeu_ps(sums.as_mut_ptr(), hsum8_256([g(0), g(1), g(2), g(3), g(4), g(5), g(6), g(7)]));
            if RM * RN > 8 {
                let hi = hsum8_256([g(8), g(9), g(10), g(11), g(12), g(13), g(14), g(15)]);
                _mm256_storeu_ps(sums.as_mut_ptr().add(8), hi);
            }
            for i in 0..RM {
                for j in 0..RN {
                    *out.add(i * ldo + j) = sums[i * RN + j];
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn f16_256(p: *const u8) -> __m256 {
        // SAFETY: the caller guarantees 16 readable bytes at `p`.
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p.cast())) }
    }

    #[inline(always)]
    unsafe fn bf16_256(p: *const u8) -> __m256 {
        // SAFETY: the caller guarantees 16 readable bytes at `p`.
        unsafe { _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast())), 16)) }
    }

    /// A 4 x 4 tile of bf16 dot products: `out[i * ldo + j] = sum_k x[i][k] w[j][k]`.
    ///
    /// # Safety
    /// The CPU has AVX-512F and AVX-512 BF16; `x` holds 4 rows and `w` 4 rows of `k`
    /// bf16 values (`k % 32 == 0`); `out` is valid for 4 rows of 4 floats at stride `ldo`.
    #[target_feature(enable = "avx512f,avx512bf16")]
    // The body is unrolled by row and column index; `0 * k` and `1 * k` keep it regular.
    #[allow(clippy::erasing_op, clippy::identity_op)]
    pub unsafe fn tile_bf16(x: &[u16], w: &[u16], k: usize, out: *mut f32, ldo: usize) {
        debug_assert!(x.len() >= 4 * k && w.len() >= 4 * k && k.is_multiple_of(32));
        let (xp, wp) = (x.as_ptr(), w.as_ptr());
        // Sixteen named accumulators: LLVM keeps `vdpbf16ps` destinations in zmm0..zmm15, so
        // a bigger tile (or an array of accumulators) is spilled to the stack.
        let mut c00 = _mm512_setzero_ps();
        let mut c01 = _mm512_setzero_ps();
        let mut c02 = _mm512_setzero_ps();
        let mut c03 = _mm512_setzero_ps();
        let mut c10 = _mm512_setzero_ps();
        let mut c11 = _mm512_setzero_ps();
        let mut c12 = _mm512_setzero_ps();
        let mut c13 = _mm512_setzero_ps();
        let mut c20 = _mm512_setzero_ps();
        let mut c21 = _mm512_setzero_ps();
        let mut c22 = _mm512_setzero_ps();
        let mut c23 = _mm512_setzero_ps();
        let mut c30 = _mm512_setzero_ps();
        let mut c31 = _mm512_setzero_ps();
        let mut c32 = _mm512_setzero_ps();
        let mut c33 = _mm512_setzero_ps();
        for p in (0..k).step_by(32) {
            // SAFETY: p + 32 <= k values of each row.
            unsafe {
                let ld = |q: *const u16| -> __m512bh { std::mem::transmute(_mm512_loadu_ps(q.cast::<f32>())) };
                let a0 = ld(xp.add(0 * k + p));
                let a1 = ld(xp.add(1 * k + p));
                let a2 = ld(xp.add(2 * k + p));
                let a3 = ld(xp.add(3 * k + p));
                let b = ld(wp.add(0 * k + p));
                c00 = _mm512_dpbf16_ps(c00, a0, b);
                c10 = _mm512_dpbf16_ps(c10, a1, b);
                c20 = _mm512_dpbf16_ps(c20, a2, b);
                c30 = _mm512_dpbf16_ps(c30, a3, b);
                let b = ld(wp.add(1 * k + p));
                c01 = _mm512_dpbf16_ps(c01, a0, b);
                c11 = _mm512_dpbf16_ps(c11, a1, b);
                c21 = _mm512_dpbf16_ps(c21, a2, b);
                c31 = _mm512_dpbf16_ps(c31, a3, b);
                let b = ld(wp.add(2 * k + p));
                c02 = _mm512_dpbf16_ps(c02, a0, b);
                c12 = _mm512_dpbf16_ps(c12, a1, b);
                c22 = _mm512_dpbf16_ps(c22, a2, b);
                c32 = _mm512_dpbf16_ps(c32, a3, b);
                let b = ld(wp.add(3 * k + p));
                c03 = _mm512_dpbf16_ps(c03, a0, b);
                c13 = _mm512_dpbf16_ps(c13, a1, b);
                c23 = _mm512_dpbf16_ps(c23, a2, b);
                c33 = _mm512_dpbf16_ps(c33, a3, b);
            }
        }
        let tile = [[c00, c01, c02, c03], [c10, c11, c12, c13], [c20, c21, c22, c23], [c30, c31, c32, c33]];
        // SAFETY: AVX-512F is enabled here; `out` is valid for the 4 x 4 tile (the contract).
        unsafe { store_512::<4, 4>(&tile, out, ldo) };
    }

    tile_kernel!(
        tile_avx512, "avx512f,avx2,fma,f16c", lanes: 16,
        vec: __m512, zero: _mm512_setzero_ps, loadu: _mm512_loadu_ps, fma: _mm512_fmadd_ps,
        store: store_512, f16: f16_512, bf16: bf16_512
    );

    tile_kernel!(
        tile_avx2, "avx2,fma,f16c", lanes: 8,
        vec: __m256, zero: _mm256_setzero_ps, loadu: _mm256_loadu_ps, fma: _mm256_fmadd_ps,
        store: store_256, f16: f16_256, bf16: bf16_256
    );

    /// The tile of `rm` (`$rm` or 1) activation rows by `rn` (1..=6) weight rows among the
    /// instances of `$tile`.
    macro_rules! pick_tile {
        ($tile:ident, $rm:literal, $rm_in:expr, $rn_in:expr) => {{
            let full = $rm_in == $rm;
            match (full, $rn_in) {
                (true, 6) => $tile::<$rm, 6>,
                (true, 5) => $tile::<$rm, 5>,
                (true, 4) => $tile::<$rm, 4>,
                (true, 3) => $tile::<$rm, 3>,
                (true, 2) => $tile::<$rm, 2>,
                (true, _) => $tile::<$rm, 1>,
                (false, 6) => $tile::<1, 6>,
                (false, 5) => $tile::<1, 5>,
                (false, 4) => $tile::<1, 4>,
                (false, 3) => $tile::<1, 3>,
                (false, 2) => $tile::<1, 2>,
                (false, _) => $tile::<1, 1>,
            }
        }};
    }

    /// The AVX-512 tile of `rm` (4 or 1) activation rows by `rn` (1..=6) weight rows.
    pub fn pick_avx512(rm: usize, rn: usize) -> super::Tile {
        pick_tile!(tile_avx512, 4, rm, rn)
    }

    /// The AVX2 tile of `rm` (2 or 1) activation rows by `rn` (1..=6) weight rows.
    pub fn pick_avx2(rm: usize, rn: usize) -> super::Tile {
        pick_tile!(tile_avx2, 2, rm, rn)
    }
}

/// The bf16 tile without bf16 instructions: the same values widened to f32 (exact) and
/// multiplied in f32, eight partial sums per dot product (LLVM vectorizes the inner loop).
///
/// # Safety
/// `x` holds `RM` rows and `w` `RN` rows of `k` values; `out` is valid for `RM` rows of `RN`
/// floats at stride `ldo`.
unsafe fn tile_bf16_portable<const RM: usize, const RN: usize>(
    x: &[u16],
    w: &[u16],
    k: usize,
    out: *mut f32,
    ldo: usize,
) {
    let f = |b: u16| f32::from_bits((b as u32) << 16);
    for i in 0..RM {
        for j in 0..RN {
            let (xr, wr) = (&x[i * k..(i + 1) * k], &w[j * k..(j + 1) * k]);
            let mut acc = [0.0f32; 8];
            for (xc, wc) in xr.chunks_exact(8).zip(wr.chunks_exact(8)) {
                for l in 0..8 {
                    acc[l] += f(xc[l]) * f(wc[l]);
                }
            }
            // SAFETY: (i, j) is inside the tile the caller guarantees.
            unsafe { *out.add(i * ldo + j) = acc.iter().sum() };
        }
    }
}

/// Whether [`gemm_rows_bf16`] runs on AVX-512 BF16 dot products here.
pub fn has_bf16_dot() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static BF16: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *BF16.get_or_init(|| {
            simd::level() == Level::Avx512
                && std::env::var_os("FUCINA_NO_BF16").is_none()
                && std::arch::is_x86_feature_detected!("avx512bf16")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Weight rows per block of [`gemm_rows_bf16`]: decoded together, then met by every tile of
/// activation rows while they sit in L2.
const JBLOCK: usize = 48;

// JBLOCK is a whole number of bf16 tiles.
const _: () = assert!(JBLOCK.is_multiple_of(4));

/// `y [m, n] = x [m, k] * w^T` in bf16 products with f32 accumulation: `x` is given as bf16
/// bits (`m` rows of `k`), weight row `j` is produced as bf16 bits by `decode(j, out)`, once
/// per call; `k` must be a multiple of 32. With AVX-512 BF16 ([`has_bf16_dot`]) the tiles run
/// on `vdpbf16ps` (twice the f32 FMA rate); elsewhere a portable tile widens the same bf16
/// values to f32, so the result is the same up to summation order.
#[allow(clippy::too_many_arguments)]
pub fn gemm_rows_bf16(
    m: usize,
    n: usize,
    k: usize,
    x: &[u16],
    decode: &(dyn Fn(usize, &mut [u16]) + Sync),
    y: &mut [f32],
    parallel: bool,
) {
    assert!(k.is_multiple_of(32), "gemm_rows_bf16: k % 32 == 0");
    let fast = has_bf16_dot();
    assert!(x.len() >= m * k && y.len() >= m * n, "gemm_rows_bf16: sizes");
    if m == 0 || n == 0 {
        return;
    }
    const RM: usize = 4;
    const RN: usize = 4;
    let out = OutPtr(y.as_mut_ptr());
    // Activation rows padded with zero rows to whole tiles.
    let m_pad = m.div_ceil(RM) * RM;
    let mut xp = vec![0u16; m_pad * k];
    xp[..m * k].copy_from_slice(&x[..m * k]);
    let xp = &xp;
    let task = |j0: usize, j1: usize| {
        let o = out;
        let mut wbuf = vec![0u16; JBLOCK * k];
        let mut tmp = [0.0f32; RM * RN];
        let mut jb = j0;
        while jb < j1 {
            let rows = JBLOCK.min(j1 - jb);
            let tiles = rows.div_ceil(RN);
            for r in 0..tiles * RN {
                let dst = &mut wbuf[r * k..(r + 1) * k];
                if r < rows {
                    decode(jb + r, dst);
                } else {
                    dst.fill(0);
                }
            }
            for i0 in (0..m_pad).step_by(IBLOCK) {
                let i1 = (i0 + IBLOCK).min(m_pad);
                for t in 0..tiles {
                    let (j, cols) = (jb + t * RN, RN.min(rows - t * RN));
                    let w = &wbuf[t * RN * k..(t + 1) * RN * k];
                    for i in (i0..i1).step_by(RM) {
                        let full = cols == RN && i + RM <= m;
                        let xs = &xp[i * k..(i + RM) * k];
                        // SAFETY: x holds rows i..i+RM (padded), w holds RN rows of k; the tile
                        // goes to `tmp` (RM x RN, stride RN) or straight to y's rows i..i+RM and
                        // this task's columns j..j+RN; the AVX-512 tile runs only when
                        // has_bf16_dot() said the CPU has it.
                        unsafe {
                            let (dst, ld) = if full { (o.0.add(i * n + j), n) } else { (tmp.as_mut_ptr(), RN) };
                            #[cfg(target_arch = "x86_64")]
                            if fast {
                                x86::tile_bf16(xs, w, k, dst, ld);
                            } else {
                                tile_bf16_portable::<RM, RN>(xs, w, k, dst, ld);
                            }
                            #[cfg(not(target_arch = "x86_64"))]
                            tile_bf16_portable::<RM, RN>(xs, w, k, dst, ld);
                            if !full {
                                for ii in 0..RM.min(m - i.min(m)) {
                                    for jj in 0..cols {
                                        *o.0.add((i + ii) * n + j + jj) = tmp[ii * RN + jj];
                                    }
                                }
                            }
                        }
                    }
                }
            }
            jb += rows;
        }
    };
    if parallel {
        let threads = rayon::current_num_threads().max(1);
        let per = n.div_ceil(4 * threads).div_ceil(RN).max(1) * RN;
        super::team::for_each(n.div_ceil(per), |c| task(c * per, ((c + 1) * per).min(n)));
    } else {
        task(0, n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every value of `fmt` bytes for `vals`, little-endian.
    fn encode(fmt: FloatRow, vals: &[f32]) -> Vec<u8> {
        vals.iter()
            .flat_map(|&v| match fmt {
                FloatRow::F32 => v.to_le_bytes().to_vec(),
                FloatRow::F16 => half::f16::from_f32(v).to_le_bytes().to_vec(),
                FloatRow::BF16 => half::bf16::from_f32(v).to_le_bytes().to_vec(),
            })
            .collect()
    }

    #[test]
    fn tiles_edges_and_tails_equal_the_exact_products() {
        // Shapes around the tile sizes (4x6 and 2x6), with k below, at and past whole vectors
        // and whole 64-byte lines of weights (k = 40 and 56: unrolled lines, then single
        // steps), so that the register tiles, their lane sums, the narrower tiles of the edges
        // and the k tails all run; the weights are the stored values, so only f32 rounding
        // remains.
        for fmt in [FloatRow::F32, FloatRow::F16, FloatRow::BF16] {
            for &(m, n, k) in &[
                (1, 7, 16),
                (2, 6, 8),
                (4, 6, 16),
                (5, 13, 33),
                (3, 7, 40),
                (6, 14, 56),
                (9, 25, 100),
                (17, 50, 64),
                (20, 12, 1031),
            ] {
                let x: Vec<f32> = (0..m * k).map(|t| ((t * 7 + 3) % 23) as f32 / 11.0 - 1.0).collect();
                let wv: Vec<f32> = (0..n * k).map(|t| ((t * 5 + 1) % 19) as f32 / 9.0 - 1.0).collect();
                let w = encode(fmt, &wv);
                for parallel in [false, true] {
                    let mut y = vec![f32::NAN; m * n];
                    gemm_rows(m, n, k, &x, &w, fmt, &mut y, parallel);
                    for i in 0..m {
                        for j in 0..n {
                            let (exact, mag) = (0..k).fold((0.0f64, 0.0f64), |(s, a), q| {
                                let p = x[i * k + q] as f64 * fmt.get(&w[j * k * fmt.width()..], q) as f64;
                                (s + p, a + p.abs())
                            });
                            let got = y[i * n + j] as f64;
                            assert!(
                                (got - exact).abs() <= 1e-6 * mag + 1e-6,
                                "{fmt:?} {m}x{n}x{k} ({i}, {j}): {got} vs {exact}"
                            );
                        }
                    }
                }
            }
        }
    }
}
