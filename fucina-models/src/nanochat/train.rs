//! nanochat's training: token streams for pretraining and for chat fine-tuning, batches of
//! windows drawn from them, the optimizer set-up (Muon for the block matrices, AdamW for the
//! embedding and the head), the learning-rate schedule, and the step loop.
//!
//! Every batch is a function of the seed, the phase and the step number only, so a run
//! resumed from a checkpoint sees exactly the batches it would have seen, and its weights
//! come out bit for bit the same.

use super::bpe::{Bpe, Encoder};
use super::data::{Qa, SplitMix};
use super::model::Gpt;
use fucina::optim::{Muon, Optimizer};
use fucina::prelude::*;

/// nanochat's special tokens, after the merges, in this order.
pub const SPECIALS: [&str; 5] =
    ["<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>"];

/// A target the loss leaves out (a position the model is not trained to predict).
pub const IGNORE: u32 = u32::MAX;

/// A trained BPE with nanochat's special tokens after it.
pub struct Vocab {
    /// Bytes and merges.
    pub bpe: Bpe,
    encoder: Encoder,
}

/// The special tokens' ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Specials {
    /// Starts every document and conversation.
    pub bos: u32,
    /// Opens a user turn.
    pub user_start: u32,
    /// Closes a user turn.
    pub user_end: u32,
    /// Opens an assistant turn.
    pub assistant_start: u32,
    /// Closes an assistant turn (where an answer stops).
    pub assistant_end: u32,
}

impl Vocab {
    /// Wraps a trained BPE.
    pub fn new(bpe: Bpe) -> Result<Vocab> {
        let encoder = bpe.encoder()?;
        Ok(Vocab { bpe, encoder })
    }

    /// Ids in all: bytes, merges and the specials.
    pub fn size(&self) -> usize {
        self.bpe.len() + SPECIALS.len()
    }

    /// The specials' ids.
    pub fn specials(&self) -> Specials {
        let b = self.bpe.len() as u32;
        Specials { bos: b, user_start: b + 1, user_end: b + 2, assistant_start: b + 3, assistant_end: b + 4 }
    }

    /// The ids of plain text (no specials).
    pub fn encode(&mut self, text: &str) -> Result<Vec<u32>> {
        self.encoder.encode(text)
    }

    /// A chat prompt: `<|bos|><|user_start|>question<|user_end|><|assistant_start|>`.
    pub fn prompt(&mut self, question: &str) -> Result<Vec<u32>> {
        let s = self.specials();
        let mut ids = vec![s.bos, s.user_start];
        ids.extend(self.encode(question)?);
        ids.extend([s.user_end, s.assistant_start]);
        Ok(ids)
    }
}

/// Tokens laid end to end, with which of them the loss predicts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stream {
    /// The ids.
    pub tokens: Vec<u32>,
    /// `train[i]`: predicting `tokens[i]` counts in the loss.
    pub train: Vec<bool>,
}

impl Stream {
    /// Appends a document: `<|bos|>` then its text, every token trained but the `<|bos|>`.
    pub fn push_document(&mut self, vocab: &mut Vocab, text: &str) -> Result<()> {
        self.tokens.push(vocab.specials().bos);
        self.train.push(false);
        let ids = vocab.encode(text)?;
        self.train.extend(std::iter::repeat_n(true, ids.len()));
        self.tokens.extend(ids);
        Ok(())
    }

    /// Appends a conversation; only the answer and its `<|assistant_end|>` are trained.
    pub fn push_conversation(&mut self, vocab: &mut Vocab, qa: &Qa) -> Result<()> {
        let prompt = vocab.prompt(&qa.question)?;
        self.train.extend(std::iter::repeat_n(false, prompt.len()));
        self.tokens.extend(prompt);
        let mut answer = vocab.encode(&qa.answer)?;
        answer.push(vocab.specials().assistant_end);
        self.train.extend(std::iter::repeat_n(true, answer.len()));
        self.tokens.extend(answer);
        Ok(())
    }

    /// Documents shuffled by `seed`, then laid end to end.
    pub fn documents(vocab: &mut Vocab, docs: &[String], seed: u64) -> Result<Stream> {
        let mut s = Stream::default();
        for i in shuffled(docs.len(), seed) {
            s.push_document(vocab, &docs[i])?;
        }
        Ok(s)
    }

    /// `epochs` passes over `qas`, each in its own shuffled order.
    pub fn conversations(vocab: &mut Vocab, qas: &[Qa], epochs: usize, seed: u64) -> Result<Stream> {
        let mut s = Stream::default();
        for e in 0..epochs {
            for i in shuffled(qas.len(), seed.wrapping_add(e as u64)) {
                s.push_conversation(vocab, &qas[i])?;
            }
        }
        Ok(s)
    }

    /// Batch `step` of a phase: `batch` windows of `seq + 1` tokens at offsets drawn from
    /// `(seed, step)`, as inputs and targets ([`IGNORE`] where a target is not trained).
    pub fn batch(&self, seed: u64, step: u64, batch: usize, seq: usize) -> Result<(Vec<u32>, Vec<u32>)> {
        if self.tokens.len() <= seq + 1 {
            return Err(FucinaError::InvalidArgument {
                op: "Stream::batch",
                msg: format!("{} tokens cannot fill a window of {}", self.tokens.len(), seq + 1),
            });
        }
        let mut rng = SplitMix(seed ^ step.wrapping_mul(0xA24B_AED4_963E_E407));
        let (mut x, mut y) = (Vec::with_capacity(batch * seq), Vec::with_capacity(batch * seq));
        for _ in 0..batch {
            let at = rng.below(self.tokens.len() - seq - 1);
            x.extend_from_slice(&self.tokens[at..at + seq]);
            for i in at + 1..=at + seq {
                y.push(if self.train[i] { self.tokens[i] } else { IGNORE });
            }
        }
        Ok((x, y))
    }
}

/// `0..n` shuffled (Fisher–Yates) by `seed`.
pub fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = SplitMix(seed);
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        v.swap(i, rng.below(i + 1));
    }
    v
}

/// One training phase's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Optimizer steps.
    pub steps: u64,
    /// Sequences per step.
    pub batch: usize,
    /// Tokens per sequence.
    pub seq: usize,
    /// Muon's learning rate for the block matrices.
    pub matrix_lr: f64,
    /// AdamW's learning rate for the embedding.
    pub embed_lr: f64,
    /// AdamW's learning rate for the head.
    pub head_lr: f64,
    /// The last fraction of the steps over which the rates fall linearly to zero.
    pub warmdown: f64,
    /// Seeds the batches.
    pub seed: u64,
}

impl Plan {
    /// The learning-rate multiplier at `step`: 1, then a linear fall to 0 over the warmdown.
    pub fn lr_factor(&self, step: u64) -> f64 {
        let down = (self.steps as f64 * self.warmdown).max(1.0);
        let left = self.steps.saturating_sub(step) as f64;
        (left / down).min(1.0)
    }

    /// nanochat's optimizer set-up: Muon (momentum 0.95, Nesterov) on the block matrices,
    /// AdamW (β 0.8, 0.95; no weight decay) on the embedding and the head at their own rates.
    pub fn optimizer(&self) -> Muon {
        let mut opt = Muon::new(self.matrix_lr, self.head_lr)
            .adamw_group("embed", self.embed_lr / self.head_lr)
            .adamw_group("head", 1.0);
        opt.adamw = opt.adamw.clone().betas(0.8, 0.95);
        opt.adamw.eps = 1e-10;
        opt
    }
}

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepReport {
    /// The step just taken (1-based).
    pub step: u64,
    /// Its loss.
    pub loss: f32,
    /// Tokens in its batch.
    pub tokens: usize,
    /// The learning-rate multiplier it used.
    pub lr_factor: f64,
}

/// Runs steps `first..plan.steps` of a phase on `stream` (after a resume, `first` is the
/// checkpoint's step), calling `after` after each step (progress, checkpoints).
pub fn run(
    ctx: &ExecContext,
    gpt: &mut Gpt,
    opt: &mut Muon,
    stream: &Stream,
    plan: &Plan,
    first: u64,
    mut after: impl FnMut(&Gpt, &Muon, StepReport) -> Result<()>,
) -> Result<()> {
    let base = (plan.matrix_lr, opt.adamw.lr);
    gpt.track_params();
    for step in first..plan.steps {
        let f = plan.lr_factor(step);
        opt.lr = base.0 * f;
        opt.adamw.lr = base.1 * f;
        let (x, y) = stream.batch(plan.seed, step, plan.batch, plan.seq)?;
        gpt.zero_grad();
        let loss = {
            let _scope = ctx.open_exec_scope();
            let loss = gpt.loss(&x, &y, plan.batch, Some(IGNORE))?;
            loss.backward(ctx)?;
            loss.to_f32_vec()[0]
        };
        if !loss.is_finite() {
            return Err(FucinaError::InvalidArgument {
                op: "nanochat::train",
                msg: format!("loss {loss} at step {step}"),
            });
        }
        opt.step(gpt)?;
        after(gpt, opt, StepReport { step: step + 1, loss, tokens: x.len(), lr_factor: f })?;
    }
    opt.lr = base.0;
    opt.adamw.lr = base.1;
    Ok(())
}

/// Bits per byte of `texts` (each a document): the summed next-token loss over every
/// token but each `<|bos|>`, in bits, over the texts' UTF-8 bytes. Windows of `seq`.
pub fn bits_per_byte(gpt: &Gpt, vocab: &mut Vocab, texts: &[String], seq: usize) -> Result<f64> {
    let mut stream = Stream::default();
    for t in texts {
        stream.push_document(vocab, t)?;
    }
    let bytes: usize = texts.iter().map(|t| t.len()).sum();
    let (mut nats, n) = (0.0f64, stream.tokens.len());
    let mut at = 0;
    while at + 1 < n {
        let len = seq.min(n - 1 - at);
        let x = &stream.tokens[at..at + len];
        let y: Vec<u32> =
            (at + 1..=at + len).map(|i| if stream.train[i] { stream.tokens[i] } else { IGNORE }).collect();
        let counted = y.iter().filter(|t| **t != IGNORE).count();
        if counted > 0 {
            let loss = gpt.loss(x, &y, 1, Some(IGNORE))?.to_f32_vec()[0] as f64;
            nats += loss * counted as f64;
        }
        at += len;
    }
    Ok(nats / std::f64::consts::LN_2 / bytes.max(1) as f64)
}
