//! Runtime CPU feature detection and SIMD-friendly math written so LLVM vectorizes it.
//!
//! Each hot loop is an `#[inline(always)]` body instantiated twice: inside an
//! `#[target_feature(enable = "avx2,fma")]` wrapper (chosen at run time when the CPU
//! has AVX2+FMA) and as a portable build (SSE2 on x86-64, NEON on aarch64).

use std::sync::OnceLock;

/// The SIMD level chosen at run time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Portable code (whatever the target's baseline vectorizes to).
    Portable,
    /// x86-64 with AVX2 and FMA.
    Avx2Fma,
    /// x86-64 with AVX-512F (and AVX2/FMA); only the GEMM micro-kernel uses 512-bit vectors.
    Avx512,
}

impl Level {
    /// Whether AVX2 and FMA code may run.
    pub fn has_avx2(self) -> bool {
        matches!(self, Level::Avx2Fma | Level::Avx512)
    }
}

/// The best level this CPU supports (detected once).
pub fn level() -> Level {
    static LEVEL: OnceLock<Level> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        if std::env::var_os("FUCINA_NO_SIMD").is_some() {
            return Level::Portable;
        }
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma") {
                if std::arch::is_x86_feature_detected!("avx512f") && std::env::var_os("FUCINA_NO_AVX512").is_none() {
                    return Level::Avx512;
                }
                return Level::Avx2Fma;
            }
        }
        Level::Portable
    })
}

/// Multiply-add, fused where the instantiation has FMA.
pub trait MulAdd {
    /// `a * b + c`.
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
}

/// Fused multiply-add (only used inside FMA-enabled code).
pub struct Fused;
/// Separate multiply and add.
pub struct Unfused;

impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

impl MulAdd for Unfused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

const LOG2E: f32 = std::f32::consts::LOG2_E;
const LN2_HI: f32 = 0.693_359_4;
const LN2_LO: f32 = -2.121_944_4e-4;

/// `e^x` to about 2 ulp, branch-free so loops over it vectorize.
#[inline(always)]
pub fn exp<M: MulAdd>(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    let n = M::mul_add(x, LOG2E, 0.5).floor();
    let r = M::mul_add(n, -LN2_LO, M::mul_add(n, -LN2_HI, x));
    let mut p = 1.0 / 720.0;
    p = M::mul_add(p, r, 1.0 / 120.0);
    p = M::mul_add(p, r, 1.0 / 24.0);
    p = M::mul_add(p, r, 1.0 / 6.0);
    p = M::mul_add(p, r, 0.5);
    p = M::mul_add(p, r, 1.0);
    p = M::mul_add(p, r, 1.0);
    // 2^n from the bits of n + 1.5*2^23 (exact for integral |n| < 2^22): no float->int
    // conversion, which LLVM would scalarize because `as` saturates.
    let ni = (n + 12_582_912.0).to_bits().wrapping_sub(0x4B40_0000);
    let scale = f32::from_bits(ni.wrapping_add(127) << 23);
    p * scale
}

/// `tanh(x)`, with a series near zero to keep relative precision.
#[inline(always)]
pub fn tanh<M: MulAdd>(x: f32) -> f32 {
    let ax = x.abs();
    let e = exp::<M>(2.0 * ax);
    let big = 1.0 - 2.0 / (e + 1.0);
    let x2 = x * x;
    let small = x * M::mul_add(x2, M::mul_add(x2, M::mul_add(x2, -17.0 / 315.0, 2.0 / 15.0), -1.0 / 3.0), 1.0);
    let t = if ax < 0.05 { small.abs() } else { big };
    t.copysign(x)
}

/// `erf(x)` to 1.5e-7 absolute (Abramowitz & Stegun 7.1.26), branch-free.
#[inline(always)]
pub fn erf<M: MulAdd>(x: f32) -> f32 {
    let ax = x.abs();
    let t = 1.0 / M::mul_add(0.327_591_1, ax, 1.0);
    let mut p = 1.061_405_4;
    p = M::mul_add(p, t, -1.453_152_1);
    p = M::mul_add(p, t, 1.421_413_8);
    p = M::mul_add(p, t, -0.284_496_72);
    p = M::mul_add(p, t, 0.254_829_6);
    let y = 1.0 - p * t * exp::<M>(-ax * ax);
    y.copysign(x)
}

/// GELU with the erf: `0.5 x (1 + erf(x / sqrt 2))`.
#[inline(always)]
pub fn gelu<M: MulAdd>(x: f32) -> f32 {
    0.5 * x * (1.0 + erf::<M>(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// Derivative of [`gelu`]: `Phi(x) + x phi(x)`.
#[inline(always)]
pub fn gelu_deriv<M: MulAdd>(x: f32) -> f32 {
    let cdf = 0.5 * (1.0 + erf::<M>(x * std::f32::consts::FRAC_1_SQRT_2));
    let pdf = exp::<M>(-0.5 * x * x) * 0.398_942_3;
    M::mul_add(x, pdf, cdf)
}

/// `1 / (1 + e^-x)`.
#[inline(always)]
pub fn sigmoid<M: MulAdd>(x: f32) -> f32 {
    1.0 / (1.0 + exp::<M>(-x))
}

/// Dot product with 16 independent accumulators.
#[inline(always)]
pub fn dot_body<M: MulAdd>(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    let mut acc = [0.0f32; 16];
    let chunks = n / 16;
    for c in 0..chunks {
        let (ca, cb) = (&a[c * 16..c * 16 + 16], &b[c * 16..c * 16 + 16]);
        for i in 0..16 {
            acc[i] = M::mul_add(ca[i], cb[i], acc[i]);
        }
    }
    let mut s = 0.0;
    for i in chunks * 16..n {
        s = M::mul_add(a[i], b[i], s);
    }
    let mut t = [0.0f32; 8];
    for i in 0..8 {
        t[i] = acc[i] + acc[i + 8];
    }
    (t[0] + t[4]) + (t[1] + t[5]) + (t[2] + t[6]) + (t[3] + t[7]) + s
}

/// `y += alpha * x`.
#[inline(always)]
pub fn axpy_body<M: MulAdd>(alpha: f32, x: &[f32], y: &mut [f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi = M::mul_add(alpha, *xi, *yi);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    dot_body::<Fused>(a, b)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn axpy_avx2(alpha: f32, x: &[f32], y: &mut [f32]) {
    axpy_body::<Fused>(alpha, x, y)
}

/// Columns of the output a [`weighted_rows`] tile holds in registers.
pub const WEIGHTED_COLS: usize = 32;

/// `out[r] = sum_j p[r][j] * v[j]` over rows `j0..j1` of `v` (`dim` apart), for `R` output
/// rows that weigh the same range of `v`'s rows, `WEIGHTED_COLS` columns at a time held in
/// registers while `j` runs: each element accumulated from 0 in `j` order with `M::mul_add`,
/// the same sums as zeroing `out[r]` and calling [`axpy`] once per `j`. `dim` is a multiple
/// of `WEIGHTED_COLS`.
///
/// Inlined into each target-feature wrapper: compiled on its own, the body would be built for
/// the baseline target, where `Fused`'s `f32::mul_add` is a call to `fmaf` per element.
#[inline(always)]
pub fn weighted_rows_body<M: MulAdd, const R: usize>(
    p: [&[f32]; R],
    v: &[f32],
    dim: usize,
    (j0, j1): (usize, usize),
    out: [&mut [f32]; R],
) {
    let mut out = out;
    for c0 in (0..dim).step_by(WEIGHTED_COLS) {
        let mut acc = [[0.0f32; WEIGHTED_COLS]; R];
        for j in j0..j1 {
            let vr: &[f32; WEIGHTED_COLS] = match v[j * dim + c0..j * dim + c0 + WEIGHTED_COLS].try_into() {
                Ok(a) => a,
                Err(_) => return,
            };
            for (a, pr) in acc.iter_mut().zip(&p) {
                let w = pr[j];
                for (y, x) in a.iter_mut().zip(vr) {
                    *y = M::mul_add(w, *x, *y);
                }
            }
        }
        for (o, a) in out.iter_mut().zip(&acc) {
            o[c0..c0 + WEIGHTED_COLS].copy_from_slice(a);
        }
    }
}

/// A target-feature wrapper of [`weighted_rows_body`] (the body inlined into it) per
/// instruction set.
macro_rules! weighted_rows_for {
    ($name:ident, $features:literal) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = $features)]
        unsafe fn $name<const R: usize>(
            p: [&[f32]; R],
            v: &[f32],
            dim: usize,
            range: (usize, usize),
            out: [&mut [f32]; R],
        ) {
            weighted_rows_body::<Fused, R>(p, v, dim, range, out)
        }
    };
}
weighted_rows_for!(weighted_rows_avx2, "avx2,fma");
weighted_rows_for!(weighted_rows_avx512, "avx512f,avx2,fma");

/// [`weighted_rows_body`] on this CPU's widest fused path (the same bits as [`axpy`] per row
/// of `v`, on every CPU).
pub fn weighted_rows<const R: usize>(
    p: [&[f32]; R],
    v: &[f32],
    dim: usize,
    range: (usize, usize),
    out: [&mut [f32]; R],
) {
    match level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Avx512 holds only when the CPU reports AVX-512F (and AVX2 and FMA).
        Level::Avx512 => unsafe { weighted_rows_avx512::<R>(p, v, dim, range, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx2 holds only when the CPU reports AVX2 and FMA.
        l if l.has_avx2() => unsafe { weighted_rows_avx2::<R>(p, v, dim, range, out) },
        _ => weighted_rows_body::<Unfused, R>(p, v, dim, range, out),
    }
}

/// Dot product of two f32 slices (the shorter length).
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    match level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx2 holds only when the CPU reports AVX2 and FMA.
        l if l.has_avx2() => unsafe { dot_avx2(a, b) },
        _ => dot_body::<Unfused>(a, b),
    }
}

/// `y += alpha * x`.
pub fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
    match level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx2 holds only when the CPU reports AVX2 and FMA.
        l if l.has_avx2() => unsafe { axpy_avx2(alpha, x, y) },
        _ => axpy_body::<Unfused>(alpha, x, y),
    }
}

/// Whether the AVX-512 integer kernels may run: the AVX-512 level (not turned off with
/// `FUCINA_NO_AVX512`) with BW, VL and VNNI, and F16C.
pub fn has_avx512_int() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static INT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *INT.get_or_init(|| {
            level() == Level::Avx512
                && has_f16c()
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("avx512vnni")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether the AVX2 integer kernels of the interleaved Q8_0 layout may run: the AVX2 level
/// (not turned off with `FUCINA_NO_SIMD`) with F16C.
pub fn has_avx2_int() -> bool {
    level().has_avx2() && has_f16c()
}

/// Whether the CPU converts halves in hardware (F16C).
pub fn has_f16c() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static F16C: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *F16C.get_or_init(|| std::arch::is_x86_feature_detected!("f16c"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Hints the CPU to bring the cache lines of `bytes` into L2 (a no-op where there is no
/// prefetch instruction). Reads nothing and never faults.
#[inline]
pub fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for off in (0..bytes.len()).step_by(64) {
        // SAFETY: a prefetch is a hint that never faults; SSE is part of x86-64.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(bytes.as_ptr().add(off).cast())
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The register tiles of probabilities times values give the bits of zeroing each output
    /// row and adding one axpy per value row over its range (what the attention did before).
    #[test]
    fn weighted_rows_equal_one_axpy_per_row() {
        let val = |s: usize, i: usize| ((i * 7919 + s * 104_729) % 2003) as f32 / 1001.5 - 1.0;
        for (dim, n, range) in [(32, 5, (0, 5)), (128, 40, (3, 37)), (64, 9, (4, 4))] {
            let v: Vec<f32> = (0..n * dim).map(|i| val(1, i) * 3.0).collect();
            let p: Vec<Vec<f32>> = (0..2).map(|r| (0..n).map(|j| val(2 + r, j).abs()).collect()).collect();
            let want: Vec<Vec<f32>> = p
                .iter()
                .map(|pr| {
                    let mut o = vec![0.0f32; dim];
                    for j in range.0..range.1 {
                        axpy(pr[j], &v[j * dim..(j + 1) * dim], &mut o);
                    }
                    o
                })
                .collect();
            let (mut a, mut b) = (vec![f32::NAN; dim], vec![f32::NAN; dim]);
            weighted_rows::<2>([&p[0], &p[1]], &v, dim, range, [&mut a, &mut b]);
            assert!(a == want[0] && b == want[1], "dim {dim}, rows {range:?}: two rows");
            let mut c = vec![f32::NAN; dim];
            weighted_rows::<1>([&p[1]], &v, dim, range, [&mut c]);
            assert!(c == want[1], "dim {dim}, rows {range:?}: one row");
        }
    }

    #[test]
    fn exp_and_tanh_are_accurate() {
        let mut x = -20.0f32;
        while x < 20.0 {
            let e = exp::<Unfused>(x);
            assert!(((e - x.exp()) / x.exp()).abs() < 4e-7, "exp({x})");
            let t = tanh::<Unfused>(x);
            assert!((t - x.tanh()).abs() < 3e-7, "tanh({x}) {t} {}", x.tanh());
            x += 0.0137;
        }
        assert!((tanh::<Unfused>(1e-4) - 1e-4).abs() < 1e-11);
        let mut x = -6.0f32;
        while x < 6.0 {
            assert!((erf::<Unfused>(x) - crate::backend::erf(x)).abs() < 4e-7, "erf({x})");
            x += 0.0173;
        }
    }

    #[test]
    fn dot_matches_naive() {
        let a: Vec<f32> = (0..37).map(|i| i as f32 * 0.5).collect();
        let b: Vec<f32> = (0..37).map(|i| 1.0 - i as f32 * 0.25).collect();
        let naive: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        assert!((dot(&a, &b) - naive).abs() < 1e-3);
    }
}
