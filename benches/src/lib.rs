//! Shared helpers for the benchmarks: reference GEMMs and a side-by-side timer.

use std::time::Instant;

/// `c = a * b` for row-major `m x k` and `k x n` f32 matrices, by `matrixmultiply`.
pub fn matrixmultiply_sgemm(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
    // SAFETY: the slices hold m*k, k*n and m*n elements with the row-major strides passed here.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            k as isize,
            1,
            b.as_ptr(),
            n as isize,
            1,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

#[cfg(feature = "openblas")]
mod openblas {
    #[link(name = "openblas")]
    extern "C" {
        fn cblas_sgemm(
            order: i32,
            ta: i32,
            tb: i32,
            m: i32,
            n: i32,
            k: i32,
            alpha: f32,
            a: *const f32,
            lda: i32,
            b: *const f32,
            ldb: i32,
            beta: f32,
            c: *mut f32,
            ldc: i32,
        );
        fn openblas_set_num_threads(n: i32);
    }

    /// Sets OpenBLAS's thread count.
    pub fn set_threads(n: usize) {
        // SAFETY: a plain setter in the OpenBLAS C API.
        unsafe { openblas_set_num_threads(n as i32) }
    }

    /// `c = a * b`, row-major, by OpenBLAS.
    pub fn sgemm(m: usize, n: usize, k: usize, a: &[f32], b: &[f32], c: &mut [f32]) {
        const ROW_MAJOR: i32 = 101;
        const NO_TRANS: i32 = 111;
        // SAFETY: the slices hold m*k, k*n and m*n elements with the leading dimensions passed here.
        unsafe {
            cblas_sgemm(
                ROW_MAJOR,
                NO_TRANS,
                NO_TRANS,
                m as i32,
                n as i32,
                k as i32,
                1.0,
                a.as_ptr(),
                k as i32,
                b.as_ptr(),
                n as i32,
                0.0,
                c.as_mut_ptr(),
                n as i32,
            )
        }
    }
}

#[cfg(feature = "openblas")]
pub use openblas::{set_threads as openblas_set_threads, sgemm as openblas_sgemm};

/// Median seconds per call of each closure, measured in interleaved rounds (A, B, A, B, ...).
///
/// Each timed call follows an untimed call of the same closure, so thread pools that
/// spin after finishing (OpenBLAS, rayon) do not slow down the next contestant's timed call.
pub fn interleaved_median(rounds: usize, fs: &mut [&mut dyn FnMut()]) -> Vec<f64> {
    for f in fs.iter_mut() {
        f();
    }
    let mut times = vec![Vec::with_capacity(rounds); fs.len()];
    for _ in 0..rounds {
        for (i, f) in fs.iter_mut().enumerate() {
            f();
            let t = Instant::now();
            f();
            times[i].push(t.elapsed().as_secs_f64());
        }
    }
    times
        .into_iter()
        .map(|mut v| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        })
        .collect()
}

pub mod train_models;
