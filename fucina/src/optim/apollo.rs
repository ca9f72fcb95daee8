//! APOLLO (Zhu et al., 2024): AdamW-like updates with SGD-like memory. The gradient of
//! each 2-D weight `G [m, n]` is projected to `R = P G` with a random Gaussian `P [rank, m]`
//! (entries N(0, 1/rank)) regenerated from (seed, parameter, step / gap) instead of stored;
//! Adam moments live on `R`; each column of `G` is scaled by `|R~_j| / |R_j|`, where
//! `R~` is the Adam update of `R`. Other parameters use AdamW.

use super::{update_params, AdamW, ModuleMut, OptState, Optimizer};
use crate::error::Result;
use crate::rng::{box_muller, Philox};

/// APOLLO with channel-wise scaling.
#[derive(Debug, Clone)]
pub struct Apollo {
    /// Learning rate.
    pub lr: f64,
    /// Rank of the projection.
    pub rank: usize,
    /// Steps between projection refreshes.
    pub update_proj_gap: u64,
    /// Multiplier of the scaled gradient.
    pub scale: f64,
    /// Moment factors.
    pub betas: (f64, f64),
    /// Denominator epsilon.
    pub eps: f64,
    /// Decoupled weight decay.
    pub weight_decay: f64,
    /// Seed of the projections.
    pub seed: u64,
    /// The optimizer of every parameter that is not 2-D.
    pub adamw: AdamW,
    state: OptState,
}

impl Apollo {
    /// APOLLO with `rank`, projection gap 200, scale 1, betas (0.9, 0.999), eps 1e-8.
    pub fn new(lr: f64, rank: usize, seed: u64) -> Apollo {
        Apollo {
            lr,
            rank,
            update_proj_gap: 200,
            scale: 1.0,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.0,
            seed,
            adamw: AdamW::new(lr).weight_decay(0.0),
            state: OptState::default(),
        }
    }
}

/// FNV-1a of a parameter name: the projection stream of that parameter.
fn name_stream(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The projection `P [rank, m]` of parameter `name` for projection epoch `epoch`.
pub fn apollo_projection(seed: u64, name: &str, epoch: u64, rank: usize, m: usize) -> Vec<f32> {
    let g = Philox::new(seed ^ name_stream(name));
    let std = (1.0 / rank as f64).sqrt() as f32;
    (0..rank * m)
        .map(|i| {
            let b = g.at(epoch, (i / 2) as u64);
            let (z0, z1) = box_muller(b[0], b[1]);
            std * if i % 2 == 0 { z0 } else { z1 }
        })
        .collect()
}

impl Optimizer for Apollo {
    fn step(&mut self, model: &mut dyn ModuleMut) -> Result<usize> {
        let step = self.state.steps + 1;
        let this = self.clone();
        let n = update_params(model, &mut self.state.params, |name, shape, p, g, st| {
            if shape.len() != 2 {
                this.adamw.update_one(step, p, g, st);
                return Ok(());
            }
            let (m, n) = (shape[0], shape[1]);
            let rank = this.rank.min(m).max(1);
            let proj = apollo_projection(this.seed, name, (step - 1) / this.update_proj_gap.max(1), rank, m);
            // R = P G  [rank, n]
            let mut rr = vec![0.0f32; rank * n];
            for a in 0..rank {
                for i in 0..m {
                    let pv = proj[a * m + i];
                    for j2 in 0..n {
                        rr[a * n + j2] += pv * g[i * n + j2];
                    }
                }
            }
            let (b1, b2) = this.betas;
            let t = step as f64;
            let (bc1, bc2) = ((1.0 - b1.powf(t)) as f32, (1.0 - b2.powf(t)) as f32);
            let mo = st.entry("exp_avg".into()).or_insert_with(|| vec![0.0; rank * n]);
            let mut upd = vec![0.0f32; rank * n];
            for i in 0..rank * n {
                mo[i] = mo[i] * b1 as f32 + (1.0 - b1) as f32 * rr[i];
            }
            let mo = mo.clone();
            let vo = st.entry("exp_avg_sq".into()).or_insert_with(|| vec![0.0; rank * n]);
            for i in 0..rank * n {
                vo[i] = vo[i] * b2 as f32 + (1.0 - b2) as f32 * rr[i] * rr[i];
                upd[i] = (mo[i] / bc1) / ((vo[i] / bc2).sqrt() + this.eps as f32);
            }
            let (decay, alpha) = ((1.0 - this.lr * this.weight_decay) as f32, (this.lr * this.scale) as f32);
            for j2 in 0..n {
                let (mut nu, mut nr) = (0.0f32, 0.0f32);
                for a in 0..rank {
                    nu += upd[a * n + j2] * upd[a * n + j2];
                    nr += rr[a * n + j2] * rr[a * n + j2];
                }
                let s = nu.sqrt() / (nr.sqrt() + 1e-8);
                for i in 0..m {
                    p[i * n + j2] = p[i * n + j2] * decay - alpha * (g[i * n + j2] * s);
                }
            }
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
        self.adamw.lr = lr;
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
