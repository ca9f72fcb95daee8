//! From samples to text: features, the encoder and its CTC head, greedy CTC decoding with a
//! time for each token, and the vocabulary's pieces joined (SentencePiece's `▁` as a space).

use super::encoder::{ctc_emissions, ParakeetCtc};
use super::features::{FeatureConfig, FeatureExtractor};
use super::{frame, mel};
use fucina::formats::safetensors::SafeTensors;
use fucina::prelude::*;

/// One recognized token.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenAt {
    /// Its id.
    pub id: u32,
    /// Its piece (`<id>` when the file has no vocabulary).
    pub piece: String,
    /// Seconds from the start of the audio to the encoder frame that emitted it.
    pub start: f64,
}

/// A recognized utterance.
#[derive(Debug, Clone, PartialEq)]
pub struct Transcript {
    /// The tokens, repeats collapsed and blanks dropped.
    pub tokens: Vec<TokenAt>,
    /// The pieces joined, `▁` read as a space, leading space trimmed.
    pub text: String,
    /// Encoder frames (each `hop * subsampling` samples).
    pub frames: usize,
}

/// A CTC speech recognizer: front-end, model and vocabulary.
#[derive(Debug, Clone)]
pub struct Recognizer {
    /// The front-end (Parakeet's defaults, with the model's mel count).
    pub features: FeatureExtractor,
    /// The model.
    pub model: ParakeetCtc,
    /// Pieces by id (the file's `vocab` metadata), if any.
    pub vocab: Option<Vec<String>>,
}

impl Recognizer {
    /// Loads the model of a safetensors file ([`ParakeetCtc::load`]) and its vocabulary (the
    /// metadata `vocab`: a JSON list of pieces, one per id).
    pub fn load(st: &SafeTensors) -> Result<Recognizer> {
        let model = ParakeetCtc::load(st)?;
        let vocab = match st.metadata().get("vocab") {
            None => None,
            Some(text) => {
                let v: Vec<String> = serde_json::from_str(text)
                    .map_err(|e| FucinaError::Format { format: "parakeet", msg: format!("vocab: {e}") })?;
                if v.len() != model.config.vocab {
                    return Err(FucinaError::Format {
                        format: "parakeet",
                        msg: format!("vocab: {} pieces for {} ids", v.len(), model.config.vocab),
                    });
                }
                Some(v)
            }
        };
        let features =
            FeatureExtractor::new(FeatureConfig { features: model.config.mels, ..FeatureConfig::default() })?;
        Ok(Recognizer { features, model, vocab })
    }

    /// Seconds per encoder frame.
    pub fn frame_seconds(&self) -> f64 {
        let c = self.features.config();
        (c.hop * self.model.config.subsampling_factor) as f64 / c.sample_rate as f64
    }

    /// The per-frame logits `[seq, vocab]` of mono `samples` at the front-end's rate.
    pub fn logits(&self, samples: &[f32]) -> Result<Tensor<(seq, vocab)>> {
        let audio = Tensor::<(sample,)>::from_vec(samples.to_vec(), &[samples.len()])?;
        let f = self.features.extract(&audio)?;
        let x: Tensor<(frame, mel)> = f.values.narrow::<frame>(0, f.valid)?;
        self.model.logits(&x)
    }

    /// Recognizes mono `samples` at the front-end's rate (16 kHz for Parakeet).
    pub fn transcribe(&self, samples: &[f32]) -> Result<Transcript> {
        let logits = self.logits(samples)?;
        let best: Vec<u32> = logits.argmax::<vocab>()?.raw().to_vec::<u32>()?;
        let step = self.frame_seconds();
        let tokens: Vec<TokenAt> = ctc_emissions(&best, self.model.config.blank)
            .into_iter()
            .map(|(f, id)| {
                let piece = match &self.vocab {
                    Some(v) => v.get(id as usize).cloned().unwrap_or_else(|| format!("<{id}>")),
                    None => format!("<{id}>"),
                };
                TokenAt { id, piece, start: f as f64 * step }
            })
            .collect();
        let text = tokens
            .iter()
            .map(|t| t.piece.as_str())
            .collect::<String>()
            .replace('\u{2581}', " ")
            .trim_start()
            .to_string();
        Ok(Transcript { tokens, text, frames: best.len() })
    }
}
