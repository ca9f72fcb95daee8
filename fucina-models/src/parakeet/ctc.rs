//! Parakeet's CTC head (`transformers`' `ParakeetForCTC`): a per-frame vocabulary projection
//! of the encoder's output, decoded greedily (argmax per frame, repeats collapsed, blanks
//! dropped).

use super::encoder::{config_text, pointwise, unit, ParakeetConfig, ParakeetEncoder};
use super::{frame, mel};
use fucina::formats::safetensors::SafeTensors;
use fucina::nn::Linear;
use fucina::prelude::*;

/// Parakeet's encoder with its CTC head.
#[derive(Debug, Clone)]
pub struct ParakeetCtc {
    /// Sizes.
    pub config: ParakeetConfig,
    /// The encoder.
    pub encoder: ParakeetEncoder,
    head: Linear<vocab, hidden>,
}

impl ParakeetCtc {
    /// Loads a `ParakeetForCTC` from a safetensors file (`transformers`' names, the config in
    /// the metadata).
    pub fn load(st: &SafeTensors) -> Result<ParakeetCtc> {
        let c = ParakeetConfig::from_json(config_text(st)?)?;
        let encoder = ParakeetEncoder::load(st, c.clone())?;
        let (w, b) = pointwise::<vocab, hidden>(st, "ctc_head", c.vocab, c.hidden)?;
        let head = Linear::new(w.sum::<unit>()?, Some(b));
        Ok(ParakeetCtc { config: c, encoder, head })
    }

    /// The encoder's output `[seq, hidden]` ([`ParakeetEncoder::encode`]).
    pub fn encode(&self, features: &Tensor<(frame, mel)>) -> Result<Tensor<(seq, hidden)>> {
        self.encoder.encode(features)
    }

    /// The CTC logits `[seq, vocab]` of the valid frames of `features`.
    pub fn logits(&self, features: &Tensor<(frame, mel)>) -> Result<Tensor<(seq, vocab)>> {
        self.head.forward(&self.encode(features)?)
    }
}

/// CTC's greedy decoding of per-frame best tokens: repeats collapsed, blanks dropped.
///
/// ```
/// use fucina_models::parakeet::ctc::ctc_collapse;
/// assert_eq!(ctc_collapse(&[5, 5, 0, 5, 3, 3, 0, 0, 7], 0), vec![5, 5, 3, 7]);
/// ```
pub fn ctc_collapse(best: &[u32], blank: u32) -> Vec<u32> {
    ctc_emissions(best, blank).into_iter().map(|(_, t)| t).collect()
}

/// [`ctc_collapse`] with the frame that emitted each token: `(frame, token)`.
///
/// ```
/// use fucina_models::parakeet::ctc::ctc_emissions;
/// assert_eq!(ctc_emissions(&[5, 5, 0, 5, 3, 3], 0), vec![(0, 5), (3, 5), (4, 3)]);
/// ```
pub fn ctc_emissions(best: &[u32], blank: u32) -> Vec<(usize, u32)> {
    ctc_emissions_from(best, blank, 0, &mut None)
}

/// [`ctc_emissions`] of frames that continue earlier ones (streaming): `best[0]` is frame
/// `first`, and `prev` holds the best token of the frame before it (updated to the last), so a
/// repeat across the boundary collapses.
///
/// ```
/// use fucina_models::parakeet::ctc::ctc_emissions_from;
/// let mut prev = None;
/// assert_eq!(ctc_emissions_from(&[5, 5], 0, 0, &mut prev), vec![(0, 5)]);
/// assert_eq!(ctc_emissions_from(&[5, 3], 0, 2, &mut prev), vec![(3, 3)]);
/// ```
pub fn ctc_emissions_from(best: &[u32], blank: u32, first: usize, prev: &mut Option<u32>) -> Vec<(usize, u32)> {
    let mut out = Vec::new();
    for (f, &t) in best.iter().enumerate() {
        if Some(t) != *prev && t != blank {
            out.push((first + f, t));
        }
        *prev = Some(t);
    }
    out
}
