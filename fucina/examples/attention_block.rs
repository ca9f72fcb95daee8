//! A pre-norm transformer block (causal multi-head attention + a GELU MLP, residuals) that
//! learns to copy the token seen three positions back — a task only attention can solve.
//! Each step accumulates the gradients of several sequences before one AdamW update.
//!
//! `cargo run --release -p fucina --example attention_block`

use fucina::nn::{cross_entropy, Affine, Bias, Embedding, Linear, MultiHeadAttention, RmsNorm};
use fucina::ops::Mask;
use fucina::optim::{AdamW, Optimizer};
use fucina::prelude::*;

axis!(pub ffn);

const VOCAB: usize = 16;
const LEN: usize = 24;
const LAG: usize = 3;
const DIM: usize = 32;

#[derive(Module)]
struct Block {
    tokens: Embedding<vocab, hidden>,
    positions: Tensor<axes![seq, hidden]>,
    norm1: RmsNorm<hidden>,
    attn: MultiHeadAttention,
    norm2: RmsNorm<hidden>,
    up: Linear<ffn, hidden>,
    down: Linear<hidden, ffn>,
    head: Linear<vocab, hidden>,
}

impl Block {
    fn forward(&self, ids: &Tensor<axes![seq]>) -> Result<Tensor<axes![seq, vocab]>> {
        let x = self.tokens.forward(ids)?.add(&self.positions)?;
        let x = x.add(&self.attn.forward(&self.norm1.forward(&x)?, Mask::Causal(0))?)?;
        let x = x.add(&self.down.forward(&self.up.forward(&self.norm2.forward(&x)?)?.gelu()?)?)?;
        self.head.forward(&x)
    }
}

/// Token ids and the targets to predict, both along `seq`.
type Sequence = (Tensor<axes![seq]>, Tensor<axes![seq]>);

/// A random sequence and its targets: the token `LAG` places back (position `< LAG`: ignored).
fn example(rng: &mut u64) -> Result<Sequence> {
    let ids: Vec<u32> = (0..LEN)
        .map(|_| {
            *rng ^= *rng << 13;
            *rng ^= *rng >> 7;
            *rng ^= *rng << 17;
            (*rng % VOCAB as u64) as u32
        })
        .collect();
    let targets = (0..LEN).map(|t| if t < LAG { u32::MAX } else { ids[t - LAG] }).collect();
    Ok((Tensor::from_vec(ids, &[LEN])?, Tensor::from_vec(targets, &[LEN])?))
}

fn main() -> Result<()> {
    let ctx = ExecContext::new(ExecConfig { seed: 5, ..ExecConfig::default() })?;
    let _guard = ctx.enter();
    let mut block = Block {
        tokens: Embedding::init(&ctx, VOCAB, DIM)?,
        positions: ctx.randn(&[LEN, DIM], 0.0, 1.0)?,
        norm1: RmsNorm::new(DIM, 1e-6, Affine::Learned)?,
        attn: MultiHeadAttention::init(&ctx, DIM, 2, 2, 8)?,
        norm2: RmsNorm::new(DIM, 1e-6, Affine::Learned)?,
        up: Linear::init(&ctx, DIM, 4 * DIM, Bias::With)?,
        down: Linear::init(&ctx, 4 * DIM, DIM, Bias::With)?,
        head: Linear::init(&ctx, DIM, VOCAB, Bias::Without)?,
    };
    block.track_params();
    let mut opt = AdamW::new(1e-2);
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    for step in 1..=300 {
        block.zero_grad();
        let mut loss_sum = 0.0;
        for _ in 0..4 {
            // Gradient accumulation: each backward adds to the parameters' gradients.
            let (ids, targets) = example(&mut rng)?;
            let _scope = ctx.open_exec_scope();
            let loss = cross_entropy::<vocab, _>(&block.forward(&ids)?, &targets, Some(u32::MAX))?.scale(0.25)?;
            loss.backward(&ctx)?;
            loss_sum += loss.to_f32_vec()[0];
        }
        opt.step(&mut block)?;
        if step % 100 == 0 {
            println!("step {step:4}  loss {loss_sum:.4}");
        }
    }
    let (mut right, mut total) = (0.0, 0.0);
    for _ in 0..20 {
        let (ids, targets) = example(&mut rng)?;
        let guess = block.forward(&ids)?.argmax::<vocab>()?.cast(DType::F32)?;
        let hits = guess.eq(&targets.cast(DType::F32)?)?.narrow::<seq>(LAG, LEN - LAG)?;
        right += hits.sum::<axes![seq]>()?.to_f32_vec()[0];
        total += (LEN - LAG) as f32;
    }
    println!("held-out accuracy {:.1} % (chance {:.1} %)", 100.0 * right / total, 100.0 / VOCAB as f32);
    if right / total < 0.9 {
        return Err(FucinaError::InvalidArgument {
            op: "attention example",
            msg: format!("accuracy {}", right / total),
        });
    }
    Ok(())
}
