//! Parakeet's transducer heads, as `transformers`' `ParakeetForTDT` and `ParakeetForRNNT`
//! compute and decode them: the encoder's output projected to the joint width
//! (`encoder_projector`); a prediction network (token embedding, stacked LSTM, projection)
//! that reads the last emitted token; a joint network `head(act(enc_t + dec))` whose outputs
//! are the token logits, followed for TDT by one logit per allowed duration.
//!
//! Greedy decoding walks the encoder frames: at frame `t` the joint network picks a token
//! (argmax of the token logits) and, for TDT, a duration (argmax of the duration logits); a
//! token is emitted and fed to the prediction network, a blank is not; `t` advances by the
//! duration (a blank by at least 1). RNN-T is the same walk with a blank advancing one frame
//! and a token none. A frame emits at most `max_symbols_per_step` tokens in a row before it
//! is left (as NeMo and `transformers`' RNN-T decoding do), and the walk stops after
//! `max_symbols_per_step * frames - 1` steps, the size of `generate`'s output buffer.

use super::encoder::{bad, config_text, get, linear, ParakeetConfig, ParakeetEncoder};
use super::{frame, mel};
use fucina::formats::safetensors::SafeTensors;
use fucina::nn::{Embedding, Linear, Lstm, LstmCell};
use fucina::prelude::*;
use serde_json::Value;

axis!(pub joint);

/// Which transducer a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransducerKind {
    /// Token-and-duration transducer (`parakeet_tdt`).
    Tdt,
    /// RNN transducer (`parakeet_rnnt`).
    Rnnt,
}

/// The joint network's activation (`hidden_act`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JointActivation {
    /// `relu` (Parakeet's).
    Relu,
    /// `tanh`.
    Tanh,
    /// `sigmoid`.
    Sigmoid,
    /// `silu` / `swish`.
    Silu,
}

/// The prediction and joint networks' sizes and the decoding rule.
#[derive(Debug, Clone, PartialEq)]
pub struct TransducerConfig {
    /// TDT or RNN-T.
    pub kind: TransducerKind,
    /// Width of the prediction network and the joint network (`decoder_hidden_size`).
    pub decoder_hidden: usize,
    /// LSTM layers (`num_decoder_layers`).
    pub decoder_layers: usize,
    /// The frames each duration logit stands for (TDT; empty for RNN-T).
    pub durations: Vec<usize>,
    /// Tokens a frame may emit in a row before it is left.
    pub max_symbols_per_step: usize,
    /// The joint network's activation.
    pub activation: JointActivation,
    /// The token the prediction network reads first (`decoder_start_token_id`, else the blank).
    pub start_token: u32,
}

impl TransducerConfig {
    /// Reads the transducer part of a `ParakeetTDTConfig` / `ParakeetRNNTConfig` (JSON), with
    /// `vocab` and `blank` from the shared part ([`ParakeetConfig::from_json`]).
    pub fn from_json(text: &str, vocab: usize, blank: u32) -> Result<TransducerConfig> {
        let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("config: {e}")))?;
        let kind = match v["model_type"].as_str() {
            Some("parakeet_tdt") => TransducerKind::Tdt,
            Some("parakeet_rnnt") => TransducerKind::Rnnt,
            other => return Err(bad(format!("config: model_type {other:?} is not a Parakeet transducer"))),
        };
        let u = |k: &str, max: usize, default: Option<usize>| -> Result<usize> {
            match v.get(k).filter(|x| !x.is_null()) {
                None => default.ok_or_else(|| bad(format!("config: `{k}` is missing"))),
                Some(x) => x
                    .as_u64()
                    .and_then(|n| usize::try_from(n).ok())
                    .filter(|n| (1..=max).contains(n))
                    .ok_or_else(|| bad(format!("config: `{k}` = {x} (need 1 to {max})"))),
            }
        };
        let durations = match kind {
            TransducerKind::Rnnt => Vec::new(),
            TransducerKind::Tdt => {
                let list = v["durations"].as_array().ok_or_else(|| bad("config: `durations` is missing".into()))?;
                let d = list
                    .iter()
                    .map(|x| x.as_u64().filter(|&n| n <= 1024).map(|n| n as usize))
                    .collect::<Option<Vec<usize>>>()
                    .ok_or_else(|| bad(format!("config: durations {list:?} (need counts up to 1024)")))?;
                if d.is_empty() || d.len() > 64 {
                    return Err(bad(format!("config: {} durations (need 1 to 64)", d.len())));
                }
                d
            }
        };
        let activation = match v["hidden_act"].as_str().unwrap_or("relu") {
            "relu" => JointActivation::Relu,
            "tanh" => JointActivation::Tanh,
            "sigmoid" => JointActivation::Sigmoid,
            "silu" | "swish" => JointActivation::Silu,
            a => return Err(bad(format!("config: joint activation `{a}` (relu, tanh, sigmoid or silu)"))),
        };
        let start = match v.get("decoder_start_token_id").filter(|x| !x.is_null()) {
            None => blank,
            Some(x) => x
                .as_u64()
                .filter(|&n| (n as usize) < vocab)
                .ok_or_else(|| bad(format!("config: decoder_start_token_id {x} outside a vocabulary of {vocab}")))?
                as u32,
        };
        Ok(TransducerConfig {
            kind,
            decoder_hidden: u("decoder_hidden_size", 1 << 14, None)?,
            decoder_layers: u("num_decoder_layers", 64, None)?,
            durations,
            max_symbols_per_step: u("max_symbols_per_step", 1024, Some(10))?,
            activation,
            start_token: start,
        })
    }
}

/// One step of greedy decoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The encoder frame it read.
    pub frame: usize,
    /// The token picked (the blank included).
    pub token: u32,
    /// The frames it advanced.
    pub duration: usize,
}

/// Parakeet's encoder with a TDT or RNN-T head.
#[derive(Debug, Clone)]
pub struct ParakeetTransducer {
    /// The encoder's sizes, the vocabulary and the blank.
    pub config: ParakeetConfig,
    /// The prediction and joint networks' sizes and the decoding rule.
    pub transducer: TransducerConfig,
    /// The encoder.
    pub encoder: ParakeetEncoder,
    encoder_projector: Linear<joint, hidden>,
    embedding: Embedding<vocab, r#in>,
    lstm: Lstm,
    decoder_projector: Linear<joint, hidden>,
    head: Linear<vocab, joint>,
}

impl ParakeetTransducer {
    /// Loads a `ParakeetForTDT` or `ParakeetForRNNT` from a safetensors file (`transformers`'
    /// names, the config in the metadata).
    pub fn load(st: &SafeTensors) -> Result<ParakeetTransducer> {
        let text = config_text(st)?;
        let c = ParakeetConfig::from_json(text)?;
        let t = TransducerConfig::from_json(text, c.vocab, c.blank)?;
        let encoder = ParakeetEncoder::load(st, c.clone())?;
        let d = t.decoder_hidden;
        let encoder_projector = linear(st, "encoder_projector", d, c.hidden, true)?;
        let embedding = Embedding::new(get(st, "decoder.embedding.weight", &[c.vocab, d])?);
        let layers = (0..t.decoder_layers)
            .map(|k| {
                let name = |n: &str| format!("decoder.lstm.{n}_l{k}");
                let input =
                    Linear::new(get(st, &name("weight_ih"), &[4 * d, d])?, Some(get(st, &name("bias_ih"), &[4 * d])?));
                let recurrent =
                    Linear::new(get(st, &name("weight_hh"), &[4 * d, d])?, Some(get(st, &name("bias_hh"), &[4 * d])?));
                LstmCell::new(input, recurrent)
            })
            .collect::<Result<Vec<_>>>()?;
        let lstm = Lstm::new(layers)?;
        let decoder_projector = linear(st, "decoder.decoder_projector", d, d, true)?;
        let head = linear(st, "joint.head", c.vocab + t.durations.len(), d, true)?;
        Ok(ParakeetTransducer {
            config: c,
            transducer: t,
            encoder,
            encoder_projector,
            embedding,
            lstm,
            decoder_projector,
            head,
        })
    }

    /// The encoder's output projected to the joint width, `[seq, joint]`, for the valid
    /// frames of `features`.
    pub fn project(&self, features: &Tensor<(frame, mel)>) -> Result<Tensor<(seq, joint)>> {
        self.encoder_projector.forward(&self.encoder.encode(features)?)
    }

    /// The prediction network after reading `token`: its projected output `[batch, joint]`.
    fn predict(&self, token: u32, states: &mut [fucina::nn::LstmState]) -> Result<Tensor<(batch, joint)>> {
        let ids = Tensor::<(batch,)>::from_vec(vec![token], &[1])?;
        let h = self.lstm.step(&self.embedding.forward(&ids)?, states)?;
        self.decoder_projector.forward(&h)
    }

    /// The joint network's output `[batch, vocab]` (token logits, then TDT's duration logits)
    /// for encoder frame `enc` and prediction `dec`, both `[batch, joint]`.
    pub fn joint(&self, enc: &Tensor<(batch, joint)>, dec: &Tensor<(batch, joint)>) -> Result<Tensor<(batch, vocab)>> {
        let z = enc.add(dec)?;
        let z = match self.transducer.activation {
            JointActivation::Relu => z.relu()?,
            JointActivation::Tanh => z.tanh()?,
            JointActivation::Sigmoid => z.sigmoid()?,
            JointActivation::Silu => z.silu()?,
        };
        self.head.forward(&z)
    }

    /// Greedy decoding of `projected` ([`ParakeetTransducer::project`]): every step, blanks
    /// included, in order.
    pub fn decode(&self, projected: &Tensor<(seq, joint)>) -> Result<Vec<Step>> {
        self.decode_with(projected, |_, _| {})
    }

    /// [`ParakeetTransducer::decode`], calling `on_step` with each step and the joint
    /// network's output it was picked from.
    pub fn decode_with(
        &self,
        projected: &Tensor<(seq, joint)>,
        on_step: impl FnMut(&Step, &[f32]),
    ) -> Result<Vec<Step>> {
        let frames = projected.shape()[0];
        let max_steps = self.transducer.max_symbols_per_step.saturating_mul(frames).saturating_sub(1);
        let mut walk = self.start_walk()?;
        self.walk(&mut walk, projected, 0, frames, max_steps, on_step)
    }

    /// A greedy walk at frame 0, the prediction network having read the start token.
    pub fn start_walk(&self) -> Result<Walk> {
        let mut states = self.lstm.zero_state(1)?;
        let dec = self.predict(self.transducer.start_token, &mut states)?;
        Ok(Walk { states, dec, at: 0, in_a_row: 0, steps: 0 })
    }

    /// Continues `walk` over encoder frames `first..first + rows` of the projected output
    /// (`projected` holds them, row 0 being frame `first`) until it reaches frame `end` (at
    /// most `first + rows`) or has taken `max_steps` steps in all; the steps taken. The walk
    /// may stop past `end` (a duration longer than the frames left): the next call goes on
    /// from there. Used whole by [`ParakeetTransducer::decode`] and chunk by chunk in
    /// streaming ([`super::stream`]).
    pub fn walk(
        &self,
        walk: &mut Walk,
        projected: &Tensor<(seq, joint)>,
        first: usize,
        end: usize,
        max_steps: usize,
        mut on_step: impl FnMut(&Step, &[f32]),
    ) -> Result<Vec<Step>> {
        let (c, t) = (&self.config, &self.transducer);
        let rows = projected.shape()[0];
        if walk.at < first || end > first + rows {
            return Err(FucinaError::InvalidArgument {
                op: "parakeet transducer walk",
                msg: format!("at frame {}, given frames {first}..{} up to {end}", walk.at, first + rows),
            });
        }
        let mut steps = Vec::new();
        while walk.at < end && walk.steps < max_steps {
            let enc = projected.narrow::<seq>(walk.at - first, 1)?.rename::<seq, batch>()?;
            let out = self.joint(&enc, &walk.dec)?.to_f32_vec();
            let token = argmax(&out[..c.vocab]) as u32;
            let predicted = match t.kind {
                TransducerKind::Tdt => t.durations[argmax(&out[c.vocab..])],
                TransducerKind::Rnnt => usize::from(token == c.blank),
            };
            let duration = advance(token == c.blank, predicted, &mut walk.in_a_row, t.max_symbols_per_step);
            let step = Step { frame: walk.at, token, duration };
            on_step(&step, &out);
            steps.push(step);
            walk.steps += 1;
            if token != c.blank {
                walk.dec = self.predict(token, &mut walk.states)?;
            }
            walk.at += duration;
        }
        Ok(steps)
    }
}

/// A greedy walk in progress ([`ParakeetTransducer::walk`]): the prediction network's state
/// and output, and the frame reached.
#[derive(Debug, Clone)]
pub struct Walk {
    states: Vec<fucina::nn::LstmState>,
    dec: Tensor<(batch, joint)>,
    /// The next frame to read.
    pub at: usize,
    in_a_row: usize,
    /// Steps taken so far.
    pub steps: usize,
}

/// The frames a step advances: its predicted duration, at least 1 for a blank, and 1 where
/// the frame has now emitted `max_symbols` tokens in a row (`in_a_row` counts them).
fn advance(blank: bool, predicted: usize, in_a_row: &mut usize, max_symbols: usize) -> usize {
    let duration = if blank { predicted.max(1) } else { predicted };
    *in_a_row = if duration == 0 { *in_a_row + 1 } else { 0 };
    if *in_a_row >= max_symbols {
        *in_a_row = 0;
        return 1;
    }
    duration
}

/// The index of the first largest value (as `torch.argmax`), 0 for an empty slice.
fn argmax(v: &[f32]) -> usize {
    let mut best = 0;
    for (i, x) in v.iter().enumerate() {
        if *x > v[best] {
            best = i;
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::{advance, argmax};

    #[test]
    fn a_blank_always_advances_and_a_frame_emits_at_most_max_symbols() {
        let mut n = 0;
        assert_eq!(advance(true, 0, &mut n, 3), 1, "a blank of duration 0 moves on");
        assert_eq!(advance(true, 2, &mut n, 3), 2);
        assert_eq!(advance(false, 3, &mut n, 3), 3);
        assert_eq!((advance(false, 0, &mut n, 3), n), (0, 1), "a token of duration 0 stays");
        assert_eq!((advance(false, 0, &mut n, 3), n), (0, 2));
        assert_eq!((advance(false, 0, &mut n, 3), n), (1, 0), "the third in a row leaves the frame");
        assert_eq!((advance(false, 0, &mut n, 3), n), (0, 1));
        assert_eq!((advance(true, 1, &mut n, 3), n), (1, 0), "a blank resets the count");
    }

    #[test]
    fn argmax_takes_the_first_largest() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, -1.0]), 1);
        assert_eq!(argmax(&[]), 0);
    }
}
