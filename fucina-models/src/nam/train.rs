//! Training a WaveNet amp model with the library's autograd and AdamW: random segments of a
//! (dry input, amp output) recording, the DSL forward, MSE on the samples whose receptive
//! field lies inside the segment, and ESR on held-out audio. The result exports to `.nam`.
//!
//! For a self-contained demonstration, [`synthetic_amp`] makes the recording: a guitar-like
//! synthetic signal (decaying plucked harmonics, chords, noise bursts, silence) through a
//! simple "amp" (pre-gain, tanh waveshaper, one-pole tone filter).

use super::wavenet::WaveNet;
use fucina::formats::nam::{Activation, LayerArray, WaveNetConfig};
use fucina::optim::{AdamW, Optimizer};
use fucina::prelude::*;
use fucina::rng::{box_muller, u32_to_open01, Philox};

/// A compact WaveNet for training demonstrations: one layer array of 8 channels, dilations
/// 1..64 (receptive field 255 samples), tanh, a 1-channel head with bias.
pub fn compact_config() -> WaveNetConfig {
    WaveNetConfig { layers: vec![array(1, 8, &[1, 2, 4, 8, 16, 32, 64], 1, true)], head_scale: 0.02 }
}

/// One classic layer array (kernel 3, tanh, no gating, 1x1 head).
pub fn array(input: usize, channels: usize, dilations: &[usize], head: usize, head_bias: bool) -> LayerArray {
    LayerArray {
        input_size: input,
        condition_size: 1,
        channels,
        bottleneck: channels,
        kernel_sizes: vec![3; dilations.len()],
        dilations: dilations.to_vec(),
        activations: vec![Activation::Tanh; dilations.len()],
        gating: vec![None; dilations.len()],
        head_out: head,
        head_kernel: 1,
        head_bias,
    }
}

/// The classic NAM presets by name: `standard`, `lite`, `feather`, `nano`, or `compact`.
pub fn preset(name: &str) -> Option<WaveNetConfig> {
    let d1 = [1, 2, 4, 8, 16, 32, 64];
    let d2 = [128, 256, 512, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512];
    let dstd = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];
    let two = |c1: usize, c2: usize, a: &[usize], b: &[usize]| WaveNetConfig {
        layers: vec![array(1, c1, a, c2, false), array(c1, c2, b, 1, true)],
        head_scale: 0.02,
    };
    Some(match name {
        "standard" => two(16, 8, &dstd, &dstd),
        "lite" => two(12, 6, &d1, &d2),
        "feather" => two(8, 4, &d1, &d2),
        "nano" => two(4, 2, &d1, &d2),
        "compact" => compact_config(),
        _ => return None,
    })
}

/// Random initial weights for `config` (normal, scaled by fan-in; biases zero), drawn from
/// Philox(`seed`).
pub fn init_weights(config: &WaveNetConfig, seed: u64) -> Vec<f32> {
    let rng = Philox::new(seed);
    let mut i = 0u64;
    let mut normal = || {
        let r = rng.at(7, i);
        i += 1;
        box_muller(r[0], r[1]).0
    };
    let mut w = Vec::with_capacity(config.weight_count());
    let mut matrix = |w: &mut Vec<f32>, n: usize, fan_in: usize| {
        let s = (1.0 / fan_in.max(1) as f32).sqrt();
        w.extend((0..n).map(|_| s * normal()));
    };
    for a in &config.layers {
        matrix(&mut w, a.channels * a.input_size, a.input_size);
        for (l, &k) in a.kernel_sizes.iter().enumerate() {
            let m = a.mid(l);
            matrix(&mut w, m * a.channels * k, a.channels * k);
            w.extend(std::iter::repeat_n(0.0, m));
            matrix(&mut w, m * a.condition_size, a.condition_size);
            matrix(&mut w, a.channels * a.bottleneck, a.bottleneck);
            w.extend(std::iter::repeat_n(0.0, a.channels));
        }
        matrix(&mut w, a.head_out * a.bottleneck * a.head_kernel, a.bottleneck * a.head_kernel);
        if a.head_bias {
            w.extend(std::iter::repeat_n(0.0, a.head_out));
        }
    }
    w.push(config.head_scale);
    w
}

/// A synthetic guitar-like dry signal of `n` samples at 48 kHz (plucks with harmonics and
/// exponential decay, some chords, short noise bursts, gaps of silence), from `seed`.
pub fn synthetic_guitar(n: usize, seed: u64) -> Vec<f32> {
    let rng = Philox::new(seed);
    let mut x = vec![0.0f32; n];
    let mut k = 0u64;
    let mut uni = || {
        k += 1;
        u32_to_open01(rng.at(11, k)[0])
    };
    let rate = 48_000.0f32;
    let mut t = 0usize;
    while t < n {
        let len = (4_000.0 + 20_000.0 * uni()) as usize;
        let notes = if uni() < 0.3 { 3 } else { 1 };
        let amp = 0.05 + 0.6 * uni();
        for _ in 0..notes {
            let f0 = 82.0 * 2f32.powf(3.0 * uni());
            let decay = 2.0 + 8.0 * uni();
            for h in 1..=6 {
                let a = amp / notes as f32 / h as f32;
                for i in 0..len.min(n - t) {
                    let s = i as f32 / rate;
                    x[t + i] +=
                        a * (-(decay * h as f32 * 0.5) * s).exp() * (std::f32::consts::TAU * f0 * h as f32 * s).sin();
                }
            }
        }
        if uni() < 0.2 {
            for i in 0..(len / 8).min(n - t) {
                let r = rng.at(13, (t + i) as u64);
                x[t + i] += 0.1 * amp * box_muller(r[0], r[1]).0;
            }
        }
        t += len + if uni() < 0.25 { (2_000.0 * uni()) as usize } else { 0 };
    }
    x
}

/// The synthetic "amp": pre-gain, `tanh` waveshaper, then a one-pole low-pass tone filter
/// (`y[t] = (1 - p) s[t] + p y[t-1]`), all causal.
pub fn synthetic_amp(x: &[f32], gain: f32, pole: f32) -> Vec<f32> {
    let mut y = Vec::with_capacity(x.len());
    let mut prev = 0.0f32;
    for v in x {
        let s = (gain * v).tanh();
        prev = (1.0 - pole) * s + pole * prev;
        y.push(prev);
    }
    y
}

/// Error-to-signal ratio `sum (y - t)^2 / sum t^2`.
pub fn esr(pred: &[f32], target: &[f32]) -> f64 {
    let num: f64 = pred.iter().zip(target).map(|(p, t)| ((p - t) as f64).powi(2)).sum();
    let den: f64 = target.iter().map(|t| (*t as f64).powi(2)).sum();
    num / den.max(1e-30)
}

/// Training settings.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// Optimizer steps.
    pub steps: usize,
    /// Segments per step.
    pub batch: usize,
    /// Samples per segment that enter the loss (each also gets its receptive field of context).
    pub segment: usize,
    /// Learning rate (AdamW, no weight decay), decayed by cosine to 10% over the run.
    pub lr: f64,
    /// Seed of the initial weights and of the segment draws.
    pub seed: u64,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions { steps: 600, batch: 8, segment: 2048, lr: 4e-3, seed: 1 }
    }
}

/// Trains a WaveNet of shape `config` to map `x` to `y` (equal lengths). `on_step(step,
/// loss)` is called after each step. Returns the model.
pub fn train(
    ctx: &ExecContext,
    config: &WaveNetConfig,
    x: &[f32],
    y: &[f32],
    opts: &TrainOptions,
    mut on_step: impl FnMut(usize, f32),
) -> Result<WaveNet> {
    if x.len() != y.len() {
        return Err(FucinaError::InvalidArgument { op: "nam::train", msg: "input and target lengths differ".into() });
    }
    let mut net = WaveNet::from_weights(config, &init_weights(config, opts.seed))?;
    net.track_params();
    let rf = net.receptive_field();
    let span = opts.segment + rf - 1;
    if x.len() <= span {
        return Err(FucinaError::InvalidArgument {
            op: "nam::train",
            msg: format!("{} samples are too few for segments of {span}", x.len()),
        });
    }
    let mut opt = AdamW::new(opts.lr).weight_decay(0.0);
    let rng = Philox::new(opts.seed ^ 0x5eed);
    for step in 0..opts.steps {
        let progress = step as f64 / opts.steps.max(1) as f64;
        opt.set_lr(opts.lr * (0.1 + 0.9 * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())));
        let mut xb = Vec::with_capacity(opts.batch * span);
        let mut yb = Vec::with_capacity(opts.batch * opts.segment);
        for b in 0..opts.batch {
            let r = rng.at(step as u64, b as u64)[0] as usize;
            let start = r % (x.len() - span);
            xb.extend_from_slice(&x[start..start + span]);
            yb.extend_from_slice(&y[start + rf - 1..start + span]);
        }
        net.zero_grad();
        let loss = {
            let _scope = ctx.open_exec_scope();
            let xt = Tensor::<axes![batch, time]>::from_vec(xb, &[opts.batch, span])?;
            let yt = Tensor::<axes![batch, time]>::from_vec(yb, &[opts.batch, opts.segment])?;
            let pred = net.forward(&xt)?.narrow::<time>(rf - 1, opts.segment)?;
            let loss = fucina::nn::mse_loss(&pred, &yt)?;
            loss.backward(ctx)?;
            loss.item()?
        };
        opt.step(&mut net)?;
        on_step(step, loss);
    }
    Ok(net)
}
