//! The two-spirals problem: data, a small MLP in the DSL, a training loop, accuracy.

use fucina::nn::{cross_entropy, Linear};
use fucina::optim::Optimizer;
use fucina::prelude::*;
use fucina::rng::{box_muller, Philox};

axis!(pub h1, pub h2, pub point);

/// Points `[point, in]` (2 features) and their class (0 or 1).
pub struct Spirals {
    /// The coordinates.
    pub x: Tensor<axes![point, in]>,
    /// The class of each point.
    pub y: Vec<u32>,
}

impl Spirals {
    /// `n` points per arm, 1.5 turns each, Gaussian noise `noise`, from `seed`.
    pub fn generate(n: usize, noise: f32, seed: u64) -> Result<Spirals> {
        let g = Philox::new(seed);
        let mut xs = Vec::with_capacity(4 * n);
        let mut ys = Vec::with_capacity(2 * n);
        for class in 0..2u32 {
            for i in 0..n {
                let u = (i as f32 + 0.5) / n as f32;
                let t = 0.3 + 3.0 * std::f32::consts::PI * u;
                let phase = class as f32 * std::f32::consts::PI;
                let b = g.at(class as u64, i as u64);
                let (e1, e2) = box_muller(b[0], b[1]);
                let r = t / (3.0 * std::f32::consts::PI);
                xs.push(r * (t + phase).cos() + noise * e1);
                xs.push(r * (t + phase).sin() + noise * e2);
                ys.push(class);
            }
        }
        Ok(Spirals { x: Tensor::from_vec(xs, &[2 * n, 2])?, y: ys })
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.y.len()
    }

    /// Whether there are no points.
    pub fn is_empty(&self) -> bool {
        self.y.is_empty()
    }
}

/// A 2 -> h -> h -> 2 tanh MLP of `nn::Linear` layers.
#[derive(Module, Clone)]
pub struct SpiralNet {
    /// Layer 1.
    pub fc1: Linear<h1, r#in>,
    /// Layer 2.
    pub fc2: Linear<h2, h1>,
    /// Output layer.
    pub fc3: Linear<class, h2>,
}

impl SpiralNet {
    /// Random init from the context's RNG (std `1/sqrt(fan_in)`, the first layer's doubled;
    /// zero biases).
    pub fn new(ctx: &ExecContext, hidden: usize) -> Result<SpiralNet> {
        fn layer<O: fucina::tensor::axes::Axis + Send + Sync, I: fucina::tensor::axes::Axis + Send + Sync>(
            ctx: &ExecContext,
            rows: usize,
            cols: usize,
            std: f32,
        ) -> Result<Linear<O, I>> {
            Ok(Linear::new(ctx.randn(&[rows, cols], 0.0, std)?, Some(Tensor::zeros(&[rows])?)))
        }
        let s = |fan: usize| 1.0 / (fan as f32).sqrt();
        Ok(SpiralNet {
            fc1: layer(ctx, hidden, 2, 2.0 * s(2))?,
            fc2: layer(ctx, hidden, hidden, s(hidden))?,
            fc3: layer(ctx, 2, hidden, s(hidden))?,
        })
    }

    /// Class logits of a batch.
    pub fn forward(&self, x: &Tensor<axes![batch, in]>) -> Result<Tensor<axes![batch, class]>> {
        let a1 = self.fc1.forward(x)?.tanh()?;
        let a2 = self.fc2.forward(&a1)?.tanh()?;
        self.fc3.forward(&a2)
    }

    /// Mean cross-entropy on the points `ids` of `data` (a differentiable loss).
    pub fn loss(&self, data: &Spirals, ids: &[u32]) -> Result<Tensor<()>> {
        let idt = Tensor::<axes![batch]>::from_vec(ids.to_vec(), &[ids.len()])?;
        let xb = data.x.embedding(&idt)?;
        let targets = Tensor::<axes![batch]>::from_vec(
            ids.iter().map(|i| data.y[*i as usize]).collect::<Vec<u32>>(),
            &[ids.len()],
        )?;
        cross_entropy::<class, _>(&self.forward(&xb)?, &targets, None)
    }

    /// Fraction of `data` classified correctly.
    pub fn accuracy(&self, data: &Spirals) -> Result<f32> {
        let x = data.x.rename::<point, batch>()?;
        let guess = fucina::autograd::no_grad(|| self.forward(&x))?.argmax::<class>()?;
        let labels = Tensor::<axes![batch]>::from_vec(data.y.clone(), &[data.len()])?;
        let hits = guess.cast(DType::F32)?.eq(&labels.cast(DType::F32)?)?;
        hits.mean::<axes![batch]>()?.item()
    }
}

/// Draws a minibatch of `batch` point indices from the context's RNG.
pub fn sample_batch(ctx: &ExecContext, n: usize, batch: usize) -> Result<Vec<u32>> {
    let u = ctx.rand_uniform::<axes![batch]>(&[batch], 0.0, n as f32)?.to_f32_vec();
    Ok(u.iter().map(|v| (v.floor() as usize).min(n - 1) as u32).collect())
}

/// One gradient step on a random minibatch; returns the loss before the step.
pub fn train_step(
    ctx: &ExecContext,
    net: &mut SpiralNet,
    opt: &mut dyn Optimizer,
    data: &Spirals,
    batch: usize,
) -> Result<f32> {
    let ids = sample_batch(ctx, data.len(), batch)?;
    net.zero_grad();
    let loss = {
        let _scope = ctx.open_exec_scope();
        let loss = net.loss(data, &ids)?;
        loss.backward(ctx)?;
        loss.item()?
    };
    opt.step(net)?;
    Ok(loss)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fucina::formats::checkpoint::{load_checkpoint, save_checkpoint};
    use fucina::optim::AdamW;

    fn ctx() -> ExecContext {
        ExecContext::new(ExecConfig { seed: 11, threads: Some(2), ..ExecConfig::default() }).unwrap()
    }

    fn bits(net: &SpiralNet) -> Vec<u32> {
        net.named_params().iter().flat_map(|(_, t)| t.to_f32_vec()).map(f32::to_bits).collect()
    }

    #[test]
    fn resuming_from_a_checkpoint_is_bit_exact() {
        let data = Spirals::generate(64, 0.02, 1).unwrap();
        let n = 25;
        // 2N steps straight through.
        let c1 = ctx();
        let mut a = SpiralNet::new(&c1, 16).unwrap();
        a.track_params();
        let mut oa = AdamW::new(0.01);
        for _ in 0..2 * n {
            train_step(&c1, &mut a, &mut oa, &data, 32).unwrap();
        }
        // N steps, save, a fresh process-like start, load, N more.
        let path = std::env::temp_dir().join(format!("fucina-resume-{}.safetensors", std::process::id()));
        {
            let c2 = ctx();
            let mut b = SpiralNet::new(&c2, 16).unwrap();
            b.track_params();
            let mut ob = AdamW::new(0.01);
            for _ in 0..n {
                train_step(&c2, &mut b, &mut ob, &data, 32).unwrap();
            }
            save_checkpoint(&path, &b, &ob, &c2, &Default::default()).unwrap();
        }
        let c3 = ctx();
        let mut r = SpiralNet::new(&c3, 16).unwrap(); // different values until loaded
        r.track_params();
        let mut or = AdamW::new(0.01);
        load_checkpoint(&path, &mut r, &mut or, &c3).unwrap();
        assert_eq!(or.steps(), n as u64);
        for _ in 0..n {
            train_step(&c3, &mut r, &mut or, &data, 32).unwrap();
        }
        std::fs::remove_file(&path).ok();
        assert_eq!(bits(&a), bits(&r), "resumed run diverged from the straight run");
        assert_eq!(c1.rng_counter(), c3.rng_counter());
        // A checkpoint from another seed is refused.
        let other = ExecContext::new(ExecConfig { seed: 12, ..ExecConfig::default() }).unwrap();
        let p2 = std::env::temp_dir().join(format!("fucina-resume2-{}.safetensors", std::process::id()));
        save_checkpoint(&p2, &a, &oa, &c1, &Default::default()).unwrap();
        assert!(load_checkpoint(&p2, &mut r, &mut or, &other).unwrap_err().to_string().contains("seed"));
        std::fs::remove_file(&p2).ok();
    }

    #[test]
    fn adamw_learns_the_spirals() {
        let c = ctx();
        let train = Spirals::generate(200, 0.02, 3).unwrap();
        let test = Spirals::generate(100, 0.02, 4).unwrap();
        let mut net = SpiralNet::new(&c, 32).unwrap();
        net.track_params();
        let mut opt = AdamW::new(0.02).weight_decay(0.0);
        for _ in 0..1200 {
            train_step(&c, &mut net, &mut opt, &train, 64).unwrap();
        }
        let acc = net.accuracy(&test).unwrap();
        assert!(acc >= 0.98, "test accuracy {acc}");
    }
}

#[cfg(test)]
mod es_tests {
    use super::*;
    use fucina::optim::EvolutionStrategy;

    fn run(threads: usize) -> (Vec<u32>, f32, f32) {
        let ctx = ExecContext::new(ExecConfig { seed: 2, threads: Some(threads), ..ExecConfig::default() }).unwrap();
        let data = Spirals::generate(64, 0.02, 5).unwrap();
        let mut net = SpiralNet::new(&ctx, 8).unwrap();
        let ids: Vec<u32> = (0..data.len() as u32).collect();
        let fitness = |m: &SpiralNet| -> Result<f32> { Ok(-m.loss(&data, &ids)?.item()?) };
        let before = ctx.scope(|| fitness(&net)).unwrap();
        let mut es = EvolutionStrategy::new(0.05, 16, 0.05, 9);
        for _ in 0..30 {
            es.step(&ctx, &mut net, fitness).unwrap();
        }
        let after = ctx.scope(|| fitness(&net)).unwrap();
        let bits = net.named_params().iter().flat_map(|(_, t)| t.to_f32_vec()).map(f32::to_bits).collect();
        (bits, before, after)
    }

    #[test]
    fn es_improves_fitness_and_is_the_same_on_any_thread_count() {
        let (a, before, after) = run(1);
        let (b, _, _) = run(2);
        assert!(after > before + 0.01, "fitness {before} -> {after}");
        assert_eq!(a, b, "ES must not depend on the thread count");
    }
}
