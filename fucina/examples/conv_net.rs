//! A 1-D convolutional net that tells sine, square and sawtooth waves apart at random
//! frequency, phase and amplitude, with noise: two `nn::Conv1d` layers named by their
//! channel and time axes, max pooling along time, a mean over time and a linear classifier.
//!
//! `cargo run --release -p fucina --example conv_net`

use fucina::nn::{cross_entropy, Bias, Conv1d, Linear};
use fucina::ops::{Conv1dOptions, Padding};
use fucina::optim::{AdamW, Optimizer};
use fucina::prelude::*;

axis!(pub c1, pub c2);

const LEN: usize = 64;

#[derive(Module)]
struct ConvNet {
    conv1: Conv1d<c1, channel, time>,
    conv2: Conv1d<c2, c1, time>,
    fc: Linear<class, c2>,
}

impl ConvNet {
    fn forward(&self, x: &Tensor<axes![batch, channel, time]>) -> Result<Tensor<axes![batch, class]>> {
        let h = self.conv1.forward(x)?.relu()?.max_pool1d::<time>(2, 2, 0)?;
        let h = self.conv2.forward(&h)?.relu()?.mean::<axes![time]>()?;
        self.fc.forward(&h)
    }
}

/// Signals `[batch, channel, time]` and their classes.
type Labelled = (Tensor<axes![batch, channel, time]>, Tensor<axes![batch]>);

/// `n` waveforms `[batch, channel = 1, time]` and their classes (0 sine, 1 square, 2 saw).
fn waves(rng: &mut u64, n: usize) -> Result<Labelled> {
    let mut uniform = || {
        *rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (*rng >> 40) as f32 / (1u64 << 24) as f32
    };
    let (mut x, mut y) = (Vec::with_capacity(n * LEN), Vec::with_capacity(n));
    for i in 0..n {
        let class = (i % 3) as u32;
        let (freq, phase, amp) = (2.0 + 4.0 * uniform(), uniform(), 0.5 + uniform());
        for t in 0..LEN {
            let p = (freq * t as f32 / LEN as f32 + phase).fract();
            let v = match class {
                0 => (2.0 * std::f32::consts::PI * p).sin(),
                1 => {
                    if p < 0.5 {
                        1.0
                    } else {
                        -1.0
                    }
                }
                _ => 2.0 * p - 1.0,
            };
            x.push(amp * v + 0.2 * (uniform() - 0.5));
        }
        y.push(class);
    }
    Ok((Tensor::from_vec(x, &[n, 1, LEN])?, Tensor::from_vec(y, &[n])?))
}

fn main() -> Result<()> {
    let ctx = ExecContext::new(ExecConfig { seed: 9, ..ExecConfig::default() })?;
    let _guard = ctx.enter();
    let same = Conv1dOptions { dilation: 1, padding: Padding::Same };
    let mut net = ConvNet {
        conv1: Conv1d::init(&ctx, 1, 8, 5, same, Bias::With)?,
        conv2: Conv1d::init(&ctx, 8, 16, 5, Conv1dOptions { dilation: 2, ..same }, Bias::With)?,
        fc: Linear::init(&ctx, 16, 3, Bias::With)?,
    };
    net.track_params();
    let mut opt = AdamW::new(1e-2);
    let mut rng = 42u64;
    for step in 1..=300 {
        let (x, y) = waves(&mut rng, 48)?;
        net.zero_grad();
        let loss = {
            let _scope = ctx.open_exec_scope();
            let loss = cross_entropy::<class, _>(&net.forward(&x)?, &y, None)?;
            loss.backward(&ctx)?;
            loss.to_f32_vec()[0]
        };
        opt.step(&mut net)?;
        if step % 50 == 0 {
            println!("step {step:4}  loss {loss:.4}");
        }
    }
    let (x, y) = waves(&mut rng, 600)?;
    let hits = net.forward(&x)?.argmax::<class>()?.cast(DType::F32)?.eq(&y.cast(DType::F32)?)?;
    let accuracy = hits.mean::<axes![batch]>()?.to_f32_vec()[0];
    println!("held-out accuracy {:.1} % (chance 33.3 %)", 100.0 * accuracy);
    if accuracy < 0.9 {
        return Err(FucinaError::InvalidArgument { op: "conv example", msg: format!("accuracy {accuracy} < 0.9") });
    }
    Ok(())
}
