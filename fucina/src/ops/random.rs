//! Random tensors from the context's counter-based RNG: same seed, same numbers, any thread count.

use crate::backend::native::par;
use crate::error::Result;
use crate::exec::ExecContext;
use crate::rng::{box_muller, u32_to_open01};
use crate::tensor::axes::Axes;
use crate::tensor::Tensor;
use rayon::prelude::*;

const CHUNK: usize = 4096;

impl ExecContext {
    /// Normal samples with the given mean and standard deviation.
    pub fn randn<A: Axes>(&self, shape: &[usize], mean: f32, std: f32) -> Result<Tensor<A>> {
        let n: usize = shape.iter().product();
        let base = self.reserve_rng(n.div_ceil(2) as u64);
        let rng = self.philox();
        let mut out = self.alloc(n);
        let fill = |(c, chunk): (usize, &mut [f32])| {
            for (j, v) in chunk.iter_mut().enumerate() {
                let i = c * CHUNK + j;
                let b = rng.at(0, base + (i / 2) as u64);
                let (z0, z1) = box_muller(b[0], b[1]);
                *v = mean + std * if i.is_multiple_of(2) { z0 } else { z1 };
            }
        };
        self.run(n, |_| {
            if par(n) {
                out.par_chunks_mut(CHUNK).enumerate().for_each(fill)
            } else {
                out.chunks_mut(CHUNK).enumerate().for_each(fill)
            }
        });
        Tensor::from_raw(self.wrap_f32(out, shape)?)
    }

    /// Uniform samples in `[lo, hi)`.
    pub fn rand_uniform<A: Axes>(&self, shape: &[usize], lo: f32, hi: f32) -> Result<Tensor<A>> {
        let n: usize = shape.iter().product();
        let base = self.reserve_rng(n.div_ceil(4) as u64);
        let rng = self.philox();
        let mut out = self.alloc(n);
        let fill = |(c, chunk): (usize, &mut [f32])| {
            for (j, v) in chunk.iter_mut().enumerate() {
                let i = c * CHUNK + j;
                let b = rng.at(0, base + (i / 4) as u64);
                let u = 1.0 - u32_to_open01(b[i % 4]);
                *v = lo + (hi - lo) * u;
            }
        };
        self.run(n, |_| {
            if par(n) {
                out.par_chunks_mut(CHUNK).enumerate().for_each(fill)
            } else {
                out.chunks_mut(CHUNK).enumerate().for_each(fill)
            }
        });
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
