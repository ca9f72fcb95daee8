//! Helpers shared by the integration tests: contexts for both backends and tolerances.
#![allow(dead_code)]

use fucina::prelude::*;
use fucina::rng::Philox;

/// A scalar and a native context (native on 2 threads, like CI).
pub fn contexts() -> (ExecContext, ExecContext) {
    (
        ExecContext::with_backend(BackendKind::Scalar, 1).unwrap(),
        ExecContext::with_backend(BackendKind::Native, 2).unwrap(),
    )
}

/// Deterministic pseudo-random values in [-1, 1) for test inputs.
pub fn values(seed: u64, n: usize) -> Vec<f32> {
    let g = Philox::new(seed);
    (0..n).map(|i| (g.at(1, i as u64)[0] as f64 / 2f64.powi(31) - 1.0) as f32).collect()
}

/// A small deterministic integer stream for picking sizes.
pub struct Sizes(u64, Philox);

impl Sizes {
    /// A stream seeded with `seed`.
    pub fn new(seed: u64) -> Sizes {
        Sizes(0, Philox::new(seed))
    }
    /// A size in `lo..=hi`.
    pub fn pick(&mut self, lo: usize, hi: usize) -> usize {
        self.0 += 1;
        lo + (self.1.at(2, self.0)[0] as usize) % (hi - lo + 1)
    }
}

/// Asserts `|a - b| <= atol + rtol * |b|` elementwise, with a message naming the first miss.
pub fn assert_close(what: &str, a: &[f32], b: &[f32], atol: f32, rtol: f32) {
    assert_eq!(a.len(), b.len(), "{what}: lengths differ");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let ok = (x - y).abs() <= atol + rtol * y.abs() || (x.is_nan() && y.is_nan()) || x == y;
        assert!(ok, "{what}: element {i}: {x} vs {y} (atol {atol}, rtol {rtol})");
    }
}
