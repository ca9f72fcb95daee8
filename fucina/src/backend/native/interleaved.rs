//! Products with weights in the sixteen-row interleaved layouts
//! ([`crate::backend::interleave`]): one 64-byte load holds four bytes of each of sixteen
//! rows, so one `vpdpbusd` with the four matching activation bytes broadcast adds sixteen
//! rows' partial dot products. For Q4_K the scales, minimums and f16 factors of sixteen rows
//! are unpacked together, once per super-block; Q6_K's levels stay unsigned (0..64) and their
//! offset of 32 comes back out through the activation's group sums; for Q8_0 the signed weights are offset by 128
//! (one `vpxord`) and the offset comes back out through the activation block's sum. Up to four
//! activation rows share each weight load.
//!
//! The integer sums per block equal the scalar spec's exactly (Q8_K or Q8_0 activations);
//! in the AVX-512 kernels only the f32 accumulation across blocks rounds differently.
//!
//! Where AVX2 runs without those (Zen 3, say), Q8_0 and Q4_K have AVX2 kernels of their
//! own: a 32-byte half of each 64-byte line holds four bytes of eight rows, and one
//! `maddubs` with the broadcast activation bytes adds eight rows' partial sums (Q8_0: `|w|`
//! times the activation with `w`'s sign, then `madd` to i32; Q4_K: the unsigned nibbles,
//! summed in i16 over a sub-block, then one `madd` with each row's scale). After a block
//! every lane holds one row's whole block sum. The row kernels on the file's rows must
//! reduce each block's lanes to one sum instead (21 of the Q8_0 2 x 4 tile's ~60
//! instructions per block). The f32 steps are the spec's (Q8_0: `(d_w * d_a) * s`; Q4_K:
//! `super_block_term`), added in block order: the spec's bits. Q6_K keeps the file's rows
//! on AVX2 (an interleaved AVX2 kernel lost to the K-quant tile GEMM from 16 rows and to
//! the row kernel on large decode products; docs/BENCHMARK.md).

use super::super::interleave::{
    gather_row, Interleaved, X16, X16_BLOCK, X16_Q6_BLOCK, X16_Q6_QS, X16_Q6_SCALES, X16_Q8_BLOCK, X16_Q8_SECOND,
    X16_QS, X16_SCALES,
};
use super::super::qdot::{self, Q8_0_BYTES};
use super::super::qdot_k::{self, Q8_K_BYTES};
use super::super::weights::{activation_row_bytes, WeightJob, WeightMat};
use super::simd::{has_avx2_int, has_avx512_int};
use super::weights::quantize_activations_rows;

/// Whether this CPU runs `f`'s interleaved products on an AVX2 kernel of their own (Q8_0 and
/// Q4_K, where [`has_avx2_int`] holds): [`crate::backend::weights::layout_for`] repacks
/// those layouts where AVX-512 VNNI is absent, and the products run them.
pub fn has_avx2_kernel(f: Interleaved) -> bool {
    matches!(f, Interleaved::Q8_0 | Interleaved::Q4K) && has_avx2_int()
}

/// `y [m, n] = x [m, k] W^T` for an interleaved weight (`w.format.interleaved()` is some):
/// groups of sixteen weight rows split over the pool.
pub fn matmul(w: &WeightMat<'_>, x: &[f32], m: usize, y: &mut [f32], parallel: bool) {
    let Some(f) = w.format.interleaved() else {
        panic!("interleaved::matmul: {:?} is not an interleaved layout", w.format)
    };
    let prep = Prepared::new(f, w, x, m);
    let acts = prep.acts();
    let groups = w.rows / X16;
    let out = Out(y.as_mut_ptr());
    let sizes = if parallel { super::task_sizes(groups, m, rayon::current_num_threads()) } else { vec![groups] };
    let starts: Vec<usize> = sizes.iter().scan(0, |at, &n| Some(std::mem::replace(at, *at + n))).collect();
    let task = |t: usize| {
        let g0 = starts[t];
        fill_groups(f, w, &acts, m, g0, (g0 + sizes[t]).min(groups), &out);
    };
    if parallel {
        super::team::for_each(sizes.len(), task);
    } else {
        (0..sizes.len()).for_each(task);
    }
}

/// Several products of interleaved weights (every `jobs[i].w.format.interleaved()` is some)
/// as one parallel region: the sixteen-row groups of all the weights, in a row, split into
/// tasks of about equal work. Jobs that read the same activations (the same slice) in the same
/// quantized form share one quantization. Each output column is computed by one task exactly
/// as [`matmul`] computes it.
pub fn matmul_group(jobs: &mut [WeightJob<'_>]) {
    let mut preps: Vec<(Interleaved, *const f32, usize, usize, Prepared)> = Vec::new();
    let mut which = Vec::with_capacity(jobs.len());
    let mut layouts = Vec::with_capacity(jobs.len());
    for j in jobs.iter() {
        let Some(f) = j.w.format.interleaved() else {
            panic!("interleaved::matmul_group: {:?} is not an interleaved layout", j.w.format)
        };
        layouts.push(f);
        let key = (j.x.as_ptr(), j.x.len(), j.m);
        let same = |p: &(Interleaved, *const f32, usize, usize, Prepared)| {
            (p.1, p.2, p.3) == key && (p.0 == Interleaved::Q8_0) == (f == Interleaved::Q8_0)
        };
        match preps.iter().position(same) {
            Some(i) => which.push(i),
            None => {
                which.push(preps.len());
                preps.push((f, key.0, key.1, key.2, Prepared::new(f, &j.w, j.x, j.m)));
            }
        }
    }
    let acts: Vec<Acts<'_>> = preps.iter().map(|p| p.4.acts()).collect();
    // The groups of all the jobs in a row, cut into tasks of about equal work (bytes of
    // weights times activation rows), a task's range crossing from one job into the next.
    let m_max = jobs.iter().map(|j| j.m).max().unwrap_or(1);
    let cost = |j: &WeightJob<'_>| (j.w.data.len() / (j.w.rows / X16).max(1)).max(1) * j.m.max(1);
    let total: usize = jobs.iter().map(|j| cost(j) * (j.w.rows / X16)).sum();
    let sizes = super::task_sizes(total, m_max, rayon::current_num_threads());
    let share = |t: usize| sizes.get(t).copied().unwrap_or(1).max(1);
    let mut tasks: Vec<Vec<(usize, usize, usize)>> = vec![Vec::new()];
    let mut filled = 0;
    for (i, j) in jobs.iter().enumerate() {
        let (groups, c) = (j.w.rows / X16, cost(j));
        let mut g = 0;
        while g < groups {
            let want = share(tasks.len() - 1);
            let take = want.saturating_sub(filled).div_ceil(c).clamp(1, groups - g);
            if let Some(t) = tasks.last_mut() {
                t.push((i, g, g + take));
            }
            g += take;
            filled += take * c;
            if filled >= want {
                tasks.push(Vec::new());
                filled = 0;
            }
        }
    }
    tasks.retain(|t| !t.is_empty());
    let mats: Vec<(Interleaved, WeightMat<'_>, usize)> =
        jobs.iter().zip(&layouts).map(|(j, &f)| (f, j.w, j.m)).collect();
    let outs: Vec<Out> = jobs.iter_mut().map(|j| Out(j.y.as_mut_ptr())).collect();
    super::team::for_each(tasks.len(), |t| {
        for &(i, g0, g1) in &tasks[t] {
            let (f, w, m) = &mats[i];
            fill_groups(*f, w, &acts[which[i]], *m, g0, g1, &outs[i]);
        }
    });
}

/// The quantized activation rows of one product (Q8_K for the K-quants, Q8_0 for Q8_0) with,
/// for Q8_0, each block's scale and, for the AVX-512 kernel, the sum of its int8 (the
/// weights' offset of 128 times that sum comes back out of the integer dot; the AVX2 kernel
/// has no offset).
struct Prepared {
    qa: Vec<u8>,
    a_row: usize,
    ad: Vec<f32>,
    asum: Vec<i32>,
    nb: usize,
    nb32: usize,
}

impl Prepared {
    fn new(f: Interleaved, w: &WeightMat<'_>, x: &[f32], m: usize) -> Prepared {
        let (format, k) = (w.format, w.cols);
        let a_row = activation_row_bytes(format, k);
        let mut qa = vec![0u8; m * a_row];
        quantize_activations_rows(format, x, k, m, &mut qa);
        let (mut ad, mut asum) = (Vec::new(), Vec::new());
        if f == Interleaved::Q8_0 {
            let sums = has_avx512_int();
            for blk in qa.chunks_exact(Q8_0_BYTES) {
                ad.push(half::f16::from_le_bytes([blk[0], blk[1]]).to_f32());
                if sums {
                    asum.push(blk[2..].iter().map(|q| *q as i8 as i32).sum::<i32>());
                }
            }
        }
        Prepared { qa, a_row, ad, asum, nb: k / f.block(), nb32: k / 32 }
    }

    fn acts(&self) -> Acts<'_> {
        Acts { qa: &self.qa, a_row: self.a_row, ad: &self.ad, asum: &self.asum, nb: self.nb, nb32: self.nb32 }
    }
}

/// From this many activation rows on, interleaved Q6_K unpacks each super-block once per call
/// into an L1 tile instead of once per four activation rows.
const Q6K_TILE_BATCH: usize = 8;

/// The quantized activation rows of one product.
struct Acts<'a> {
    qa: &'a [u8],
    a_row: usize,
    /// Q8_0: each block's scale, `[m, nb32]`.
    ad: &'a [f32],
    /// Q8_0 where the AVX-512 kernel runs: each block's sum of int8, `[m, nb32]`.
    asum: &'a [i32],
    /// Blocks of the layout per row.
    nb: usize,
    /// Q8_0 blocks (32 values) per row.
    nb32: usize,
}

impl Acts<'_> {
    fn row(&self, i: usize) -> &[u8] {
        &self.qa[i * self.a_row..(i + 1) * self.a_row]
    }

    /// Rows `i..i + R`.
    fn rows<const R: usize>(&self, i: usize) -> [&[u8]; R] {
        std::array::from_fn(|d| self.row(i + d))
    }

    /// Block `b` (Q8_K) of rows `i..i + R`.
    fn blocks<const R: usize>(&self, i: usize, b: usize) -> [&[u8]; R] {
        std::array::from_fn(|d| &self.row(i + d)[b * Q8_K_BYTES..(b + 1) * Q8_K_BYTES])
    }

    /// Q8_0: the block scales of rows `i..i + R`.
    #[cfg(target_arch = "x86_64")]
    fn scales<const R: usize>(&self, i: usize) -> [&[f32]; R] {
        let nb = self.nb32;
        std::array::from_fn(|d| &self.ad[(i + d) * nb..(i + d + 1) * nb])
    }

    /// Q8_0 where the AVX-512 kernel runs: the block scales and sums of rows `i..i + R`.
    fn q8<const R: usize>(&self, i: usize) -> [(&[f32], &[i32]); R] {
        let nb = self.nb32;
        std::array::from_fn(|d| (&self.ad[(i + d) * nb..(i + d + 1) * nb], &self.asum[(i + d) * nb..(i + d + 1) * nb]))
    }
}

/// The output `[m, n]`, written by ranges of sixteen-row groups from several tasks.
struct Out(*mut f32);

// SAFETY: `matmul` and `matmul_group` hand each task a disjoint range of groups (of one
// job's output), and a task writes only the columns of its groups.
unsafe impl Sync for Out {}

/// One group's interleaved blocks times activation rows `i..i + r` into `res[..r]`.
#[cfg(target_arch = "x86_64")]
type GroupKernel<'a> = dyn Fn(&[u8], usize, usize, &mut [[f32; X16]; 4]) + 'a;

/// Fills the columns of groups `g0..g1` for every activation row.
fn fill_groups(f: Interleaved, w: &WeightMat<'_>, acts: &Acts<'_>, m: usize, g0: usize, g1: usize, out: &Out) {
    let n = w.rows;
    let gb = acts.nb * X16 * f.block_bytes();
    let set = |i: usize, g: usize, v: &[f32; X16]| {
        for (r, x) in v.iter().enumerate() {
            // SAFETY: i < m and g * 16 + r < n; the group lies in this task's range.
            unsafe { *out.0.add(i * n + g * X16 + r) = *x };
        }
    };
    #[cfg(target_arch = "x86_64")]
    if has_avx512_int() && f == Interleaved::Q6K && m >= Q6K_TILE_BATCH {
        // Each super-block's levels unpacked once into an L1 tile for all activation rows
        // (the same sums in the same order as the direct kernel: the same bits).
        let mut acc = vec![[0.0f32; X16]; m];
        let mut tile = [0u8; avx512::Q6K_TILE];
        for g in g0..g1 {
            acc.iter_mut().for_each(|a| *a = [0.0; X16]);
            for b in 0..acts.nb {
                let blk = &w.data[g * gb + b * X16_Q6_BLOCK..g * gb + (b + 1) * X16_Q6_BLOCK];
                // SAFETY: has_avx512_int reports the features the kernels enable; `blk` is one
                // whole interleaved super-block and each activation block the matching Q8_K block.
                unsafe { avx512::unpack_q6k(blk, &mut tile) };
                for (c, rows) in acc.chunks_mut(4).enumerate() {
                    let i = 4 * c;
                    // SAFETY: as above; `rows` holds as many rows as activation rows passed.
                    unsafe {
                        match rows.len() {
                            4 => avx512::dot_q6k_tile::<4>(blk, &tile, acts.blocks(i, b), rows),
                            3 => avx512::dot_q6k_tile::<3>(blk, &tile, acts.blocks(i, b), rows),
                            2 => avx512::dot_q6k_tile::<2>(blk, &tile, acts.blocks(i, b), rows),
                            _ => avx512::dot_q6k_tile::<1>(blk, &tile, acts.blocks(i, b), rows),
                        }
                    }
                }
            }
            for (i, v) in acc.iter().enumerate() {
                set(i, g, v);
            }
        }
        return;
    }
    // Group by group, up to four activation rows per call of `kernel(blocks, i, r, res)`
    // (rows i..i + r into res[..r]).
    #[cfg(target_arch = "x86_64")]
    let by_four = |kernel: &GroupKernel<'_>| {
        for g in g0..g1 {
            let blocks = &w.data[g * gb..(g + 1) * gb];
            let mut i = 0;
            while i < m {
                let r = (m - i).min(4);
                let mut res = [[0.0f32; X16]; 4];
                kernel(blocks, i, r, &mut res);
                for (d, v) in res.iter().take(r).enumerate() {
                    set(i + d, g, v);
                }
                i += r;
            }
        }
    };
    #[cfg(target_arch = "x86_64")]
    if has_avx512_int() {
        by_four(&|blocks, i, r, res| {
            // SAFETY: has_avx512_int reports the features the kernels enable; `blocks` holds
            // whole interleaved blocks and each activation row the matching Q8_K or Q8_0
            // blocks (with their scales and sums for Q8_0).
            unsafe {
                match (f, r) {
                    (Interleaved::Q4K, 4) => avx512::dot_q4k::<4>(blocks, acts.rows(i), res),
                    (Interleaved::Q4K, 3) => avx512::dot_q4k::<3>(blocks, acts.rows(i), res),
                    (Interleaved::Q4K, 2) => avx512::dot_q4k::<2>(blocks, acts.rows(i), res),
                    (Interleaved::Q4K, _) => avx512::dot_q4k::<1>(blocks, acts.rows(i), res),
                    (Interleaved::Q6K, 4) => avx512::dot_q6k::<4>(blocks, acts.rows(i), res),
                    (Interleaved::Q6K, 3) => avx512::dot_q6k::<3>(blocks, acts.rows(i), res),
                    (Interleaved::Q6K, 2) => avx512::dot_q6k::<2>(blocks, acts.rows(i), res),
                    (Interleaved::Q6K, _) => avx512::dot_q6k::<1>(blocks, acts.rows(i), res),
                    (Interleaved::Q8_0, 4) => avx512::dot_q8_0::<4>(blocks, acts.rows(i), acts.q8(i), res),
                    (Interleaved::Q8_0, 3) => avx512::dot_q8_0::<3>(blocks, acts.rows(i), acts.q8(i), res),
                    (Interleaved::Q8_0, 2) => avx512::dot_q8_0::<2>(blocks, acts.rows(i), acts.q8(i), res),
                    (Interleaved::Q8_0, _) => avx512::dot_q8_0::<1>(blocks, acts.rows(i), acts.q8(i), res),
                }
            }
        });
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if has_avx2_kernel(f) {
        by_four(&|blocks, i, r, res| {
            // SAFETY: has_avx2_int reports the features the kernels enable; `blocks` holds
            // whole interleaved blocks and each activation row the matching Q8_K or Q8_0
            // blocks (for Q8_0 their scales as f32 in `acts.scales`).
            unsafe {
                match (f, r) {
                    (Interleaved::Q4K, 4) => avx2::dot_q4k::<4>(blocks, acts.rows(i), res),
                    (Interleaved::Q4K, 3) => avx2::dot_q4k::<3>(blocks, acts.rows(i), res),
                    (Interleaved::Q4K, 2) => avx2::dot_q4k::<2>(blocks, acts.rows(i), res),
                    (Interleaved::Q4K, _) => avx2::dot_q4k::<1>(blocks, acts.rows(i), res),
                    (Interleaved::Q8_0, 4) => avx2::dot_q8_0::<4>(blocks, acts.rows(i), acts.scales(i), res),
                    (Interleaved::Q8_0, 3) => avx2::dot_q8_0::<3>(blocks, acts.rows(i), acts.scales(i), res),
                    (Interleaved::Q8_0, 2) => avx2::dot_q8_0::<2>(blocks, acts.rows(i), acts.scales(i), res),
                    (Interleaved::Q8_0, _) => avx2::dot_q8_0::<1>(blocks, acts.rows(i), acts.scales(i), res),
                    (Interleaved::Q6K, _) => unreachable!("has_avx2_kernel excludes Q6_K"),
                }
            }
        });
        return;
    }
    // Elsewhere: each row gathered back to its plain bytes and dotted by this CPU's row kernel.
    let kern = match f {
        Interleaved::Q4K => qdot_k::row_kernel(qdot_k::KFormat::Q4K),
        Interleaved::Q6K => qdot_k::row_kernel(qdot_k::KFormat::Q6K),
        Interleaved::Q8_0 => qdot::row_kernel(false),
    };
    // The group's sixteen rows gathered once, then met by every activation row.
    let row_bytes = w.format.row_bytes(w.cols);
    let mut rows = vec![0u8; X16 * row_bytes];
    for g in g0..g1 {
        for (r, dst) in rows.chunks_exact_mut(row_bytes).enumerate() {
            gather_row(f, w.data, w.cols, g * X16 + r, dst);
        }
        let mut cols = [0.0f32; X16];
        for i in 0..m {
            for (c, row) in cols.iter_mut().zip(rows.chunks_exact(row_bytes)) {
                // SAFETY: the gathered row holds whole blocks of the plain format, the
                // activation row the matching Q8_K/Q8_0 blocks; the kernel was chosen for this CPU.
                *c = unsafe { kern(row, acts.row(i)) };
            }
            set(i, g, &cols);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::*;
    use crate::backend::x86::q8k_sub_block_sums;
    use std::arch::x86_64::*;

    /// Sixteen interleaved Q4_K rows (`blocks`, whole super-blocks) times `R` Q8_K rows,
    /// into `res[r][row]`.
    ///
    /// # Safety
    /// The CPU has AVX-512 F/BW/VL/VNNI, AVX2, FMA and F16C; `blocks` holds whole interleaved
    /// super-blocks and each `a[r]` the matching Q8_K blocks.
    // The per-activation-row register arrays are indexed from loops over two axes.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub unsafe fn dot_q4k<const R: usize>(blocks: &[u8], a: [&[u8]; R], res: &mut [[f32; X16]; 4]) {
        let m4 = _mm512_set1_epi8(0x0F);
        let m6 = _mm512_set1_epi8(63);
        let m30 = _mm512_set1_epi8(0x30);
        let mut acc = [_mm512_setzero_ps(); R];
        // Scales then minimums of the eight sub-blocks, sixteen rows each.
        let mut sm = [0u8; 256];
        for (b, blk) in blocks.chunks_exact(X16_BLOCK).enumerate() {
            let ab: [&[u8]; R] = std::array::from_fn(|r| &a[r][b * Q8_K_BYTES..(b + 1) * Q8_K_BYTES]);
            // SAFETY: (this block) the features are enabled; every load stays inside the
            // interleaved block (scales 64..256, nibbles 256 + 64 (8c + t) + 64 <= 2304) or the
            // activation block (4 + 64c + 32 + 4t + 4 <= 260, sums 260..292), or the arrays.
            unsafe {
                let p = blk.as_ptr();
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i));
                let dmin = _mm512_cvtph_ps(_mm256_loadu_si256(p.add(32) as *const __m256i));
                // Bytes 0..4, 4..8 and 8..12 of the sixteen rows' scale fields.
                let s0 = _mm512_loadu_si512(p.add(X16_SCALES) as *const __m512i);
                let s1 = _mm512_loadu_si512(p.add(X16_SCALES + 64) as *const __m512i);
                let s2 = _mm512_loadu_si512(p.add(X16_SCALES + 128) as *const __m512i);
                let sc_lo = _mm512_and_si512(s0, m6);
                let mn_lo = _mm512_and_si512(s1, m6);
                let sc_hi = _mm512_or_si512(_mm512_and_si512(s2, m4), _mm512_and_si512(_mm512_srli_epi16(s0, 2), m30));
                let mn_hi = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16(s2, 4), m4),
                    _mm512_and_si512(_mm512_srli_epi16(s1, 2), m30),
                );
                let q = sm.as_mut_ptr();
                _mm512_storeu_si512(q as *mut __m512i, sc_lo);
                _mm512_storeu_si512(q.add(64) as *mut __m512i, sc_hi);
                _mm512_storeu_si512(q.add(128) as *mut __m512i, mn_lo);
                _mm512_storeu_si512(q.add(192) as *mut __m512i, mn_hi);

                // Minimums: sum over sub-blocks s of min[row][s] * (activation sum of s),
                // two sub-blocks per vpdpwssd (i16 pairs per row).
                let mut msum = [_mm512_setzero_si512(); R];
                let mut pairs = [[0i32; 4]; R];
                for r in 0..R {
                    _mm_storeu_si128(pairs[r].as_mut_ptr() as *mut __m128i, q8k_sub_block_sums(ab[r]));
                }
                for pr in 0..4 {
                    let ms = _mm_loadu_si128(q.add(128 + 32 * pr) as *const __m128i);
                    let ms1 = _mm_loadu_si128(q.add(128 + 32 * pr + 16) as *const __m128i);
                    let lo = _mm_unpacklo_epi8(ms, ms1);
                    let hi = _mm_unpackhi_epi8(ms, ms1);
                    let mw = _mm512_cvtepu8_epi16(_mm256_set_m128i(hi, lo));
                    for r in 0..R {
                        msum[r] = _mm512_dpwssd_epi32(msum[r], mw, _mm512_set1_epi32(pairs[r][pr]));
                    }
                }

                let mut isum = [_mm512_setzero_si512(); R];
                for c in 0..4 {
                    let mut lo = [_mm512_setzero_si512(); R];
                    let mut hi = [_mm512_setzero_si512(); R];
                    for t in 0..8 {
                        let v = _mm512_loadu_si512(p.add(X16_QS + 64 * (8 * c + t)) as *const __m512i);
                        let l = _mm512_and_si512(v, m4);
                        let h = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
                        for r in 0..R {
                            let ap = ab[r].as_ptr().add(4 + 64 * c + 4 * t);
                            let a_lo = _mm512_set1_epi32((ap as *const i32).read_unaligned());
                            let a_hi = _mm512_set1_epi32((ap.add(32) as *const i32).read_unaligned());
                            lo[r] = _mm512_dpbusd_epi32(lo[r], l, a_lo);
                            hi[r] = _mm512_dpbusd_epi32(hi[r], h, a_hi);
                        }
                    }
                    let s_lo = _mm512_cvtepu8_epi32(_mm_loadu_si128(q.add(32 * c) as *const __m128i));
                    let s_hi = _mm512_cvtepu8_epi32(_mm_loadu_si128(q.add(32 * c + 16) as *const __m128i));
                    for r in 0..R {
                        let both = _mm512_add_epi32(_mm512_mullo_epi32(lo[r], s_lo), _mm512_mullo_epi32(hi[r], s_hi));
                        isum[r] = _mm512_add_epi32(isum[r], both);
                    }
                }
                for r in 0..R {
                    let da = _mm512_set1_ps(f32::from_le_bytes([ab[r][0], ab[r][1], ab[r][2], ab[r][3]]));
                    acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(isum[r]), acc[r]);
                    acc[r] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, da), _mm512_cvtepi32_ps(msum[r]), acc[r]);
                }
            }
        }
        for r in 0..R {
            // SAFETY: 64 bytes are written into a 16-float row.
            unsafe { _mm512_storeu_ps(res[r].as_mut_ptr(), acc[r]) };
        }
    }

    /// Sixteen interleaved Q8_0 rows (`blocks`, whole pairs of blocks) times `R` Q8_0 rows (with each
    /// block's scale and int8 sum in `q8[r]`), into `res[r][row]`.
    ///
    /// # Safety
    /// As for [`dot_q4k`], for interleaved Q8_0 blocks and Q8_0 activation rows.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub unsafe fn dot_q8_0<const R: usize>(
        blocks: &[u8],
        a: [&[u8]; R],
        q8: [(&[f32], &[i32]); R],
        res: &mut [[f32; X16]; 4],
    ) {
        let flip = _mm512_set1_epi8(-128);
        let mut acc = [_mm512_setzero_ps(); R];
        for (pair, blk) in blocks.chunks_exact(X16_Q8_BLOCK).enumerate() {
            for h in 0..2 {
                let b = 2 * pair + h;
                // SAFETY: (this block) the features are enabled; every load stays inside the
                // interleaved pair (32 h + 32 <= 64; 64 + 512 h + 64 t + 64 <= 1088) or the
                // activation block (2 + 4 t + 4 <= 34).
                unsafe {
                    let p = blk.as_ptr();
                    let d = _mm512_cvtph_ps(_mm256_loadu_si256(p.add(32 * h) as *const __m256i));
                    let qs = p.add(if h == 0 { 64 } else { X16_Q8_SECOND });
                    let mut s = [_mm512_setzero_si512(); R];
                    for t in 0..8 {
                        // The weights plus 128, as unsigned bytes.
                        let v = _mm512_xor_si512(_mm512_loadu_si512(qs.add(64 * t) as *const __m512i), flip);
                        for r in 0..R {
                            let ap = a[r].as_ptr().add(b * Q8_0_BYTES + 2 + 4 * t);
                            s[r] = _mm512_dpbusd_epi32(s[r], v, _mm512_set1_epi32((ap as *const i32).read_unaligned()));
                        }
                    }
                    for r in 0..R {
                        let (ad, asum) = q8[r];
                        let si = _mm512_sub_epi32(s[r], _mm512_set1_epi32(128 * asum[b]));
                        acc[r] =
                            _mm512_fmadd_ps(_mm512_mul_ps(d, _mm512_set1_ps(ad[b])), _mm512_cvtepi32_ps(si), acc[r]);
                    }
                }
            }
        }
        for r in 0..R {
            // SAFETY: 64 bytes are written into a 16-float row.
            unsafe { _mm512_storeu_ps(res[r].as_mut_ptr(), acc[r]) };
        }
    }

    /// Sixteen interleaved Q6_K rows (`blocks`, whole super-blocks) times `R` Q8_K rows, into
    /// `res[r][row]`.
    ///
    /// # Safety
    /// As for [`dot_q4k`], for interleaved Q6_K super-blocks.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub unsafe fn dot_q6k<const R: usize>(blocks: &[u8], a: [&[u8]; R], res: &mut [[f32; X16]; 4]) {
        let mut acc = [_mm512_setzero_ps(); R];
        for (b, blk) in blocks.chunks_exact(X16_Q6_BLOCK).enumerate() {
            let ab: [&[u8]; R] = std::array::from_fn(|r| &a[r][b * Q8_K_BYTES..(b + 1) * Q8_K_BYTES]);
            // SAFETY: (this block) the features are enabled; every load stays inside the
            // interleaved block (scales 32..288, bits 288 + 192 (8c + t) + 192 <= 3360) or the
            // activation block
            // (4 + 128c + 64h + 32p + 4t + 4 <= 260, sums 260..292).
            unsafe {
                let p = blk.as_ptr();
                let d = _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i));
                let isum = q6k_isum(p, ab, |c, h, t| q6k_levels(p, c, h, t));
                for r in 0..R {
                    let da = _mm512_set1_ps(f32::from_le_bytes([ab[r][0], ab[r][1], ab[r][2], ab[r][3]]));
                    acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(isum[r]), acc[r]);
                }
            }
        }
        for r in 0..R {
            // SAFETY: 64 bytes are written into a 16-float row.
            unsafe { _mm512_storeu_ps(res[r].as_mut_ptr(), acc[r]) };
        }
    }

    /// The integer sums of one interleaved Q6_K super-block (at `p`) with `R` Q8_K activation
    /// blocks, sixteen rows per vector: `sum_g scale_g (sum u a - 32 bsum_g)`, the levels `u`
    /// of step `(c, h, t)` given by `levels` (computed from the block or read from a tile).
    ///
    /// # Safety
    /// As for [`dot_q6k`]; `p` is a whole interleaved super-block, each `a[r]` a Q8_K block,
    /// and `levels` returns the block's levels.
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    unsafe fn q6k_isum<const R: usize>(
        p: *const u8,
        a: [&[u8]; R],
        levels: impl Fn(usize, usize, usize) -> (__m512i, __m512i),
    ) -> [__m512i; R] {
        // SAFETY: the loads stay in the super-block (scales 32..288) and the activation blocks
        // (4 + 128c + 64h + 32p + 4t + 4 <= 260, sums 260..292).
        unsafe {
            let scale =
                |g: usize| _mm512_cvtepi8_epi32(_mm_loadu_si128(p.add(X16_Q6_SCALES + 16 * g) as *const __m128i));
            // The offset's share: sum over groups g of scale[row][g] * bsum_g, two groups per
            // vpdpwssd (sign-extended i16 pairs per row).
            let mut bias = [_mm512_setzero_si512(); R];
            for pr in 0..8 {
                let g0 = _mm_loadu_si128(p.add(X16_Q6_SCALES + 32 * pr) as *const __m128i);
                let g1 = _mm_loadu_si128(p.add(X16_Q6_SCALES + 32 * pr + 16) as *const __m128i);
                let sw = _mm512_cvtepi8_epi16(_mm256_set_m128i(_mm_unpackhi_epi8(g0, g1), _mm_unpacklo_epi8(g0, g1)));
                for r in 0..R {
                    let bs = (a[r].as_ptr().add(260 + 4 * pr) as *const i32).read_unaligned();
                    bias[r] = _mm512_dpwssd_epi32(bias[r], sw, _mm512_set1_epi32(bs));
                }
            }
            let mut isum: [__m512i; R] =
                std::array::from_fn(|r| _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(bias[r], 5)));
            for c in 0..2 {
                for h in 0..2 {
                    // Values 128c + 64h + 32p + 4t + (0..4) of every row, p = 0 and 1.
                    let mut s = [[_mm512_setzero_si512(); R]; 2];
                    for t in 0..8 {
                        let (u0, u1) = levels(c, h, t);
                        for r in 0..R {
                            let ap = a[r].as_ptr().add(4 + 128 * c + 64 * h + 4 * t);
                            let a0 = _mm512_set1_epi32((ap as *const i32).read_unaligned());
                            let a1 = _mm512_set1_epi32((ap.add(32) as *const i32).read_unaligned());
                            s[0][r] = _mm512_dpbusd_epi32(s[0][r], u0, a0);
                            s[1][r] = _mm512_dpbusd_epi32(s[1][r], u1, a1);
                        }
                        if t % 4 == 3 {
                            // Groups of sixteen values end here: g = 8c + 4h + 2p + t / 4.
                            for pp in 0..2 {
                                let sc = scale(8 * c + 4 * h + 2 * pp + t / 4);
                                for r in 0..R {
                                    isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(s[pp][r], sc));
                                    s[pp][r] = _mm512_setzero_si512();
                                }
                            }
                        }
                    }
                }
            }
            isum
        }
    }

    /// Bytes of an unpacked Q6_K tile: sixteen rows' 256 levels.
    pub const Q6K_TILE: usize = 4096;

    /// The high bits of Q6_K part `(h, p)` moved to bits 4..6 and the low four bits, for
    /// step `(c, t)` of an interleaved super-block at `p`: the levels `u0` (p = 0), `u1` (p = 1).
    #[inline(always)]
    unsafe fn q6k_levels(p: *const u8, c: usize, h: usize, t: usize) -> (__m512i, __m512i) {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            let m4 = _mm512_set1_epi8(0x0F);
            let m30 = _mm512_set1_epi8(0x30);
            // SAFETY: the caller passes a whole interleaved super-block (288 + 192 (8c + t) + 192
            // <= 3360).
            {
                let q = p.add(X16_Q6_QS + 192 * (8 * c + t));
                let l0 = _mm512_loadu_si512(q as *const __m512i);
                let l1 = _mm512_loadu_si512(q.add(64) as *const __m512i);
                let hb = _mm512_loadu_si512(q.add(128) as *const __m512i);
                let (l0, l1) = if h == 0 {
                    (_mm512_and_si512(l0, m4), _mm512_and_si512(l1, m4))
                } else {
                    (_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), _mm512_and_si512(_mm512_srli_epi16(l1, 4), m4))
                };
                // High bits of part (h, p) sit at shift 2 (2h + p): moved to bits 4..6.
                let (h0, h1) = if h == 0 {
                    (_mm512_slli_epi16(hb, 4), _mm512_slli_epi16(hb, 2))
                } else {
                    (hb, _mm512_srli_epi16(hb, 2))
                };
                (_mm512_or_si512(l0, _mm512_and_si512(h0, m30)), _mm512_or_si512(l1, _mm512_and_si512(h1, m30)))
            }
        }
    }

    /// Unpacks the levels of one interleaved Q6_K super-block into `tile`: for step
    /// `(c, h, t)` the two vectors of [`q6k_levels`] at `128 (8 (2c + h) + t)`.
    ///
    /// # Safety
    /// As for [`dot_q6k`]; `blk` is one whole interleaved super-block.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub unsafe fn unpack_q6k(blk: &[u8], tile: &mut [u8; Q6K_TILE]) {
        debug_assert!(blk.len() >= X16_Q6_BLOCK);
        for c in 0..2 {
            for h in 0..2 {
                for t in 0..8 {
                    // SAFETY: `blk` is whole; the stores stay in the 4096-byte tile
                    // (128 (8 (2c + h) + t) + 128 <= 4096).
                    unsafe {
                        let (u0, u1) = q6k_levels(blk.as_ptr(), c, h, t);
                        let o = tile.as_mut_ptr().add(128 * (8 * (2 * c + h) + t));
                        _mm512_storeu_si512(o as *mut __m512i, u0);
                        _mm512_storeu_si512(o.add(64) as *mut __m512i, u1);
                    }
                }
            }
        }
    }

    /// `R` activation rows' Q8_K block (`a[r]`) against one interleaved Q6_K super-block
    /// (`blk`, its levels unpacked in `tile`): `acc[r] += d * d_a * isum`, the direct
    /// kernel's operations in its order.
    ///
    /// # Safety
    /// As for [`dot_q6k`]; `tile` is `blk` unpacked by [`unpack_q6k`], `acc` holds `R` rows.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
    pub unsafe fn dot_q6k_tile<const R: usize>(
        blk: &[u8],
        tile: &[u8; Q6K_TILE],
        a: [&[u8]; R],
        acc: &mut [[f32; X16]],
    ) {
        debug_assert!(blk.len() >= X16_Q6_BLOCK && acc.len() >= R);
        // SAFETY: the loads stay in the super-block (scales 32..288), the tile and the
        // activation blocks (4 + 128c + 64h + 32p + 4t + 4 <= 260, sums 260..292).
        unsafe {
            let p = blk.as_ptr();
            let d = _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i));
            let isum = q6k_isum(p, a, |c, h, t| {
                let o = tile.as_ptr().add(128 * (8 * (2 * c + h) + t));
                (_mm512_loadu_si512(o as *const __m512i), _mm512_loadu_si512(o.add(64) as *const __m512i))
            });
            for r in 0..R {
                let da = _mm512_set1_ps(f32::from_le_bytes([a[r][0], a[r][1], a[r][2], a[r][3]]));
                let prev = _mm512_loadu_ps(acc[r].as_ptr());
                let next = _mm512_fmadd_ps(_mm512_mul_ps(d, da), _mm512_cvtepi32_ps(isum[r]), prev);
                _mm512_storeu_ps(acc[r].as_mut_ptr(), next);
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use crate::backend::x86::q8k_sub_block_sums;
    use std::arch::x86_64::*;

    /// How far ahead a one-row product (decode) asks for its weights: a pair of blocks'
    /// seventeen lines this many bytes ahead are prefetched as each pair starts. A decode
    /// step streams every weight once; with 8 KiB the one-thread Q8_0 decode of a Qwen3-0.6B
    /// file rose from 10.5-11.9 to 12.3-13.9 tok/s (Zen 3, interleaved runs; 2 and 4 KiB
    /// gained less, 16 KiB the same).
    const PF: usize = 8192;

    /// Sixteen interleaved Q8_0 rows (`blocks`, whole pairs of blocks) times `R` Q8_0 rows
    /// (`R <= 4`; each block's scale as f32 in `ad[r]`), into `res[r][row]`: the scalar
    /// spec's bits. Each 32-byte half of a step's 64-byte line holds four values of eight
    /// rows, so the four activation bytes broadcast meet eight rows at once (`|w|` times the
    /// activation with `w`'s sign: `maddubs`, then `madd` to i32 per row), and after the
    /// block's eight steps every lane holds one row's whole block sum: no horizontal
    /// reduction. Each block then adds `(d_w * d_a) * s` to its row's f32 sum in block
    /// order, as the spec does. Up to two activation rows take both halves of each line in
    /// one pass; three or four take the eight rows of each half in turn (the registers hold
    /// four rows' integer and f32 sums). One row (decode) prefetches its weights `PF`
    /// bytes ahead.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `blocks` holds whole interleaved pairs of blocks and
    /// each `a[r]` and `ad[r]` at least as many Q8_0 blocks and scales.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q8_0<const R: usize>(blocks: &[u8], a: [&[u8]; R], ad: [&[f32]; R], res: &mut [[f32; X16]; 4]) {
        let nb = blocks.len() / X16_Q8_BLOCK * 2;
        assert!(R <= 4, "dot_q8_0: at most four activation rows");
        for r in 0..R {
            assert!(a[r].len() >= nb * Q8_0_BYTES && ad[r].len() >= nb, "dot_q8_0: activation row too short");
        }
        // SAFETY: the features are this fn's; the lengths were checked above.
        unsafe {
            if R <= 2 {
                halves::<R, 2>(blocks, a, ad, res, 0);
            } else {
                halves::<R, 1>(blocks, a, ad, res, 0);
                halves::<R, 1>(blocks, a, ad, res, 1);
            }
        }
    }

    /// Sixteen interleaved Q4_K rows (`blocks`, whole super-blocks) times `R` Q8_K rows
    /// (`R <= 4`), into `res[r][row]`: the scalar spec's bits. Each 32-byte half of a step's
    /// 64-byte line holds four bytes of eight rows: their low nibbles are four values of
    /// sub-block `2c`, their high nibbles four of `2c + 1`. `maddubs` of the unsigned levels
    /// with the four activation bytes broadcast adds two products per i16 lane, eight rows at
    /// once; a sub-block's eight steps stay within i16 (16 products of at most 15 x 127), and
    /// one `madd` with each row's 6-bit scale (in both i16 halves of its lane) makes the
    /// row's scaled sub-block sum in i32: no horizontal reduction. The minimums meet the
    /// activation's group sums the same way (one `madd` per two sub-blocks). Each
    /// super-block then adds `(d * d_a) * isum - (dmin * d_a) * msum` to its row's f32 sum in
    /// block order, as the spec does. One row (decode) prefetches its weights `PF` bytes
    /// ahead.
    ///
    /// # Safety
    /// The CPU has AVX2, FMA and F16C; `blocks` holds whole interleaved super-blocks and each
    /// `a[r]` at least as many Q8_K blocks.
    #[allow(clippy::needless_range_loop)]
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_q4k<const R: usize>(blocks: &[u8], a: [&[u8]; R], res: &mut [[f32; X16]; 4]) {
        let nb = blocks.len() / X16_BLOCK;
        assert!(R <= 4, "dot_q4k: at most four activation rows");
        for r in 0..R {
            assert!(a[r].len() >= nb * Q8_K_BYTES, "dot_q4k: activation row too short");
        }
        // SAFETY: every load stays inside an interleaved super-block (f16 factors 0..64,
        // scales 64..256, nibbles 256 + 64 (8c + t) + 32h + 32 <= 2304) or a Q8_K block of a
        // row checked above (4 + 64c + 32 + 4t + 4 <= 260, sums 260..292), or `sm`; the
        // stores are into `sm` and `res`. A prefetch is a hint that never faults (its address
        // may lie past the weights: `wrapping_add`).
        unsafe {
            let m4 = _mm256_set1_epi8(0x0F);
            let m6 = _mm256_set1_epi8(63);
            let m30 = _mm256_set1_epi8(0x30);
            let mut acc = [[_mm256_setzero_ps(); 2]; R];
            // Scale s of row r at 16 s + r, minimum s at 128 + 16 s + r.
            let mut sm = [0u8; 256];
            for (b, blk) in blocks.chunks_exact(X16_BLOCK).enumerate() {
                let p = blk.as_ptr();
                if R == 1 {
                    for l in 0..X16_BLOCK / 64 {
                        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PF + 64 * l) as *const i8);
                    }
                }
                let ab: [*const u8; R] = std::array::from_fn(|r| a[r].as_ptr().add(b * Q8_K_BYTES));
                // The six-bit scales and minimums of the sixteen rows (bytes 0..4, 4..8 and
                // 8..12 of their scale fields, transposed), as `scale_min_k4` unpacks them.
                let q = sm.as_mut_ptr();
                for half in 0..2 {
                    let at = |i: usize| _mm256_loadu_si256(p.add(X16_SCALES + 64 * i + 32 * half) as *const __m256i);
                    let (s0, s1, s2) = (at(0), at(1), at(2));
                    let sc_lo = _mm256_and_si256(s0, m6);
                    let mn_lo = _mm256_and_si256(s1, m6);
                    let sc_hi =
                        _mm256_or_si256(_mm256_and_si256(s2, m4), _mm256_and_si256(_mm256_srli_epi16(s0, 2), m30));
                    let mn_hi = _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16(s2, 4), m4),
                        _mm256_and_si256(_mm256_srli_epi16(s1, 2), m30),
                    );
                    _mm256_storeu_si256(q.add(32 * half) as *mut __m256i, sc_lo);
                    _mm256_storeu_si256(q.add(64 + 32 * half) as *mut __m256i, sc_hi);
                    _mm256_storeu_si256(q.add(128 + 32 * half) as *mut __m256i, mn_lo);
                    _mm256_storeu_si256(q.add(192 + 32 * half) as *mut __m256i, mn_hi);
                }
                // The activation's sums of sub-blocks 2j, 2j + 1 as the i16 halves of word j.
                let mut pairs = [[0i32; 4]; R];
                for r in 0..R {
                    let ba = &a[r][b * Q8_K_BYTES..(b + 1) * Q8_K_BYTES];
                    _mm_storeu_si128(pairs[r].as_mut_ptr() as *mut __m128i, q8k_sub_block_sums(ba));
                }
                let mut isum = [[_mm256_setzero_si256(); 2]; R];
                for c in 0..4 {
                    let mut lo = [[_mm256_setzero_si256(); 2]; R];
                    let mut hi = [[_mm256_setzero_si256(); 2]; R];
                    for t in 0..8 {
                        for h in 0..2 {
                            let v = _mm256_loadu_si256(p.add(X16_QS + 64 * (8 * c + t) + 32 * h) as *const __m256i);
                            let l = _mm256_and_si256(v, m4);
                            let u = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                            for r in 0..R {
                                let ap = ab[r].add(4 + 64 * c + 4 * t);
                                let a_lo = _mm256_set1_epi32((ap as *const i32).read_unaligned());
                                let a_hi = _mm256_set1_epi32((ap.add(32) as *const i32).read_unaligned());
                                lo[r][h] = _mm256_add_epi16(lo[r][h], _mm256_maddubs_epi16(l, a_lo));
                                hi[r][h] = _mm256_add_epi16(hi[r][h], _mm256_maddubs_epi16(u, a_hi));
                            }
                        }
                    }
                    for h in 0..2 {
                        // Each row's scale in both i16 halves of its lane.
                        let scale = |at: usize| {
                            let s = _mm256_cvtepu8_epi32(_mm_loadl_epi64(q.add(at + 8 * h) as *const __m128i));
                            _mm256_or_si256(s, _mm256_slli_epi32(s, 16))
                        };
                        let (s_lo, s_hi) = (scale(32 * c), scale(32 * c + 16));
                        for r in 0..R {
                            let both =
                                _mm256_add_epi32(_mm256_madd_epi16(lo[r][h], s_lo), _mm256_madd_epi16(hi[r][h], s_hi));
                            isum[r][h] = _mm256_add_epi32(isum[r][h], both);
                        }
                    }
                }
                for h in 0..2 {
                    // Minimums of sub-blocks 2j and 2j + 1 of the half's rows, as i16 pairs.
                    let mut msum = [_mm256_setzero_si256(); R];
                    for j in 0..4 {
                        let ms = _mm_loadu_si128(q.add(128 + 32 * j) as *const __m128i);
                        let ms1 = _mm_loadu_si128(q.add(128 + 32 * j + 16) as *const __m128i);
                        let both = if h == 0 { _mm_unpacklo_epi8(ms, ms1) } else { _mm_unpackhi_epi8(ms, ms1) };
                        let mw = _mm256_cvtepu8_epi16(both);
                        for r in 0..R {
                            msum[r] = _mm256_add_epi32(msum[r], _mm256_madd_epi16(mw, _mm256_set1_epi32(pairs[r][j])));
                        }
                    }
                    let d = _mm256_cvtph_ps(_mm_loadu_si128(p.add(16 * h) as *const __m128i));
                    let dmin = _mm256_cvtph_ps(_mm_loadu_si128(p.add(32 + 16 * h) as *const __m128i));
                    for r in 0..R {
                        let da = _mm256_set1_ps((ab[r] as *const f32).read_unaligned());
                        let plus = _mm256_mul_ps(_mm256_mul_ps(d, da), _mm256_cvtepi32_ps(isum[r][h]));
                        let minus = _mm256_mul_ps(_mm256_mul_ps(dmin, da), _mm256_cvtepi32_ps(msum[r]));
                        acc[r][h] = _mm256_add_ps(acc[r][h], _mm256_sub_ps(plus, minus));
                    }
                }
            }
            for r in 0..R {
                for h in 0..2 {
                    _mm256_storeu_ps(res[r].as_mut_ptr().add(8 * h), acc[r][h]);
                }
            }
        }
    }

    /// Halves `h0..h0 + H` (rows `8 h0..8 (h0 + H)`) of [`dot_q8_0`].
    ///
    /// # Safety
    /// As for [`dot_q8_0`], whose checks hold; `h0 + H <= 2`.
    #[allow(clippy::needless_range_loop)]
    #[inline(always)]
    unsafe fn halves<const R: usize, const H: usize>(
        blocks: &[u8],
        a: [&[u8]; R],
        ad: [&[f32]; R],
        res: &mut [[f32; X16]; 4],
        h0: usize,
    ) {
        // SAFETY: every load stays inside an interleaved pair (scales 32 h + 16 (h0 + H) <= 64;
        // int8 64 + 512 h + 64 t + 32 (h0 + H) <= 1088) or an activation block (2 + 4 t + 4 <=
        // 34) of a row the caller checked; the stores are into `res`. A prefetch is a hint
        // that never faults (its address may lie past the weights: `wrapping_add`).
        unsafe {
            let ones = _mm256_set1_epi16(1);
            let mut acc = [[_mm256_setzero_ps(); H]; R];
            for (pair, blk) in blocks.chunks_exact(X16_Q8_BLOCK).enumerate() {
                let p = blk.as_ptr();
                if R == 1 {
                    for l in 0..X16_Q8_BLOCK / 64 {
                        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(PF + 64 * l) as *const i8);
                    }
                }
                for h in 0..2 {
                    let b = 2 * pair + h;
                    let qs = p.add(if h == 0 { 64 } else { X16_Q8_SECOND });
                    let mut s = [[_mm256_setzero_si256(); H]; R];
                    for t in 0..8 {
                        let mut w = [_mm256_setzero_si256(); H];
                        let mut aw = [_mm256_setzero_si256(); H];
                        for e in 0..H {
                            w[e] = _mm256_loadu_si256(qs.add(64 * t + 32 * (h0 + e)) as *const __m256i);
                            aw[e] = _mm256_sign_epi8(w[e], w[e]);
                        }
                        for r in 0..R {
                            let ap = a[r].as_ptr().add(b * Q8_0_BYTES + 2 + 4 * t);
                            let y = _mm256_set1_epi32((ap as *const i32).read_unaligned());
                            for e in 0..H {
                                // |w| <= 128 and |a| <= 127: a pair of products fits in i16.
                                let pairs = _mm256_maddubs_epi16(aw[e], _mm256_sign_epi8(y, w[e]));
                                s[r][e] = _mm256_add_epi32(s[r][e], _mm256_madd_epi16(pairs, ones));
                            }
                        }
                    }
                    for e in 0..H {
                        let dw = _mm256_cvtph_ps(_mm_loadu_si128(p.add(32 * h + 16 * (h0 + e)) as *const __m128i));
                        for r in 0..R {
                            let d = _mm256_mul_ps(dw, _mm256_set1_ps(ad[r][b]));
                            acc[r][e] = _mm256_add_ps(acc[r][e], _mm256_mul_ps(d, _mm256_cvtepi32_ps(s[r][e])));
                        }
                    }
                }
            }
            for r in 0..R {
                for e in 0..H {
                    _mm256_storeu_ps(res[r].as_mut_ptr().add(8 * (h0 + e)), acc[r][e]);
                }
            }
        }
    }
}
