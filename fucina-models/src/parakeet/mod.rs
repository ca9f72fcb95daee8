//! Parakeet (NVIDIA's FastConformer speech recognizer): the audio front-end ([`features`]:
//! log-mel features as `transformers`' `ParakeetFeatureExtractor` computes them), the
//! FastConformer encoder with its CTC head ([`encoder`]), greedy recognition with token times
//! ([`transcribe`]), and WAV input (`wav`, feature `cli`).

pub mod encoder;
pub mod features;
pub mod transcribe;
#[cfg(feature = "cli")]
pub mod wav;

pub use encoder::{ctc_collapse, ParakeetConfig, ParakeetCtc};
pub use features::{FeatureConfig, FeatureExtractor, Features};
pub use transcribe::{Recognizer, TokenAt, Transcript};

// Feature frames (10 ms apart at Parakeet's defaults), mel bands, power-spectrum bins.
fucina::axis!(pub frame, pub mel, pub freq);
