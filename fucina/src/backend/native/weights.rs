//! The native paths of weight products (`backend::weights` states what each computes):
//! register-tiled float GEMM from the stored rows and the packed f32 GEMM fed by decoded
//! weight panels, integer row kernels (four activation rows per weight unpack where the CPU
//! has them), the K-quant tile GEMM for batches ([`kgemm`]), the bf16 GEMM with decoders
//! straight to bf16 on AVX-512 BF16; split over the pool by ranges of weight rows when the
//! product is large.

use super::super::fdot;
use super::super::qdot::{self, Q8_0_BYTES};
use super::super::qdot_k::{self, KFormat};
use super::super::rowdot::{RowDot, RowDot2x4, RowDot4};
use super::super::weights::{
    activation_row_bytes, decode_row, f32_to_bf16_bits, quantize_activations, WeightFormat, WeightJob, WeightMat,
};
use super::kgemm;
use super::simd::prefetch;
use super::{
    decode_row_bf16, gemm_packed, gemm_rows, gemm_rows_bf16, has_bf16_dot, in_serial, packed_nr, transpose_into_panel,
    BlockRow, GEMM_KC,
};
use rayon::prelude::*;

thread_local! {
    /// The weight rows of one packed panel, decoded (scratch of the packed path).
    static PANEL_ROWS: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
    /// A decoded weight row (scratch of the bf16 path).
    static ROW_F32: std::cell::RefCell<Vec<f32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether a product of `work` multiply-adds is split over the pool: on a pool thread of
/// more than one worker, at least `min` of work, and not inside [`super::serial`].
fn may_split(work: usize, min: usize) -> bool {
    rayon::current_num_threads() > 1 && rayon::current_thread_index().is_some() && work >= min && !in_serial()
}

/// `y [m, n] = x [m, k] W^T` on the fastest path for this CPU.
pub fn weight_matmul(w: &WeightMat<'_>, x: &[f32], m: usize, y: &mut [f32]) {
    w.check(x, m, y);
    let (n, k) = (w.rows, w.cols);
    if m == 0 || n == 0 {
        return;
    }
    if w.format.interleaved().is_some() {
        return super::interleaved::matmul(w, x, m, y, may_split(m * n * k, 1 << 17));
    }
    if w.format.takes_bf16(m, k) {
        return bf16_path(w, x, m, y);
    }
    // Block formats take the integer kernels at every batch size (not a decoded-f32 GEMM
    // from some batch on): a row's result must not depend on the batch it came in.
    if matches!(w.format, WeightFormat::Float(_)) && m >= packed_batch() {
        // The packed f32 GEMM, weight rows decoded to f32 as their panels are packed.
        let parallel = may_split(m * n * k, 1 << 18);
        let pack = |pc: usize, kc: usize, j0: usize, panel: &mut [f32]| pack_weight_panel(w, pc, kc, j0, panel);
        gemm_packed(m, n, k, x, &pack, y, parallel);
        return;
    }
    if let WeightFormat::Float(fmt) = w.format {
        if m >= 2 {
            // Register-tiled dot products straight from the stored rows (no packing).
            let parallel = may_split(m * n * k, 1 << 18);
            gemm_rows(m, n, k, x, w.data, fmt, y, parallel);
            return;
        }
        let kern = fdot::row_kernel(fmt);
        let fill = |j0: usize, j1: usize, out: &Cols| {
            for j in j0..j1 {
                // SAFETY: the weight row holds `k` values of `fmt`, `x` one row of `k`; j is in
                // this task's range.
                unsafe { out.set(0, j, kern(w.row(j), &x[..k])) };
            }
        };
        return split_rows(n, m * n * k, y, fill);
    }
    let a_row = activation_row_bytes(w.format, k);
    let mut qa = vec![0u8; m * a_row];
    quantize_activations_rows(w.format, x, k, m, &mut qa);
    let (kern, kern4, kern2x4): (RowDot, Option<RowDot4>, Option<RowDot2x4>) = match w.format {
        WeightFormat::K(f) => (qdot_k::row_kernel(f), qdot_k::row_kernel_x4(f), None),
        WeightFormat::Q4_0 => (qdot::row_kernel(true), qdot::row_kernel_x4(true), qdot::row_kernel_2x4(true)),
        _ => (qdot::row_kernel(false), qdot::row_kernel_x4(false), qdot::row_kernel_2x4(false)),
    };
    let qa = &qa;
    if let WeightFormat::K(f) = w.format {
        if m >= KGEMM_BATCH && kgemm::available() {
            // Unpacked super-block tiles against eight activation rows at a time.
            let fill = |j0: usize, j1: usize, out: &Cols| {
                let set = |i: usize, j: usize, v: f32| {
                    // SAFETY: the tile GEMM reports i < m and j in j0..j1, this task's range.
                    unsafe { out.set(i, j, v) }
                };
                kgemm::fill_rows(f, |j| w.row(j), k, qa, a_row, m, (j0, j1), set);
            };
            return split_rows(n, m * n * k, y, fill);
        }
    }
    // Activation rows in blocks that stay in L1/L2 while a chunk of weight rows meets them.
    let ib = (16 * 1024 / a_row.max(1)).clamp(4, 64) / 4 * 4;
    // For the 2 x 4 tiles: each group of four activation rows' Q8_0 block scales as f32,
    // block by block (`[group][block][row]`), converted once per product rather than once
    // per pair of weight rows.
    let nb = a_row / Q8_0_BYTES;
    let scales4: Vec<f32> = if kern2x4.is_some() {
        (0..m / 4)
            .flat_map(|g| (0..nb).flat_map(move |b| (0..4).map(move |r| (4 * g + r) * a_row + b * Q8_0_BYTES)))
            .map(|at| half::f16::from_le_bytes([qa[at], qa[at + 1]]).to_f32())
            .collect()
    } else {
        Vec::new()
    };
    let scales4 = &scales4;
    // Weight rows in chunks that stay in L2 while every block of activation rows meets them
    // (a task's whole range on one thread is the whole matrix, streamed again per block);
    // an even number, so that pairs of rows for the 2 x 4 tile are not split at a chunk's end.
    let jc = (WEIGHT_CHUNK_BYTES / w.format.row_bytes(k).max(1)).max(2) / 2 * 2;
    let fill = |j0: usize, j1: usize, out: &Cols| {
        let act = |i: usize| &qa[i * a_row..(i + 1) * a_row];
        for (c0, i0) in (j0..j1).step_by(jc).flat_map(|c| (0..m).step_by(ib).map(move |i| (c, i))) {
            let c1 = (c0 + jc).min(j1);
            let i1 = (i0 + ib).min(m);
            let mut j = c0;
            // Pairs of weight rows against four activation rows at a time, where a tile
            // kernel exists; the rows left over take the one-row kernels below.
            if let Some(k24) = kern2x4 {
                let i4 = i0 + (i1 - i0) / 4 * 4;
                while j + 2 <= c1 && i4 > i0 {
                    let pair = [w.row(j), w.row(j + 1)];
                    for i in (i0..i4).step_by(4) {
                        let sa = &scales4[i / 4 * 4 * nb..(i / 4 + 1) * 4 * nb];
                        // SAFETY: as for `kern4` below, for two weight rows of the same length;
                        // `sa` holds the four rows' block scales.
                        let r = unsafe { k24(pair, [act(i), act(i + 1), act(i + 2), act(i + 3)], sa) };
                        for (h, row) in r.into_iter().enumerate() {
                            for (d, v) in row.into_iter().enumerate() {
                                // SAFETY: i + d < i4 <= m; j + h is in this task's range.
                                unsafe { out.set(i + d, j + h, v) };
                            }
                        }
                    }
                    for jj in j..j + 2 {
                        for ii in i4..i1 {
                            // SAFETY: as for `kern` below.
                            unsafe { out.set(ii, jj, kern(w.row(jj), act(ii))) };
                        }
                    }
                    j += 2;
                }
            }
            for j in j..c1 {
                let wrow = w.row(j);
                // Decode only: with several activation rows the kernel's own reads keep the
                // hardware prefetcher ahead, and the extra requests cost (measured).
                if m == 1 {
                    // The bytes one row long that lie PREFETCH_BYTES ahead of this row (rows
                    // are contiguous), clipped to this task's rows.
                    let rb = wrow.len();
                    let end = ((j + 1) * rb + PREFETCH_BYTES).min(j1 * rb);
                    let start = (j * rb + PREFETCH_BYTES).min(end);
                    prefetch(&w.data[start..end]);
                }
                let mut i = i0;
                if let Some(k4) = kern4 {
                    while i + 4 <= i1 {
                        // SAFETY: as for `kern` below, for four activation rows.
                        let r = unsafe { k4(wrow, [act(i), act(i + 1), act(i + 2), act(i + 3)]) };
                        for (d, v) in r.into_iter().enumerate() {
                            // SAFETY: i + d < i1 <= m and j is in this task's range.
                            unsafe { out.set(i + d, j, v) };
                        }
                        i += 4;
                    }
                }
                for ii in i..i1 {
                    // SAFETY: weight rows are whole blocks of the format, activation rows the
                    // matching number of Q8_0/Q8_K blocks; the kernels were chosen for this CPU;
                    // ii < m and j is in this task's range.
                    unsafe { out.set(ii, j, kern(wrow, act(ii))) };
                }
            }
        }
    };
    split_rows(n, m * n * k, y, fill)
}

/// The bf16 path: weight rows decoded to bf16 once per call (straight from the blocks on
/// AVX-512 BF16), activations rounded to bf16, `vdpbf16ps` tiles or their portable twin.
fn bf16_path(w: &WeightMat<'_>, x: &[f32], m: usize, y: &mut [f32]) {
    let (n, k) = (w.rows, w.cols);
    let xb: Vec<u16> = x.iter().map(|v| f32_to_bf16_bits(*v)).collect();
    let fast = match w.format {
        _ if !has_bf16_dot() => None,
        WeightFormat::Q8_0 => Some(BlockRow::Q8_0),
        WeightFormat::Q4_0 => Some(BlockRow::Q4_0),
        WeightFormat::K(KFormat::Q4K) => Some(BlockRow::Q4K),
        WeightFormat::K(KFormat::Q5K) => Some(BlockRow::Q5K),
        WeightFormat::K(KFormat::Q6K) => Some(BlockRow::Q6K),
        _ => None,
    };
    let decode = |j: usize, out: &mut [u16]| {
        let src = w.row(j);
        if let Some(f) = fast {
            decode_row_bf16(f, src, out);
            return;
        }
        if w.format == WeightFormat::Float(fdot::FloatRow::BF16) {
            for (o, b) in out.iter_mut().zip(src.chunks_exact(2)) {
                *o = u16::from_le_bytes([b[0], b[1]]);
            }
            return;
        }
        ROW_F32.with(|cell| {
            let mut row = cell.borrow_mut();
            row.resize(k, 0.0);
            decode_row(w.format, src, &mut row);
            for (o, v) in out.iter_mut().zip(row.iter()) {
                *o = f32_to_bf16_bits(*v);
            }
        });
    };
    let parallel = may_split(m * n * k, 1 << 18);
    gemm_rows_bf16(m, n, k, &xb, &decode, y, parallel);
}

/// From this many activation rows on, their quantization is split over the team (rows of
/// a long prefill took 3 % of a Qwen3-0.6B Q6_K pp256 pass on the calling thread alone,
/// while the other worker waited).
const PAR_QUANTIZE_ROWS: usize = 32;

/// [`quantize_activations`] of `m` rows, split by rows over the team when there are many
/// (each row's bytes are the same either way).
pub(super) fn quantize_activations_rows(format: WeightFormat, x: &[f32], k: usize, m: usize, out: &mut [u8]) {
    let a_row = activation_row_bytes(format, k);
    if m < PAR_QUANTIZE_ROWS
        || k == 0
        || a_row == 0
        || x.len() < m * k
        || out.len() < m * a_row
        || !may_split(m * k, 1 << 15)
    {
        return quantize_rows(format, x, k, out);
    }
    // One chunk per row, at least eight rows per task.
    super::par_chunks(&mut out[..m * a_row], a_row, 8, |r, q| quantize_rows(format, &x[r * k..(r + 1) * k], k, q));
}

/// Quantizes one block of activations (`values`) into its bytes (`out`).
#[cfg(target_arch = "x86_64")]
type BlockQuantizer = unsafe fn(values: &[f32], out: &mut [u8]);

/// [`quantize_activations`] on this CPU: Q8_K rows (the K-quants' activations) and Q8_0 rows
/// (everything else's) with AVX-512 where the integer kernels run, else with AVX2, the same
/// bytes as the scalar quantizers (tested); without either by them.
fn quantize_rows(format: WeightFormat, x: &[f32], k: usize, out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if let Some((block, bytes, quantize_block)) = block_quantizer(format) {
        if k.is_multiple_of(block) {
            let a_row = activation_row_bytes(format, k);
            for (row, q) in x.chunks_exact(k.max(1)).zip(out.chunks_exact_mut(a_row.max(1))) {
                for (b, o) in row.chunks_exact(block).zip(q.chunks_exact_mut(bytes)) {
                    // SAFETY: has_avx512_int reports AVX-512 F/BW/VL; one whole block and its bytes.
                    unsafe { quantize_block(b, o) };
                }
            }
            return;
        }
    }
    quantize_activations(format, x, k, out)
}

/// Values and bytes of one activation block for `format`'s products, and the vector
/// quantizer for it on this CPU (AVX-512 where the integer kernels run, else AVX2), if any.
#[cfg(target_arch = "x86_64")]
fn block_quantizer(format: WeightFormat) -> Option<(usize, usize, BlockQuantizer)> {
    let k = matches!(format.plain(), WeightFormat::K(_));
    let (block, bytes) = if k { (qdot_k::QK_K, qdot_k::Q8_K_BYTES) } else { (32, qdot::Q8_0_BYTES) };
    let f: BlockQuantizer = if super::simd::has_avx512_int() {
        if k {
            q8k_avx512::quantize_block
        } else {
            q8_0_avx512::quantize_block
        }
    } else if super::simd::level().has_avx2() {
        if k {
            q8k_avx2::quantize_block
        } else {
            q8_0_avx2::quantize_block
        }
    } else {
        return None;
    };
    Some((block, bytes, f))
}

/// One activation row (a whole number of 32-value blocks) quantized to Q8_0 on this CPU:
/// `qdot::quantize_row_q8_0`'s bytes (the attention's queries against a Q8_0 key cache).
pub(super) fn quantize_row_q8_0(x: &[f32], out: &mut [u8]) {
    quantize_rows(WeightFormat::Q8_0, x, x.len(), out)
}

/// One Q8_0 block with AVX-512: `qdot::quantize_row_q8_0`'s bytes, vectorized (the scalar
/// loop's `roundf` call per value was 2.3 % of a Qwen3-0.6B Q8_0 decode on 1 thread).
#[cfg(target_arch = "x86_64")]
mod q8_0_avx512 {
    use super::qdot::Q8_0_BYTES;
    use half::f16;
    use std::arch::x86_64::*;

    /// Quantizes 32 values (`x`) into one Q8_0 block (`o`, 34 bytes): `d = amax / 127` (NaN
    /// ignored, as `f32::max` ignores it) stored as f16, levels `v / d` rounded half away
    /// from zero and cast to a byte as the scalar's `as i8` does (saturating; NaN to 0).
    ///
    /// # Safety
    /// The CPU has AVX-512 F/BW/VL; `x` holds 32 values and `o` 34 bytes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub unsafe fn quantize_block(x: &[f32], o: &mut [u8]) {
        assert!(x.len() >= 32 && o.len() >= Q8_0_BYTES, "quantize_block: sizes");
        let xp = x.as_ptr();
        let abs_mask = _mm512_set1_epi32(0x7fff_ffff);
        // SAFETY: values 0..32 lie in `x`.
        let (v0, v1) = unsafe { (_mm512_loadu_ps(xp), _mm512_loadu_ps(xp.add(16))) };
        let abs = |v: __m512| _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), abs_mask));
        // NaN in the first operand gives the second back: a NaN never becomes the maximum.
        let m = _mm512_max_ps(abs(v1), _mm512_max_ps(abs(v0), _mm512_setzero_ps()));
        let amax = _mm512_reduce_max_ps(m);
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        o[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        let (sv, half, one) = (_mm512_set1_ps(id), _mm512_set1_ps(0.5), _mm512_set1_ps(1.0));
        let (lo, hi) = (_mm512_set1_ps(-128.0), _mm512_set1_ps(127.0));
        let sign = _mm512_set1_epi32(i32::MIN);
        let op = o.as_mut_ptr();
        for (g, v) in [v0, v1].into_iter().enumerate() {
            let t = _mm512_mul_ps(v, sv);
            // |t| rounded half away from zero: floor, plus one where the (exact) fraction
            // is at least a half; then t's sign back.
            let a = abs(t);
            let f = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(a);
            let up = _mm512_cmp_ps_mask::<_CMP_GE_OQ>(_mm512_sub_ps(a, f), half);
            let r = _mm512_mask_add_ps(f, up, f, one);
            let r = _mm512_castsi512_ps(_mm512_or_si512(
                _mm512_castps_si512(r),
                _mm512_and_si512(_mm512_castps_si512(t), sign),
            ));
            // `as i8`: NaN to 0, the rest clamped to the byte's range.
            let nan = _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(t, t);
            let r = _mm512_mask_mov_ps(r, nan, _mm512_setzero_ps());
            let r = _mm512_min_ps(_mm512_max_ps(r, lo), hi);
            let bytes = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r));
            // SAFETY: bytes 2 + 16g..18 + 16g lie in `o` (34 bytes).
            unsafe { _mm_storeu_si128(op.add(2 + 16 * g).cast(), bytes) };
        }
    }
}

/// One Q8_K block with AVX-512: `qdot_k::quantize_row_q8_k`'s bytes, vectorized.
#[cfg(target_arch = "x86_64")]
mod q8k_avx512 {
    use super::qdot_k::{Q8_K_BYTES, QK_K};
    use std::arch::x86_64::*;

    /// Quantizes 256 values (`x`) into one Q8_K block (`o`, 292 bytes): the scale of the
    /// first value of largest magnitude (NaN ignored, as the scalar loop's `>` ignores it),
    /// levels rounded to nearest even (the scalar's magic-number rounding, for |v| <= 127)
    /// and capped at 127, truncated to a byte as the scalar's `as i8` does (a NaN level, 0),
    /// and the sums of sixteen levels.
    ///
    /// # Safety
    /// The CPU has AVX-512 F/BW/VL; `x` holds 256 values and `o` 292 bytes.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    pub unsafe fn quantize_block(x: &[f32], o: &mut [u8]) {
        assert!(x.len() >= QK_K && o.len() >= Q8_K_BYTES, "quantize_block: sizes");
        let xp = x.as_ptr();
        let abs_mask = _mm512_set1_epi32(0x7fff_ffff);
        let mut m = _mm512_setzero_ps();
        for g in 0..16 {
            // SAFETY: values 16g..16g+16 lie in `x`.
            let v = unsafe { _mm512_loadu_ps(xp.add(16 * g)) };
            let a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), abs_mask));
            // NaN in `a` gives `m` back (the second operand): a NaN never becomes the maximum.
            m = _mm512_max_ps(a, m);
        }
        let amax = _mm512_reduce_max_ps(m);
        if amax == 0.0 {
            o[..Q8_K_BYTES].fill(0);
            return;
        }
        let target = _mm512_set1_ps(amax);
        let mut max = amax;
        for g in 0..16 {
            // SAFETY: as above.
            let v = unsafe { _mm512_loadu_ps(xp.add(16 * g)) };
            let a = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), abs_mask));
            let hit = _mm512_cmp_ps_mask::<_CMP_EQ_OQ>(a, target);
            if hit != 0 {
                max = x[16 * g + hit.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        o[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
        let (sv, cap) = (_mm512_set1_ps(iscale), _mm512_set1_epi32(127));
        let op = o.as_mut_ptr();
        for g in 0..16 {
            // SAFETY: as above; bytes 4 + 16g..20 + 16g and 260 + 2g..262 + 2g lie in `o`.
            unsafe {
                let v = _mm512_loadu_ps(xp.add(16 * g));
                let q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(sv, v)), cap);
                let bytes = _mm512_cvtepi32_epi8(q);
                _mm_storeu_si128(op.add(4 + 16 * g).cast(), bytes);
                let sum = _mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(bytes)) as i16;
                std::ptr::copy_nonoverlapping(sum.to_le_bytes().as_ptr(), op.add(260 + 2 * g), 2);
            }
        }
    }
}

/// One Q8_0 block with AVX2: `qdot::quantize_row_q8_0`'s bytes, as [`q8_0_avx512`] gives
/// them (the scalar loop's `roundf` calls were 4.6 % of a Qwen3-0.6B Q8_0 pp64 on Zen 3, 1
/// thread).
#[cfg(target_arch = "x86_64")]
mod q8_0_avx2 {
    use super::qdot::Q8_0_BYTES;
    use crate::backend::x86::hmax256;
    use half::f16;
    use std::arch::x86_64::*;

    /// Quantizes 32 values (`x`) into one Q8_0 block (`o`, 34 bytes), as
    /// [`super::q8_0_avx512::quantize_block`] says, eight lanes at a time.
    ///
    /// # Safety
    /// The CPU has AVX2; `x` holds 32 values and `o` 34 bytes.
    #[target_feature(enable = "avx2")]
    pub unsafe fn quantize_block(x: &[f32], o: &mut [u8]) {
        assert!(x.len() >= 32 && o.len() >= Q8_0_BYTES, "quantize_block: sizes");
        let xp = x.as_ptr();
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        let abs = |v: __m256| _mm256_and_ps(v, abs_mask);
        // SAFETY: values 0..32 lie in `x`.
        let v: [__m256; 4] = std::array::from_fn(|g| unsafe { _mm256_loadu_ps(xp.add(8 * g)) });
        // NaN in the first operand gives the second back: a NaN never becomes the maximum.
        let mut m = _mm256_setzero_ps();
        for vg in v {
            m = _mm256_max_ps(abs(vg), m);
        }
        // SAFETY: AVX2 is enabled for this function; `m` holds no NaN.
        let amax = unsafe { hmax256(m) };
        let d = amax / 127.0;
        let id = if d == 0.0 { 0.0 } else { 1.0 / d };
        o[..2].copy_from_slice(&f16::from_f32(d).to_le_bytes());
        let (sv, half, one) = (_mm256_set1_ps(id), _mm256_set1_ps(0.5), _mm256_set1_ps(1.0));
        let (lo, hi) = (_mm256_set1_ps(-128.0), _mm256_set1_ps(127.0));
        let sign = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MIN));
        let q: [__m256i; 4] = std::array::from_fn(|g| {
            let t = _mm256_mul_ps(v[g], sv);
            // |t| rounded half away from zero: floor, plus one where the (exact) fraction is
            // at least a half; then t's sign back.
            let a = abs(t);
            let f = _mm256_floor_ps(a);
            let up = _mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_sub_ps(a, f), half);
            let r = _mm256_or_ps(_mm256_add_ps(f, _mm256_and_ps(up, one)), _mm256_and_ps(t, sign));
            // `as i8`: NaN to 0, the rest clamped to the byte's range.
            let r = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(t, t), r);
            _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(r, lo), hi))
        });
        // Packing saturates, but every level is already in -128..=127; the packs work per
        // 128-bit half, so the 4-byte groups come out as q0 q1 q2 q3 (low halves), then the
        // high halves, and one permutation puts them in order.
        let b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        let b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        // SAFETY: bytes 2..34 lie in `o` (34 bytes).
        unsafe { _mm256_storeu_si256(o.as_mut_ptr().add(2).cast(), b) };
    }
}

/// One Q8_K block with AVX2: `qdot_k::quantize_row_q8_k`'s bytes, as [`q8k_avx512`] gives
/// them.
#[cfg(target_arch = "x86_64")]
mod q8k_avx2 {
    use super::qdot_k::{Q8_K_BYTES, QK_K};
    use crate::backend::x86::{hmax256, hsum_i32x8};
    use std::arch::x86_64::*;

    /// Quantizes 256 values (`x`) into one Q8_K block (`o`, 292 bytes), as
    /// [`super::q8k_avx512::quantize_block`] says, eight lanes at a time.
    ///
    /// # Safety
    /// The CPU has AVX2; `x` holds 256 values and `o` 292 bytes.
    #[target_feature(enable = "avx2")]
    pub unsafe fn quantize_block(x: &[f32], o: &mut [u8]) {
        assert!(x.len() >= QK_K && o.len() >= Q8_K_BYTES, "quantize_block: sizes");
        let xp = x.as_ptr();
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fff_ffff));
        // SAFETY: values 8g..8g+8 lie in `x` for g < 32.
        let load = |g: usize| unsafe { _mm256_loadu_ps(xp.add(8 * g)) };
        let mut m = _mm256_setzero_ps();
        for g in 0..32 {
            // NaN in the first operand gives `m` back: a NaN never becomes the maximum.
            m = _mm256_max_ps(_mm256_and_ps(load(g), abs_mask), m);
        }
        // SAFETY: AVX2 is enabled for this function; `m` holds no NaN.
        let amax = unsafe { hmax256(m) };
        if amax == 0.0 {
            o[..Q8_K_BYTES].fill(0);
            return;
        }
        let target = _mm256_set1_ps(amax);
        let mut max = amax;
        for g in 0..32 {
            let a = _mm256_and_ps(load(g), abs_mask);
            let hit = _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_EQ_OQ>(a, target));
            if hit != 0 {
                max = x[8 * g + hit.trailing_zeros() as usize];
                break;
            }
        }
        let iscale = -127.0 / max;
        o[..4].copy_from_slice(&(1.0 / iscale).to_le_bytes());
        let (sv, cap, low) = (_mm256_set1_ps(iscale), _mm256_set1_epi32(127), _mm256_set1_epi32(0xff));
        let op = o.as_mut_ptr();
        for g in 0..16 {
            // Sixteen levels, each truncated to its low byte (`as i8`: i32::MIN from a NaN
            // becomes 0), then their signed sum.
            let q: [__m256i; 2] = std::array::from_fn(|h| {
                let q = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(sv, load(2 * g + h))), cap);
                _mm256_srai_epi32::<24>(_mm256_slli_epi32::<24>(q))
            });
            // Unsigned packs of the low bytes cannot saturate; the 4-byte groups come out per
            // 128-bit half and are put in order.
            let u = _mm256_packus_epi32(_mm256_and_si256(q[0], low), _mm256_and_si256(q[1], low));
            let b = _mm256_packus_epi16(u, u);
            let b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 0, 4, 1, 5));
            // SAFETY: AVX2 is enabled for this function.
            let sum = unsafe { hsum_i32x8(_mm256_add_epi32(q[0], q[1])) } as i16;
            // SAFETY: bytes 4 + 16g..20 + 16g and 260 + 2g..262 + 2g lie in `o` (292 bytes).
            unsafe {
                _mm_storeu_si128(op.add(4 + 16 * g).cast(), _mm256_castsi256_si128(b));
                std::ptr::copy_nonoverlapping(sum.to_le_bytes().as_ptr(), op.add(260 + 2 * g), 2);
            }
        }
    }
}

/// How far ahead of the row in hand the integer row kernels start reading in decode: a
/// distance in bytes, not rows, so long rows (DeepSeek's experts) do not prefetch too far.
const PREFETCH_BYTES: usize = 4096;

/// The weight bytes the integer row kernels keep in L2 while the blocks of activation rows
/// meet them (Zen 3 and Zen 4 cores have 512 KB and 1 MB of L2).
const WEIGHT_CHUNK_BYTES: usize = 256 * 1024;

/// From this many activation rows on, K-quant weights take the tile GEMM ([`kgemm`]).
const KGEMM_BATCH: usize = 16;

/// From this many activation rows on, float weights take the packed GEMM where the CPU has
/// the register tiles of [`gemm_rows`] (AVX-512, or AVX2 with F16C). The tiles of dot
/// products straight from the stored rows (f16 widened in the load) beat decoding panels and
/// packing them at every batch measured up to 512 rows: Qwen3-0.6B F16 on Zen 4 (4 x 6 tiles
/// of 16 lanes), 2 threads, pp16 53-58 -> 97-108 tok/s and pp256/pp512 8-15 % faster; on Zen 3
/// (2 x 6 tiles of 8 lanes), 1 thread, pp16 22-36 -> 43-65, pp64 43-66 -> 65-81, pp256 58-73
/// -> 68-79, 2 threads pp512/pp1024 even (docs/BENCHMARK.md).
const PACKED_BATCH_TILES: usize = 1024;

/// From this many activation rows on, float weights take the packed GEMM on CPUs without the
/// register tiles (portable builds), where [`gemm_rows`] is one dot product per output.
const PACKED_BATCH: usize = 8;

/// The batch from which float weights take the packed GEMM on this CPU.
fn packed_batch() -> usize {
    if super::rowgemm::has_tiles() {
        PACKED_BATCH_TILES
    } else {
        PACKED_BATCH
    }
}

/// Writes the panel of weight rows `j0..j0 + nr` (B's columns), values `pc..pc + kc`, decoded
/// to f32: `panel[p * nr + jj]`, zero past the last row (`nr` = [`packed_nr`]).
fn pack_weight_panel(w: &WeightMat<'_>, pc: usize, kc: usize, j0: usize, panel: &mut [f32]) {
    let nr = packed_nr();
    let cols = nr.min(w.rows - j0);
    let (b0, b1) = (w.format.row_bytes(pc), w.format.row_bytes(pc + kc));
    PANEL_ROWS.with(|cell| {
        let mut rows = cell.borrow_mut();
        rows.resize(nr * GEMM_KC, 0.0);
        for jj in 0..cols {
            decode_row(w.format, &w.row(j0 + jj)[b0..b1], &mut rows[jj * GEMM_KC..jj * GEMM_KC + kc]);
        }
        transpose_into_panel(&rows, GEMM_KC, cols, kc, nr, panel);
    });
    // The next panel of the same K block is the next one a task asks for: start its reads
    // now, so they overlap this panel's arithmetic.
    for j in (j0 + nr..w.rows).take(nr) {
        prefetch(&w.row(j)[b0..b1]);
    }
}

/// Jobs of at most this many activation rows each run side by side (one task each, serial
/// inside) when their weights have no interleaved layout and there are enough of them to
/// keep the workers balanced: each product is too small to be worth splitting over the
/// workers on its own.
const SIDE_BY_SIDE_ROWS: usize = 8;

/// Several independent products, each as [`weight_matmul`] computes it: interleaved weights
/// as one parallel region over the sixteen-row groups of all of them
/// ([`super::interleaved::matmul_group`]); other small products side by side, one task each;
/// otherwise one after another, each split on its own.
pub fn weight_matmul_group(jobs: &mut [WeightJob<'_>]) {
    for j in jobs.iter() {
        j.w.check(j.x, j.m, j.y);
    }
    let work: usize = jobs.iter().map(|j| j.m * j.w.rows * j.w.cols).sum();
    if jobs.len() >= 2 && may_split(work, 1 << 17) {
        if jobs.iter().all(|j| j.w.format.interleaved().is_some() && j.m > 0) {
            return super::interleaved::matmul_group(jobs);
        }
        // Side by side only when no job is more than a share of the whole that keeps the
        // workers balanced (a layer's experts, not q next to a smaller k and v).
        let threads = rayon::current_num_threads();
        if jobs.iter().all(|j| j.m <= SIDE_BY_SIDE_ROWS && j.m * j.w.rows * j.w.cols * 2 * threads <= work) {
            let cells: Vec<std::sync::Mutex<&mut WeightJob<'_>>> = jobs.iter_mut().map(std::sync::Mutex::new).collect();
            super::team::for_each(cells.len(), |i| {
                let mut j = cells[i].lock().unwrap_or_else(|e| e.into_inner());
                let j = &mut **j;
                super::serial(|| weight_matmul(&j.w, j.x, j.m, j.y));
            });
            return;
        }
    }
    for j in jobs.iter_mut() {
        weight_matmul(&j.w, j.x, j.m, j.y);
    }
}

/// Decodes the whole matrix to f32 (`out [rows, cols]`), rows split over the pool.
pub fn weight_decode(w: &WeightMat<'_>, out: &mut [f32]) {
    assert_eq!(out.len(), w.rows * w.cols, "weight_decode: sizes");
    let k = w.cols.max(1);
    let one = |buf: &mut Vec<u8>, (j, o): (usize, &mut [f32])| decode_row(w.format, w.gather_row(j, buf), o);
    if may_split(out.len(), 1 << 16) {
        out.par_chunks_mut(k).enumerate().for_each_init(Vec::new, one);
    } else {
        let mut buf = Vec::new();
        out.chunks_mut(k).enumerate().for_each(|jo| one(&mut buf, jo));
    }
}

/// Repacks `w` into an interleaved layout, groups of rows split over the pool.
pub fn weight_repack(w: &WeightMat<'_>, layout: crate::backend::Interleaved, out: &mut [u8]) {
    use crate::backend::interleave::{interleave, interleave_groups, X16};
    assert!(layout.fits(w.rows, w.cols) && out.len() == w.data.len(), "weight_repack: sizes");
    let group = X16 * w.format.row_bytes(w.cols);
    if !may_split(out.len(), 1 << 18) {
        return interleave(layout, w.rows, w.cols, w.data, out);
    }
    // About eight tasks per worker, whole groups each.
    let per = (w.rows / X16).div_ceil(8 * rayon::current_num_threads()).max(1) * group;
    out.par_chunks_mut(per)
        .enumerate()
        .for_each(|(t, o)| interleave_groups(layout, w.cols, w.data, t * per / group, o));
}

/// Fills `y [m, n]` by running `fill(j0, j1, cols)` over ranges of weight rows (output
/// columns) when the product is large enough: for a streaming product (at most four
/// activation rows) in ranges that shrink as they go ([`super::task_sizes`]), else about
/// eight ranges per worker; each call writes only its own columns.
fn split_rows(n: usize, work: usize, y: &mut [f32], fill: impl Fn(usize, usize, &Cols) + Sync) {
    let parallel = may_split(work, 1 << 17);
    let m = y.len().checked_div(n).unwrap_or(0);
    let cols = Cols { ptr: y.as_mut_ptr(), n };
    // Even ranges, so that pairs of weight rows for the 2 x 4 integer tile are not split at
    // a task's end (the tile gives the one-row kernels' bits, so this is speed, not results).
    if parallel && m <= 4 {
        let sizes = super::task_sizes(n.div_ceil(2), m, rayon::current_num_threads());
        let starts: Vec<usize> = sizes.iter().scan(0, |at, &p| Some(std::mem::replace(at, *at + p))).collect();
        super::team::for_each(sizes.len(), |t| fill(2 * starts[t], (2 * (starts[t] + sizes[t])).min(n), &cols));
        return;
    }
    let per =
        if parallel { n.div_ceil(8 * rayon::current_num_threads()).clamp(8, 1024).next_multiple_of(2) } else { n };
    let f = |c: usize| fill(c * per, ((c + 1) * per).min(n), &cols);
    if parallel {
        super::team::for_each(n.div_ceil(per), f);
    } else {
        (0..n.div_ceil(per)).for_each(f);
    }
}

/// The output `[m, n]` of a product, written by column ranges from several tasks.
struct Cols {
    ptr: *mut f32,
    n: usize,
}

// SAFETY: `split_rows` hands each task a disjoint range of columns; `set` writes only there.
unsafe impl Sync for Cols {}

impl Cols {
    /// Writes element `(i, j)`.
    ///
    /// # Safety
    /// `i < m`, `j < n`, and `j` lies in the column range the calling task was handed.
    #[inline(always)]
    unsafe fn set(&self, i: usize, j: usize, v: f32) {
        debug_assert!(j < self.n);
        // SAFETY: the caller's contract: inside the buffer, and no other task writes column j.
        unsafe { *self.ptr.add(i * self.n + j) = v };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values in [-1, 1] from a xorshift generator seeded with `s`.
    fn uniform(mut s: u32) -> impl FnMut() -> f32 {
        move || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) * 2.0 - 1.0
        }
    }

    #[test]
    fn q8k_rows_on_this_cpu_equal_the_scalar_quantizer() {
        let k = 4 * qdot_k::QK_K;
        let mut rows: Vec<Vec<f32>> = Vec::new();
        let mut next = uniform(0x9e37_79b9u32);
        for scale in [1e-6f32, 0.1, 1.0, 37.0, 3e4] {
            rows.push((0..k).map(|_| next() * scale).collect());
        }
        // Ties in magnitude (the first wins, whatever its sign), a negative maximum, exact
        // halves after scaling, zero blocks, NaN and infinities.
        let mut r = vec![0.0f32; k];
        r[5] = -2.0;
        r[9] = 2.0;
        r[300] = 2.0;
        r[290] = -2.0;
        for (i, v) in r.iter_mut().enumerate().skip(512).take(256) {
            *v = (i % 255) as f32 - 127.0;
        }
        r[700] = f32::NAN;
        r[800] = f32::INFINITY;
        r[801] = 1.0;
        rows.push(r);
        rows.push((0..k).map(|i| if i % 3 == 0 { f32::NAN } else { (i as f32 * 0.37).sin() }).collect());
        rows.push((0..k).map(|i| (i as f32 + 0.5) * 127.0 / 256.0).collect());
        for (n, x) in rows.iter().enumerate() {
            let f = WeightFormat::K(KFormat::Q4K);
            let a_row = activation_row_bytes(f, k);
            let (mut want, mut got) = (vec![0u8; a_row], vec![0xAAu8; a_row]);
            qdot_k::quantize_row_q8_k(x, &mut want);
            quantize_rows(f, x, k, &mut got);
            assert_eq!(got, want, "row {n}");
        }
    }

    #[test]
    fn q8_0_rows_on_this_cpu_equal_the_scalar_quantizer() {
        let k = 8 * 32;
        let mut next = uniform(0x2545_f491u32);
        let mut rows: Vec<Vec<f32>> = Vec::new();
        for scale in [1e-38f32, 1e-6, 0.1, 1.0, 37.0, 3e4, 3e38] {
            rows.push((0..k).map(|_| next() * scale).collect());
        }
        // Exact halves and values next to them after scaling (amax 127: id 1), the largest
        // value below a half, zero blocks, NaN, infinities, and negative maxima.
        let mut r: Vec<f32> = (0..k).map(|i| (i % 64) as f32 - 31.5).collect();
        r[0] = 127.0;
        r[32] = -127.0;
        r[33] = 0.5;
        r[34] = -0.5;
        r[35] = 0.499_999_97;
        r[36] = -0.499_999_97;
        r[37] = 1.5f32.next_up();
        r[38] = 2.5f32.next_down();
        r[64..96].fill(0.0);
        r[100] = f32::NAN;
        r[130] = f32::INFINITY;
        r[170] = f32::NEG_INFINITY;
        rows.push(r);
        rows.push((0..k).map(|i| if i % 3 == 0 { f32::NAN } else { (i as f32 * 0.37).sin() }).collect());
        for (n, x) in rows.iter().enumerate() {
            let f = WeightFormat::Q8_0;
            let a_row = activation_row_bytes(f, k);
            let (mut want, mut got) = (vec![0u8; a_row], vec![0xAAu8; a_row]);
            qdot::quantize_row_q8_0(x, &mut want);
            quantize_rows(f, x, k, &mut got);
            assert_eq!(got, want, "row {n}");
        }
    }
}
