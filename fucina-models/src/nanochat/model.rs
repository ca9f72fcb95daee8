//! nanochat's GPT as a trainable [`Module`]: f32 parameters, a forward over a batch of
//! equal-length sequences that records its graph inside an exec scope, and the loss.
//!
//! The same weights, exported to GGUF (`super::export`), run for inference in the one
//! decoder of the Llama family ([`crate::qwen3::Qwen3`]), where nanochat's differences are
//! config data.

use super::config::GptConfig;
use crate::llm::rope::Rope;
use crate::qwen3::model::{kv_flat, q_flat};
use fucina::nn::{cross_entropy, Embedding, Linear};
use fucina::ops::{attention, Mask, RopeStyle};
use fucina::prelude::*;

/// Attention and MLP projections of one block: [`Linear`] layers without biases (and no norm
/// weights: nanochat's RMSNorms are parameter-free).
#[derive(Module)]
pub struct GptBlock {
    /// `[q_flat, hidden]` query projection.
    pub q: Linear<q_flat, hidden>,
    /// `[kv_flat, hidden]` key projection.
    pub k: Linear<kv_flat, hidden>,
    /// `[kv_flat, hidden]` value projection.
    pub v: Linear<kv_flat, hidden>,
    /// `[hidden, q_flat]` output projection.
    pub o: Linear<hidden, q_flat>,
    /// `[ffn, hidden]` MLP input (`fc1`).
    pub up: Linear<ffn, hidden>,
    /// `[hidden, ffn]` MLP output (`fc2`).
    pub down: Linear<hidden, ffn>,
}

/// nanochat's GPT. Parameter names: `embed.weight`, `blocks.L.{q,k,v,o,up,down}.weight`,
/// `head.weight`.
#[derive(Module)]
pub struct Gpt {
    /// Hyper-parameters.
    #[module(skip)]
    pub config: GptConfig,
    /// `[vocab, hidden]` token embedding.
    pub embed: Embedding<vocab, hidden>,
    /// The blocks, first to last.
    pub blocks: Vec<GptBlock>,
    /// `[vocab, hidden]` output head (untied).
    pub head: Linear<vocab, hidden>,
}

/// nanochat's rotation: `rotate_half` with flipped signs, i.e. each pair `(x_i, x_{i+d/2})`
/// turns by −θ: the usual halves-style tables with negated frequencies.
pub fn nanochat_rope(config: &GptConfig) -> Result<Rope> {
    Ok(Rope::new(config.head_dim(), config.rope_theta)?.map_freqs(|_, f| -f))
}

impl Gpt {
    /// A freshly initialized model in the current context's RNG stream, as nanochat
    /// initializes: embedding N(0, 1); q, k, v and MLP input N(0, 1/√hidden); the output
    /// projections (attention and MLP) zero; the head N(0, 0.001²).
    pub fn init(ctx: &ExecContext, config: GptConfig) -> Result<Gpt> {
        config.validate()?;
        let (h, hd) = (config.hidden, config.head_dim());
        let (qd, kvd) = (config.heads * hd, config.kv_heads * hd);
        let std = 1.0 / (h as f32).sqrt();
        let embed = Embedding::new(ctx.randn(&[config.vocab, h], 0.0, 1.0)?);
        let blocks = (0..config.layers)
            .map(|_| -> Result<GptBlock> {
                Ok(GptBlock {
                    q: Linear::new(ctx.randn(&[qd, h], 0.0, std)?, None),
                    k: Linear::new(ctx.randn(&[kvd, h], 0.0, std)?, None),
                    v: Linear::new(ctx.randn(&[kvd, h], 0.0, std)?, None),
                    o: Linear::new(Tensor::zeros(&[h, qd])?, None),
                    up: Linear::new(ctx.randn(&[config.ffn, h], 0.0, std)?, None),
                    down: Linear::new(Tensor::zeros(&[h, config.ffn])?, None),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let head = Linear::new(ctx.randn(&[config.vocab, h], 0.0, 0.001)?, None);
        Ok(Gpt { config, embed, blocks, head })
    }

    /// Logits `[seq, vocab]` of `sequences` sequences of equal length laid end to end in
    /// `tokens` (each attends only to itself, from position 0). Records its graph inside an
    /// exec scope.
    pub fn forward(&self, tokens: &[u32], sequences: usize) -> Result<Tensor<axes![seq, vocab]>> {
        let c = &self.config;
        let bad = |msg: String| FucinaError::InvalidArgument { op: "Gpt::forward", msg };
        if sequences == 0 || tokens.is_empty() || !tokens.len().is_multiple_of(sequences) {
            return Err(bad(format!("{} tokens do not split into {sequences} sequences", tokens.len())));
        }
        let t = tokens.len() / sequences;
        if t > c.context {
            return Err(bad(format!("sequences of {t} exceed the context of {}", c.context)));
        }
        let (n, hd, nkv) = (tokens.len(), c.head_dim(), c.kv_heads);
        let g = c.heads / nkv;
        let (cos, sin) = nanochat_rope(c)?.tables(0, t, 1.0)?;
        let (cos, sin) = if sequences == 1 {
            (cos, sin)
        } else {
            let (cs, ss) = (vec![&cos; sequences], vec![&sin; sequences]);
            (Tensor::concat::<seq>(&cs)?, Tensor::concat::<seq>(&ss)?)
        };
        let ids = Tensor::<axes![seq]>::from_vec(tokens.to_vec(), &[n])?;
        let mut x = self.embed.forward(&ids)?.rms_norm::<hidden>(None, c.eps)?;
        let scale = 1.0 / (hd as f32).sqrt();
        for b in &self.blocks {
            let h = x.rms_norm::<hidden>(None, c.eps)?;
            let q = b.q.forward(&h)?.split_axis::<q_flat, axes![kv_head, group, head_dim]>(&[nkv, g, hd])?;
            let k = b.k.forward(&h)?.split_axis::<kv_flat, axes![kv_head, head_dim]>(&[nkv, hd])?;
            let v = b.v.forward(&h)?.split_axis::<kv_flat, axes![kv_head, head_dim]>(&[nkv, hd])?;
            let q = q.rope(&cos, &sin, RopeStyle::Halves)?.rms_norm::<head_dim>(None, c.eps)?;
            let k = k.rope(&cos, &sin, RopeStyle::Halves)?.rms_norm::<head_dim>(None, c.eps)?;
            // All sequences in one call: each attends causally to itself (a block-diagonal mask).
            let kv = |x: &Tensor<axes![seq, kv_head, head_dim]>| -> Result<Tensor<axes![kv_head, kv_seq, head_dim]>> {
                x.rename::<seq, kv_seq>()?.permute()
            };
            let mask = if sequences == 1 { Mask::Causal(0) } else { Mask::Blocks { len: t } };
            let a = attention(&q, &kv(&k)?, &kv(&v)?, scale, mask)?;
            let a = a.merge_axes::<axes![kv_head, group, head_dim], q_flat>()?;
            x = x.add(&b.o.forward(&a)?)?;
            let h = x.rms_norm::<hidden>(None, c.eps)?;
            let u = b.up.forward(&h)?.relu()?;
            x = x.add(&b.down.forward(&u.mul(&u)?)?)?;
        }
        let x = x.rms_norm::<hidden>(None, c.eps)?;
        let logits = self.head.forward(&x)?;
        match c.softcap {
            Some(cap) => logits.softcap(cap),
            None => Ok(logits),
        }
    }

    /// Mean next-token cross-entropy of `inputs` against `targets` (same layout as
    /// [`Gpt::forward`]); targets equal to `ignore` (e.g. prompt positions in SFT) are left out.
    pub fn loss(&self, inputs: &[u32], targets: &[u32], sequences: usize, ignore: Option<u32>) -> Result<Tensor<()>> {
        if inputs.len() != targets.len() {
            return Err(FucinaError::InvalidArgument {
                op: "Gpt::loss",
                msg: format!("{} inputs against {} targets", inputs.len(), targets.len()),
            });
        }
        let logits = self.forward(inputs, sequences)?;
        let y = Tensor::<axes![seq]>::from_vec(targets.to_vec(), &[targets.len()])?;
        cross_entropy::<vocab, _>(&logits, &y, ignore)
    }
}
