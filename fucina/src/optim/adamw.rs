//! AdamW (decoupled weight decay), following `torch.optim.AdamW`'s arithmetic order.

use super::{update_params, ModuleMut, OptState, Optimizer, ParamState};
use crate::error::Result;
use crate::exec::ExecContext;
use rayon::prelude::*;

/// AdamW: `p *= 1 - lr*wd`; `m, v` moving averages; `p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)`.
#[derive(Debug, Clone)]
pub struct AdamW {
    /// Learning rate.
    pub lr: f64,
    /// Moving-average factors for the first and second moments.
    pub betas: (f64, f64),
    /// Added to the denominator.
    pub eps: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    state: OptState,
}

impl AdamW {
    /// AdamW with PyTorch's defaults except the learning rate (betas 0.9/0.999, eps 1e-8, wd 0.01).
    pub fn new(lr: f64) -> AdamW {
        AdamW { lr, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 0.01, state: OptState::default() }
    }

    /// With weight decay `wd`.
    pub fn weight_decay(mut self, wd: f64) -> AdamW {
        self.weight_decay = wd;
        self
    }

    /// With moment factors `b1`, `b2`.
    pub fn betas(mut self, b1: f64, b2: f64) -> AdamW {
        self.betas = (b1, b2);
        self
    }

    /// The update of one parameter (shared with Muon's fallback).
    pub(crate) fn update_one(&self, step: u64, p: &mut [f32], g: &[f32], st: &mut ParamState) {
        // Scalars in f64 as PyTorch computes them in Python, used as f32 in the tensor arithmetic.
        let (b1, b2) = self.betas;
        let t = step as f64;
        let bc1 = 1.0 - b1.powf(t);
        let bc2 = 1.0 - b2.powf(t);
        let step_size = (self.lr / bc1) as f32;
        let bc2_sqrt = bc2.sqrt() as f32;
        let decay = (1.0 - self.lr * self.weight_decay) as f32;
        let (one_b1, b2f, one_b2, eps) = ((1.0 - b1) as f32, b2 as f32, (1.0 - b2) as f32, self.eps as f32);
        let n = p.len();
        let mut m = st.remove("exp_avg").unwrap_or_else(|| vec![0.0; n]);
        let mut v = st.remove("exp_avg_sq").unwrap_or_else(|| vec![0.0; n]);
        type Chunk<'a> = (((&'a mut [f32], &'a [f32]), &'a mut [f32]), &'a mut [f32]);
        let update = |(((p, g), m), v): Chunk<'_>| {
            for i in 0..p.len() {
                p[i] *= decay;
                m[i] += (g[i] - m[i]) * one_b1;
                v[i] = v[i] * b2f + one_b2 * g[i] * g[i];
                let denom = v[i].sqrt() / bc2_sqrt + eps;
                p[i] += (-step_size * m[i]) / denom;
            }
        };
        // Elementwise and order-independent, so splitting it over the pool changes no bit.
        const CHUNK: usize = 1 << 15;
        if n >= 4 * CHUNK {
            ExecContext::current().install(|| {
                p.par_chunks_mut(CHUNK)
                    .zip(g.par_chunks(CHUNK))
                    .zip(m.par_chunks_mut(CHUNK))
                    .zip(v.par_chunks_mut(CHUNK))
                    .for_each(update)
            });
        } else {
            update((((p, g), &mut m[..]), &mut v[..]));
        }
        st.insert("exp_avg".into(), m);
        st.insert("exp_avg_sq".into(), v);
    }
}

impl Optimizer for AdamW {
    fn step(&mut self, model: &mut dyn ModuleMut) -> Result<usize> {
        let step = self.state.steps + 1;
        let this = self.clone();
        let n = update_params(model, &mut self.state.params, |_, _, p, g, st| {
            this.update_one(step, p, g, st);
            Ok(())
        })?;
        self.state.steps = step;
        Ok(n)
    }

    fn lr(&self) -> f64 {
        self.lr
    }

    fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }

    fn state(&self) -> &OptState {
        &self.state
    }

    fn state_mut(&mut self) -> &mut OptState {
        &mut self.state
    }

    fn buffer_names(&self) -> &'static [&'static str] {
        &["exp_avg", "exp_avg_sq"]
    }
}
