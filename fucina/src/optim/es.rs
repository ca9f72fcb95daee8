//! Evolution strategies: antithetic Gaussian perturbations, forward passes only.
//!
//! Member `i` of step `t` perturbs every parameter by `sigma * eps`, with `eps` regenerated
//! from (seed, t, i) rather than stored; `+eps` and `-eps` are both evaluated. Members run
//! on the context's pool; results are combined in member order, so a run is the same for
//! any thread count.

use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::nn::Module;
use crate::rng::{box_muller, Philox};
use crate::storage::Buffer;
use crate::tensor::RawTensor;
use rayon::prelude::*;

/// Antithetic ES with centered-rank fitness shaping (Salimans et al., 2017).
#[derive(Debug, Clone)]
pub struct EvolutionStrategy {
    /// Perturbation scale.
    pub sigma: f32,
    /// Antithetic pairs per step (population = 2 * pairs).
    pub pairs: usize,
    /// Step size of the ascent on the fitness.
    pub lr: f32,
    /// Seed of the perturbations.
    pub seed: u64,
    steps: u64,
}

impl EvolutionStrategy {
    /// ES with the given scale, pairs, learning rate and seed.
    pub fn new(sigma: f32, pairs: usize, lr: f32, seed: u64) -> EvolutionStrategy {
        EvolutionStrategy { sigma, pairs, lr, seed, steps: 0 }
    }

    /// Steps taken.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The noise of element `k` (over all parameters in order) for member `member` of step `step`.
    fn noise(&self, step: u64, member: usize, k: usize) -> f32 {
        let g = Philox::new(self.seed);
        let b = g.at(step << 24 | member as u64, (k / 2) as u64);
        let (z0, z1) = box_muller(b[0], b[1]);
        if k.is_multiple_of(2) {
            z0
        } else {
            z1
        }
    }

    fn perturbed<M: Module + Clone>(&self, model: &M, step: u64, member: usize, sign: f32) -> Result<M> {
        let mut m = model.clone();
        let mut offset = 0usize;
        let mut err = None;
        m.visit_params_mut("", &mut |_, mut slot| {
            let v = slot.get().to_f32_vec();
            let shape = slot.get().shape().to_vec();
            let nv: Vec<f32> = v
                .iter()
                .enumerate()
                .map(|(i, x)| x + sign * self.sigma * self.noise(step, member, offset + i))
                .collect();
            offset += v.len();
            if let Err(e) = RawTensor::from_buffer(Buffer::F32(nv), &shape).and_then(|t| slot.set(t)) {
                err = Some(e);
            }
        });
        err.map_or(Ok(m), Err)
    }

    /// One step: evaluates `fitness` (higher is better) on every member, moves `model`
    /// along the shaped estimate of the fitness gradient; returns the mean member fitness.
    pub fn step<M, F>(&mut self, ctx: &ExecContext, model: &mut M, fitness: F) -> Result<f32>
    where
        M: Module + Clone + Send + Sync,
        F: Fn(&M) -> Result<f32> + Sync,
    {
        if self.pairs == 0 {
            return Err(FucinaError::InvalidArgument { op: "ES step", msg: "pairs must be positive".into() });
        }
        let step = self.steps;
        let this = &*self;
        let results: Vec<Result<(f32, f32)>> = ctx.install(|| {
            (0..this.pairs)
                .into_par_iter()
                .map(|i| {
                    let _current = ctx.enter();
                    let up = fitness(&this.perturbed(model, step, i, 1.0)?)?;
                    let down = fitness(&this.perturbed(model, step, i, -1.0)?)?;
                    Ok((up, down))
                })
                .collect()
        });
        let f: Vec<(f32, f32)> = results.into_iter().collect::<Result<_>>()?;
        // Centered ranks in [-0.5, 0.5] over all 2 * pairs evaluations.
        let mut all: Vec<(f32, usize)> =
            f.iter().flat_map(|(u, d)| [*u, *d]).enumerate().map(|(i, v)| (v, i)).collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
        let n = all.len();
        let mut rank = vec![0.0f32; n];
        for (r, (_, i)) in all.iter().enumerate() {
            rank[*i] = r as f32 / (n - 1).max(1) as f32 - 0.5;
        }
        let weights: Vec<f32> = (0..self.pairs).map(|i| rank[2 * i] - rank[2 * i + 1]).collect();
        let scale = self.lr / (2.0 * self.pairs as f32 * self.sigma);
        let mut offset = 0usize;
        let mut err = None;
        model.visit_params_mut("", &mut |_, mut slot| {
            let mut v = slot.get().to_f32_vec();
            let shape = slot.get().shape().to_vec();
            for (k, x) in v.iter_mut().enumerate() {
                let g: f32 = weights.iter().enumerate().map(|(i, w)| w * this.noise(step, i, offset + k)).sum();
                *x += scale * g;
            }
            offset += v.len();
            if let Err(e) = RawTensor::from_buffer(Buffer::F32(v), &shape).and_then(|t| slot.set(t)) {
                err = Some(e);
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        self.steps += 1;
        Ok(f.iter().map(|(u, d)| u + d).sum::<f32>() / (2 * self.pairs) as f32)
    }
}
