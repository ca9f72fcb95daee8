//! Muon: momentum, then the update of each 2-D weight orthogonalized by a quintic
//! Newton–Schulz iteration (Jordan et al., 2024); other parameters use AdamW.

use super::{update_params, AdamW, ModuleMut, OptState, Optimizer};
use crate::error::Result;
use crate::tensor::Tensor;

mod ax {
    crate::axis!(pub r, pub c, pub k, pub j);
}
use ax::{c, j, k, r};

/// Approximately orthogonalizes the `rows x cols` matrix `g` (row-major): five quintic
/// Newton–Schulz steps with coefficients (3.4445, -4.7750, 2.0315) on `g / (|g|_F + 1e-7)`,
/// iterating on the wide orientation.
pub fn newton_schulz5(g: &[f32], rows: usize, cols: usize, steps: usize) -> Result<Vec<f32>> {
    let (a_, b_, c_) = (3.4445f32, -4.7750f32, 2.0315f32);
    let transpose = rows > cols;
    let (m, n) = if transpose { (cols, rows) } else { (rows, cols) };
    let data: Vec<f32> = if transpose { (0..m * n).map(|i| g[(i % n) * cols + i / n]).collect() } else { g.to_vec() };
    let norm = data.iter().map(|v| v * v).sum::<f32>().sqrt();
    let mut x = Tensor::<(r, c)>::from_vec(data, &[m, n])?.scale(1.0 / (norm + 1e-7))?;
    for _ in 0..steps {
        let a = x.contract::<c, _>(&x.rename::<r, k>()?)?; // X X^T: [r, k]
        let aa = a.contract::<k, _>(&a.rename::<k, j>()?.rename::<r, k>()?)?.rename::<j, k>()?; // A A: [r, k]
        let bm = a.scale(b_)?.add(&aa.scale(c_)?)?;
        let bx = bm.contract::<k, _>(&x.rename::<r, k>()?)?; // B X: [r, c]
        x = x.scale(a_)?.add(&bx)?;
    }
    let out = x.to_f32_vec();
    Ok(if transpose { (0..rows * cols).map(|i| out[(i % cols) * n + i / cols]).collect() } else { out })
}

/// Muon for 2-D weights (momentum + Newton–Schulz), AdamW (`adamw`) for the rest.
#[derive(Debug, Clone)]
pub struct Muon {
    /// Learning rate of the orthogonalized updates.
    pub lr: f64,
    /// Momentum factor.
    pub momentum: f64,
    /// Nesterov momentum.
    pub nesterov: bool,
    /// Newton–Schulz steps.
    pub ns_steps: usize,
    /// Decoupled weight decay of the 2-D weights.
    pub weight_decay: f64,
    /// The optimizer of every parameter that is not 2-D.
    pub adamw: AdamW,
    /// Parameters (by name prefix) that take AdamW even when 2-D, each at `adamw.lr` times
    /// its factor: embeddings and output heads, which Muon is not meant for. The first
    /// matching prefix wins.
    pub adamw_groups: Vec<(String, f64)>,
    state: OptState,
}

impl Muon {
    /// Muon with momentum 0.95 (Nesterov), 5 Newton–Schulz steps, and AdamW(`adamw_lr`) for the rest.
    pub fn new(lr: f64, adamw_lr: f64) -> Muon {
        Muon {
            lr,
            momentum: 0.95,
            nesterov: true,
            ns_steps: 5,
            weight_decay: 0.0,
            adamw: AdamW::new(adamw_lr).weight_decay(0.0),
            adamw_groups: Vec::new(),
            state: OptState::default(),
        }
    }

    /// Sends the parameters whose names start with `prefix` to AdamW, at `lr_factor` times
    /// its learning rate, whatever their rank.
    ///
    /// ```
    /// use fucina::optim::Muon;
    /// let opt = Muon::new(0.02, 0.004).adamw_group("embed", 50.0).adamw_group("head", 1.0);
    /// assert_eq!(opt.adamw_groups.len(), 2);
    /// ```
    #[must_use]
    pub fn adamw_group(mut self, prefix: impl Into<String>, lr_factor: f64) -> Muon {
        self.adamw_groups.push((prefix.into(), lr_factor));
        self
    }
}

impl Optimizer for Muon {
    fn step(&mut self, model: &mut dyn ModuleMut) -> Result<usize> {
        let step = self.state.steps + 1;
        let this = self.clone();
        let n = update_params(model, &mut self.state.params, |name, shape, p, g, st| {
            if let Some((_, factor)) = this.adamw_groups.iter().find(|(pre, _)| name.starts_with(pre.as_str())) {
                let mut adamw = this.adamw.clone();
                adamw.lr *= factor;
                adamw.update_one(step, p, g, st);
                return Ok(());
            }
            if shape.len() != 2 {
                this.adamw.update_one(step, p, g, st);
                return Ok(());
            }
            let mu = this.momentum as f32;
            let buf = st.entry("momentum_buffer".into()).or_insert_with(|| vec![0.0; p.len()]);
            let mut upd = vec![0.0f32; p.len()];
            for i in 0..p.len() {
                buf[i] = buf[i] * mu + g[i];
                upd[i] = if this.nesterov { buf[i].mul_add(mu, g[i]) } else { buf[i] };
            }
            let o = newton_schulz5(&upd, shape[0], shape[1], this.ns_steps)?;
            let scale = (shape[0] as f64 / shape[1] as f64).max(1.0).sqrt();
            let (decay, alpha) = ((1.0 - this.lr * this.weight_decay) as f32, (-this.lr * scale) as f32);
            for i in 0..p.len() {
                p[i] = o[i].mul_add(alpha, p[i] * decay);
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
        let ratio = if self.lr != 0.0 { lr / self.lr } else { 1.0 };
        self.lr = lr;
        self.adamw.lr *= ratio;
    }

    fn state(&self) -> &OptState {
        &self.state
    }

    fn state_mut(&mut self) -> &mut OptState {
        &mut self.state
    }

    fn buffer_names(&self) -> &'static [&'static str] {
        &["momentum_buffer", "exp_avg", "exp_avg_sq"]
    }
}
