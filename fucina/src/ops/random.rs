//! Random tensors from the context's counter-based RNG: same seed, same numbers, any thread count.

use crate::backend::Distribution;
use crate::error::Result;
use crate::exec::ExecContext;
use crate::tensor::axes::Axes;
use crate::tensor::Tensor;

impl ExecContext {
    /// Normal samples with the given mean and standard deviation.
    pub fn randn<A: Axes>(&self, shape: &[usize], mean: f32, std: f32) -> Result<Tensor<A>> {
        let n: usize = shape.iter().product();
        let base = self.reserve_rng(n.div_ceil(2) as u64);
        self.random(shape, n, base, Distribution::Normal { mean, std })
    }

    /// Uniform samples in `[lo, hi)`.
    pub fn rand_uniform<A: Axes>(&self, shape: &[usize], lo: f32, hi: f32) -> Result<Tensor<A>> {
        let n: usize = shape.iter().product();
        let base = self.reserve_rng(n.div_ceil(4) as u64);
        self.random(shape, n, base, Distribution::Uniform { lo, hi })
    }

    fn random<A: Axes>(&self, shape: &[usize], n: usize, base: u64, dist: Distribution) -> Result<Tensor<A>> {
        let rng = self.philox();
        let mut out = self.alloc(n);
        self.run(n, |k| k.fill_random(&rng, base, dist, &mut out));
        Tensor::from_raw(self.wrap_f32(out, shape)?)
    }
}

impl<A: Axes> Tensor<A> {
    /// Standard normal samples from the current context's RNG.
    pub fn randn(shape: &[usize]) -> Result<Tensor<A>> {
        ExecContext::current().randn(shape, 0.0, 1.0)
    }

    /// Uniform samples in `[lo, hi)` from the current context's RNG.
    pub fn rand_uniform(shape: &[usize], lo: f32, hi: f32) -> Result<Tensor<A>> {
        ExecContext::current().rand_uniform(shape, lo, hi)
    }
}
