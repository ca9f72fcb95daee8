//! An MLP that learns XOR of the signs of two inputs (four quadrants, two classes), trained
//! with AdamW on fresh random batches: `nn::Linear` layers, cross-entropy, accuracy by
//! `argmax` — no index arithmetic anywhere.
//!
//! `cargo run --release -p fucina --example mlp`

use fucina::nn::{cross_entropy, Bias, Linear};
use fucina::optim::{AdamW, Optimizer};
use fucina::prelude::*;

axis!(pub h1);

#[derive(Module)]
struct Mlp {
    fc1: Linear<h1, r#in>,
    fc2: Linear<class, h1>,
}

impl Mlp {
    fn forward(&self, x: &Tensor<axes![batch, in]>) -> Result<Tensor<axes![batch, class]>> {
        self.fc2.forward(&self.fc1.forward(x)?.gelu()?)
    }
}

/// Points `[batch, in]` and their classes.
type Labelled = (Tensor<axes![batch, in]>, Tensor<axes![batch]>);

/// A batch of points and their labels: class 1 when the two coordinates share a sign.
fn batch(ctx: &ExecContext, n: usize) -> Result<Labelled> {
    let x: Tensor<axes![batch, in]> = ctx.randn(&[n, 2], 0.0, 1.0)?;
    let product = x.narrow::<r#in>(0, 1)?.mul(&x.narrow::<r#in>(1, 1)?)?;
    let label = product.gt_scalar(0.0)?.sum::<axes![in]>()?.cast(DType::U32)?;
    Ok((x, label))
}

fn main() -> Result<()> {
    let ctx = ExecContext::new(ExecConfig { seed: 7, ..ExecConfig::default() })?;
    let _guard = ctx.enter();
    let mut net = Mlp { fc1: Linear::init(&ctx, 2, 32, Bias::With)?, fc2: Linear::init(&ctx, 32, 2, Bias::With)? };
    net.track_params();
    let mut opt = AdamW::new(0.01);
    for step in 1..=400 {
        let (x, y) = batch(&ctx, 64)?;
        net.zero_grad();
        let loss = {
            let _scope = ctx.open_exec_scope();
            let loss = cross_entropy::<class, _>(&net.forward(&x)?, &y, None)?;
            loss.backward(&ctx)?;
            loss.to_f32_vec()[0]
        };
        opt.step(&mut net)?;
        if step % 100 == 0 {
            println!("step {step:4}  loss {loss:.4}");
        }
    }
    let (x, y) = batch(&ctx, 2000)?;
    let hits = net.forward(&x)?.argmax::<class>()?.cast(DType::F32)?.eq(&y.cast(DType::F32)?)?;
    let accuracy = hits.mean::<axes![batch]>()?.to_f32_vec()[0];
    println!("held-out accuracy {:.1} %", 100.0 * accuracy);
    if accuracy < 0.9 {
        return Err(FucinaError::InvalidArgument { op: "mlp example", msg: format!("accuracy {accuracy} < 0.9") });
    }
    Ok(())
}
