//! Parakeet (NVIDIA's FastConformer speech recognizer): its audio front-end so far
//! ([`features`]: log-mel features as `transformers`' `ParakeetFeatureExtractor` computes them).

pub mod encoder;
pub mod features;

pub use encoder::{ctc_collapse, ParakeetConfig, ParakeetCtc};
pub use features::{FeatureConfig, FeatureExtractor, Features};

// Feature frames (10 ms apart at Parakeet's defaults), mel bands, power-spectrum bins.
fucina::axis!(pub frame, pub mel, pub freq);
