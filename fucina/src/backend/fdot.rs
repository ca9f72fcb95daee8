//! Dot products of a float weight row stored as little-endian bytes (f32, f16 or bf16, as
//! in a GGUF file) with an f32 activation row: the mat-vec kernels of unquantized weights.
//! The scalar versions are the spec; the AVX2 versions (F16C for f16) must match them to
//! rounding.

use half::{bf16, f16};

/// The float formats a weight row may be stored in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatRow {
    /// 4-byte IEEE floats.
    F32,
    /// 2-byte IEEE halves.
    F16,
    /// 2-byte brain floats.
    BF16,
}

impl FloatRow {
    /// Bytes per value.
    pub fn width(self) -> usize {
        match self {
            FloatRow::F32 => 4,
            FloatRow::F16 | FloatRow::BF16 => 2,
        }
    }

    /// Value `i` of the row `w`.
    pub fn get(self, w: &[u8], i: usize) -> f32 {
        match self {
            FloatRow::F32 => f32::from_le_bytes([w[4 * i], w[4 * i + 1], w[4 * i + 2], w[4 * i + 3]]),
            FloatRow::F16 => f16::from_le_bytes([w[2 * i], w[2 * i + 1]]).to_f32(),
            FloatRow::BF16 => bf16::from_le_bytes([w[2 * i], w[2 * i + 1]]).to_f32(),
        }
    }
}

/// `sum_i w[i] * a[i]` in the obvious order (f64 accumulation is not used: this is the
/// spec of the f32 kernels, which accumulate in f32 lanes).
pub fn dot_float_scalar(fmt: FloatRow, w: &[u8], a: &[f32]) -> f32 {
    debug_assert_eq!(w.len(), a.len() * fmt.width());
    let mut acc = [0.0f32; 8];
    for (i, x) in a.iter().enumerate() {
        acc[i % 8] += fmt.get(w, i) * x;
    }
    acc.iter().sum()
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::FloatRow;
    use crate::backend::x86::hsum256;
    use std::arch::x86_64::*;

    /// Eight weights starting at value `i`, widened to f32.
    #[inline(always)]
    unsafe fn load8(fmt: FloatRow, w: &[u8], i: usize) -> __m256 {
        // SAFETY: (all arms) the caller guarantees values i..i+8 lie inside `w`.
        unsafe {
            match fmt {
                FloatRow::F32 => _mm256_loadu_ps(w.as_ptr().add(4 * i) as *const f32),
                FloatRow::F16 => _mm256_cvtph_ps(_mm_loadu_si128(w.as_ptr().add(2 * i) as *const __m128i)),
                FloatRow::BF16 => {
                    let h = _mm_loadu_si128(w.as_ptr().add(2 * i) as *const __m128i);
                    _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                }
            }
        }
    }

    /// AVX2 float-row dot product, four accumulators of eight lanes.
    ///
    /// # Safety
    /// The CPU must have AVX2, FMA and F16C; `w` holds `a.len()` values of `fmt`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_float(fmt: FloatRow, w: &[u8], a: &[f32]) -> f32 {
        // SAFETY: the caller's guarantees are the kernels'.
        unsafe {
            match fmt {
                FloatRow::F32 => dot_f32(w, a),
                FloatRow::F16 => dot_f16(w, a),
                FloatRow::BF16 => dot_bf16(w, a),
            }
        }
    }

    /// [`dot_float`] for f32 rows (the format is a constant inside, so the loads specialize).
    ///
    /// # Safety
    /// As for [`dot_float`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_f32(w: &[u8], a: &[f32]) -> f32 {
        // SAFETY: the caller's guarantees are the body's.
        unsafe { body(FloatRow::F32, w, a) }
    }

    /// [`dot_float`] for f16 rows.
    ///
    /// # Safety
    /// As for [`dot_float`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_f16(w: &[u8], a: &[f32]) -> f32 {
        // SAFETY: the caller's guarantees are the body's.
        unsafe { body(FloatRow::F16, w, a) }
    }

    /// [`dot_float`] for bf16 rows.
    ///
    /// # Safety
    /// As for [`dot_float`].
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn dot_bf16(w: &[u8], a: &[f32]) -> f32 {
        // SAFETY: the caller's guarantees are the body's.
        unsafe { body(FloatRow::BF16, w, a) }
    }

    /// Widens a float row to f32, eight values at a time.
    ///
    /// # Safety
    /// The CPU must have AVX2 and F16C; `w` holds `out.len()` values of `fmt`.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub unsafe fn decode_row(fmt: FloatRow, w: &[u8], out: &mut [f32]) {
        let n = out.len();
        let mut i = 0;
        while i + 8 <= n {
            // SAFETY: values i..i+8 lie in `w` and `out`.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr().add(i), load8(fmt, w, i)) };
            i += 8;
        }
        for (k, o) in out.iter_mut().enumerate().skip(i) {
            *o = fmt.get(w, k);
        }
    }

    #[inline(always)]
    unsafe fn body(fmt: FloatRow, w: &[u8], a: &[f32]) -> f32 {
        // SAFETY: the caller guarantees the CPU features this fn enables (its contract); every
        // memory access below is in bounds as argued where it happens.
        unsafe {
            let n = a.len();
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i + 32 <= n {
                for (j, s) in acc.iter_mut().enumerate() {
                    let k = i + 8 * j;
                    // SAFETY: k + 8 <= n values lie in both rows.
                    let (wv, av) = { (load8(fmt, w, k), _mm256_loadu_ps(a.as_ptr().add(k))) };
                    *s = _mm256_fmadd_ps(wv, av, *s);
                }
                i += 32;
            }
            while i + 8 <= n {
                // SAFETY: i + 8 <= n values lie in both rows.
                let (wv, av) = { (load8(fmt, w, i), _mm256_loadu_ps(a.as_ptr().add(i))) };
                acc[0] = _mm256_fmadd_ps(wv, av, acc[0]);
                i += 8;
            }
            let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
            // SAFETY: AVX is enabled for this function.
            let mut total = { hsum256(s) };
            for (k, x) in a.iter().enumerate().skip(i) {
                total += fmt.get(w, k) * x;
            }
            total
        }
    }
}

/// Decodes a float row (`w` holds `out.len()` values of `fmt`) to f32, with F16C where
/// the CPU has it.
pub fn decode_row(fmt: FloatRow, w: &[u8], out: &mut [f32]) {
    assert_eq!(w.len(), out.len() * fmt.width(), "decode_row: lengths differ");
    #[cfg(target_arch = "x86_64")]
    if super::native::simd::level().has_avx2() && super::native::simd::has_f16c() {
        // SAFETY: checked above: the CPU reports AVX2 and F16C; lengths match.
        unsafe { avx2::decode_row(fmt, w, out) };
        return;
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = fmt.get(w, i);
    }
}

/// A row kernel: one float weight row (bytes) times one f32 activation row.
pub type RowDot = unsafe fn(&[u8], &[f32]) -> f32;

/// The fastest available kernel for float rows of `fmt`, chosen once per matrix product.
/// Calling it is safe when the weight row holds as many values as the activation row.
pub fn row_kernel(fmt: FloatRow) -> RowDot {
    #[cfg(target_arch = "x86_64")]
    if super::native::simd::level().has_avx2() && super::native::simd::has_f16c() {
        return match fmt {
            FloatRow::F32 => avx2::dot_f32,
            FloatRow::F16 => avx2::dot_f16,
            FloatRow::BF16 => avx2::dot_bf16,
        };
    }
    match fmt {
        FloatRow::F32 => |w, a| dot_float_scalar(FloatRow::F32, w, a),
        FloatRow::F16 => |w, a| dot_float_scalar(FloatRow::F16, w, a),
        FloatRow::BF16 => |w, a| dot_float_scalar(FloatRow::BF16, w, a),
    }
}

/// Float-row dot product on the best available path.
pub fn dot_float(fmt: FloatRow, w: &[u8], a: &[f32]) -> f32 {
    assert_eq!(w.len(), a.len() * fmt.width(), "dot_float: row lengths differ");
    #[cfg(target_arch = "x86_64")]
    if super::native::simd::level().has_avx2() && super::native::simd::has_f16c() {
        // SAFETY: checked above: the CPU reports AVX2, FMA and F16C; lengths match.
        return unsafe { avx2::dot_float(fmt, w, a) };
    }
    dot_float_scalar(fmt, w, a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_matches_scalar_for_every_format_and_tail() {
        let mut s = 12345u32;
        let mut r = || {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        };
        for n in [1usize, 7, 8, 31, 32, 33, 100, 1024] {
            let a: Vec<f32> = (0..n).map(|_| r()).collect();
            let wv: Vec<f32> = (0..n).map(|_| r()).collect();
            for fmt in [FloatRow::F32, FloatRow::F16, FloatRow::BF16] {
                let w: Vec<u8> = match fmt {
                    FloatRow::F32 => wv.iter().flat_map(|v| v.to_le_bytes()).collect(),
                    FloatRow::F16 => wv.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect(),
                    FloatRow::BF16 => wv.iter().flat_map(|v| bf16::from_f32(*v).to_le_bytes()).collect(),
                };
                let exact: f64 = (0..n).map(|i| fmt.get(&w, i) as f64 * a[i] as f64).sum();
                let (sc, nat) = (dot_float_scalar(fmt, &w, &a), dot_float(fmt, &w, &a));
                let tol = 1e-5 * (n as f64).sqrt();
                assert!((sc as f64 - exact).abs() < tol, "{fmt:?} n={n}: scalar {sc} vs {exact}");
                assert!((nat as f64 - exact).abs() < tol, "{fmt:?} n={n}: native {nat} vs {exact}");
            }
        }
    }
}
