//! Stochastic gradient descent with momentum, Nesterov momentum and weight decay
//! (the update rule of `torch.optim.SGD` with dampening 0).

use super::{update_params, ModuleMut, OptState, Optimizer};
use crate::error::Result;

/// SGD: `b = mu*b + g` (with `g += wd*p`), then `p -= lr * (nesterov ? g + mu*b : b)`.
#[derive(Debug, Clone)]
pub struct Sgd {
    /// Learning rate.
    pub lr: f64,
    /// Momentum factor (0: plain SGD).
    pub momentum: f64,
    /// Use Nesterov momentum.
    pub nesterov: bool,
    /// L2 weight decay added to the gradient.
    pub weight_decay: f64,
    state: OptState,
}

impl Sgd {
    /// SGD with the given learning rate and momentum.
    pub fn new(lr: f64, momentum: f64) -> Sgd {
        Sgd { lr, momentum, nesterov: false, weight_decay: 0.0, state: OptState::default() }
    }

    /// With Nesterov momentum.
    pub fn nesterov(mut self, on: bool) -> Sgd {
        self.nesterov = on;
        self
    }

    /// With L2 weight decay.
    pub fn weight_decay(mut self, wd: f64) -> Sgd {
        self.weight_decay = wd;
        self
    }
}

impl Optimizer for Sgd {
    fn step(&mut self, model: &mut dyn ModuleMut) -> Result<usize> {
        let (lr, mu, nesterov, wd) = (self.lr as f32, self.momentum as f32, self.nesterov, self.weight_decay as f32);
        let n = update_params(model, &mut self.state.params, |_, _, p, g, st| {
            let use_buf = mu != 0.0;
            let fresh = !st.contains_key("momentum_buffer");
            let buf = st.entry("momentum_buffer".into()).or_insert_with(|| vec![0.0; p.len()]);
            // PyTorch's CPU `add_(x, alpha)` is a fused multiply-add; so are these.
            for i in 0..p.len() {
                let mut d = g[i];
                if wd != 0.0 {
                    d = p[i].mul_add(wd, d);
                }
                if use_buf {
                    buf[i] = if fresh { d } else { buf[i] * mu + d };
                    d = if nesterov { buf[i].mul_add(mu, d) } else { buf[i] };
                }
                p[i] = d.mul_add(-lr, p[i]);
            }
            if !use_buf {
                st.remove("momentum_buffer");
            }
            Ok(())
        })?;
        self.state.steps += 1;
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
        &["momentum_buffer"]
    }
}
