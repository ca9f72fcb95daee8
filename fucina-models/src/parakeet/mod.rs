//! Parakeet (NVIDIA's FastConformer speech recognizer): the audio front-end ([`features`]:
//! log-mel features as `transformers`' `ParakeetFeatureExtractor` computes them), the
//! FastConformer encoder ([`encoder`]), its CTC head ([`ctc`]) and its TDT / RNN-T heads
//! ([`transducer`]), greedy recognition with token times ([`transcribe`]), streaming with
//! bounded latency ([`stream`]), WAV input (`wav`, feature `cli`) and the microphone (`live`,
//! feature `live`).

pub mod ctc;
pub mod encoder;
pub mod features;
#[cfg(feature = "live")]
pub mod live;
pub mod stream;
pub mod transcribe;
pub mod transducer;
#[cfg(feature = "cli")]
pub mod wav;

pub use ctc::{ctc_collapse, ctc_emissions, ParakeetCtc};
pub use encoder::{ParakeetConfig, ParakeetEncoder};
pub use features::{FeatureConfig, FeatureExtractor, Features};
pub use stream::{Stream, StreamOptions};
pub use transcribe::{ParakeetModel, Recognizer, TokenAt, Transcript};
pub use transducer::{ParakeetTransducer, Step, TransducerConfig, TransducerKind};

// Feature frames (10 ms apart at Parakeet's defaults), mel bands, power-spectrum bins.
fucina::axis!(pub frame, pub mel, pub freq);
