//! From samples to text: features, the encoder and its head (CTC, TDT or RNN-T), greedy
//! decoding with a time for each token, and the vocabulary's pieces joined (SentencePiece's
//! `▁` as a space).

use super::ctc::{ctc_emissions, ParakeetCtc};
use super::encoder::{config_text, ParakeetConfig};
use super::features::{FeatureConfig, FeatureExtractor};
use super::transducer::ParakeetTransducer;
use super::{frame, mel};
use fucina::formats::safetensors::SafeTensors;
use fucina::prelude::*;

/// A Parakeet model: the encoder with one of its heads.
#[derive(Debug, Clone)]
pub enum ParakeetModel {
    /// `ParakeetForCTC`.
    Ctc(Box<ParakeetCtc>),
    /// `ParakeetForTDT` or `ParakeetForRNNT`.
    Transducer(Box<ParakeetTransducer>),
}

impl ParakeetModel {
    /// Loads the model a safetensors file holds, by its config's `model_type`
    /// (`parakeet_ctc`, or a config without one; `parakeet_tdt`; `parakeet_rnnt`).
    pub fn load(st: &SafeTensors) -> Result<ParakeetModel> {
        let v: serde_json::Value = serde_json::from_str(config_text(st)?)
            .map_err(|e| FucinaError::Format { format: "parakeet", msg: format!("config: {e}") })?;
        match v["model_type"].as_str() {
            None | Some("parakeet_ctc") => Ok(ParakeetModel::Ctc(Box::new(ParakeetCtc::load(st)?))),
            Some("parakeet_tdt" | "parakeet_rnnt") => {
                Ok(ParakeetModel::Transducer(Box::new(ParakeetTransducer::load(st)?)))
            }
            Some(other) => Err(FucinaError::Format {
                format: "parakeet",
                msg: format!("config: model_type `{other}` (parakeet_ctc, parakeet_tdt or parakeet_rnnt)"),
            }),
        }
    }

    /// The encoder's sizes, the vocabulary and the blank.
    pub fn config(&self) -> &ParakeetConfig {
        match self {
            ParakeetModel::Ctc(m) => &m.config,
            ParakeetModel::Transducer(m) => &m.config,
        }
    }

    /// The head's name, for messages.
    pub fn head(&self) -> &'static str {
        match self {
            ParakeetModel::Ctc(_) => "CTC",
            ParakeetModel::Transducer(m) => match m.transducer.kind {
                super::TransducerKind::Tdt => "TDT",
                super::TransducerKind::Rnnt => "RNN-T",
            },
        }
    }

    /// The encoder's output `[seq, hidden]` for the valid frames of `features`.
    pub fn encode(&self, features: &Tensor<(frame, mel)>) -> Result<Tensor<(seq, hidden)>> {
        match self {
            ParakeetModel::Ctc(m) => m.encode(features),
            ParakeetModel::Transducer(m) => m.encoder.encode(features),
        }
    }

    /// Greedy decoding of `features`: each emitted token with its encoder frame, and the
    /// number of encoder frames.
    pub fn emissions(&self, features: &Tensor<(frame, mel)>) -> Result<(Vec<(usize, u32)>, usize)> {
        let blank = self.config().blank;
        match self {
            ParakeetModel::Ctc(m) => {
                let best: Vec<u32> = m.logits(features)?.argmax::<vocab>()?.raw().to_vec::<u32>()?;
                Ok((ctc_emissions(&best, blank), best.len()))
            }
            ParakeetModel::Transducer(m) => {
                let projected = m.project(features)?;
                let steps = m.decode(&projected)?;
                let emitted = steps.iter().filter(|s| s.token != blank).map(|s| (s.frame, s.token)).collect();
                Ok((emitted, projected.shape()[0]))
            }
        }
    }
}

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

/// A speech recognizer: front-end, model and vocabulary.
#[derive(Debug, Clone)]
pub struct Recognizer {
    /// The front-end (Parakeet's defaults, with the model's mel count).
    pub features: FeatureExtractor,
    /// The model.
    pub model: ParakeetModel,
    /// Pieces by id (the file's `vocab` metadata), if any.
    pub vocab: Option<Vec<String>>,
}

impl Recognizer {
    /// Loads the model of a safetensors file ([`ParakeetModel::load`]) and its vocabulary
    /// (the metadata `vocab`: a JSON list of pieces, one per id).
    pub fn load(st: &SafeTensors) -> Result<Recognizer> {
        let model = ParakeetModel::load(st)?;
        let vocab = match st.metadata().get("vocab") {
            None => None,
            Some(text) => {
                let v: Vec<String> = serde_json::from_str(text)
                    .map_err(|e| FucinaError::Format { format: "parakeet", msg: format!("vocab: {e}") })?;
                if v.len() != model.config().vocab {
                    return Err(FucinaError::Format {
                        format: "parakeet",
                        msg: format!("vocab: {} pieces for {} ids", v.len(), model.config().vocab),
                    });
                }
                Some(v)
            }
        };
        let features =
            FeatureExtractor::new(FeatureConfig { features: model.config().mels, ..FeatureConfig::default() })?;
        Ok(Recognizer { features, model, vocab })
    }

    /// Samples per encoder frame (`hop * subsampling`).
    pub fn frame_samples(&self) -> usize {
        self.features.config().hop * self.model.config().subsampling_factor
    }

    /// Token `id` emitted at encoder frame `frame`, with its piece and time.
    pub fn token_at(&self, frame: usize, id: u32) -> TokenAt {
        let piece = match &self.vocab {
            Some(v) => v.get(id as usize).cloned().unwrap_or_else(|| format!("<{id}>")),
            None => format!("<{id}>"),
        };
        TokenAt { id, piece, start: frame as f64 * self.frame_seconds() }
    }

    /// The pieces of `tokens` joined, `▁` read as a space, leading space trimmed.
    pub fn text(tokens: &[TokenAt]) -> String {
        tokens.iter().map(|t| t.piece.as_str()).collect::<String>().replace('\u{2581}', " ").trim_start().to_string()
    }

    /// Seconds per encoder frame.
    pub fn frame_seconds(&self) -> f64 {
        let c = self.features.config();
        (c.hop * self.model.config().subsampling_factor) as f64 / c.sample_rate as f64
    }

    /// The valid feature frames `[frame, mel]` of mono `samples` at the front-end's rate.
    pub fn features(&self, samples: &[f32]) -> Result<Tensor<(frame, mel)>> {
        let audio = Tensor::<(sample,)>::from_vec(samples.to_vec(), &[samples.len()])?;
        let f = self.features.extract(&audio)?;
        f.values.narrow::<frame>(0, f.valid)
    }

    /// The per-frame CTC logits `[seq, vocab]` of mono `samples` at the front-end's rate (an
    /// error for a transducer, whose logits depend on the tokens decoded).
    pub fn logits(&self, samples: &[f32]) -> Result<Tensor<(seq, vocab)>> {
        match &self.model {
            ParakeetModel::Ctc(m) => m.logits(&self.features(samples)?),
            ParakeetModel::Transducer(_) => Err(FucinaError::InvalidArgument {
                op: "Recognizer::logits",
                msg: "per-frame logits are a CTC model's; a transducer's depend on the decoded tokens".into(),
            }),
        }
    }

    /// Recognizes mono `samples` at the front-end's rate (16 kHz for Parakeet).
    pub fn transcribe(&self, samples: &[f32]) -> Result<Transcript> {
        let (emitted, frames) = self.model.emissions(&self.features(samples)?)?;
        let tokens: Vec<TokenAt> = emitted.into_iter().map(|(f, id)| self.token_at(f, id)).collect();
        let text = Recognizer::text(&tokens);
        Ok(Transcript { tokens, text, frames })
    }
}
