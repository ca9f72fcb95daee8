//! nanochat (Karpathy's from-scratch chat model) in the DSL: the GPT as a trainable module,
//! its byte-level BPE trainer, the offline data (a committed facts table turned into
//! pretraining prose and chat conversations, plus a public-domain corpus), the training
//! loop with checkpoints, evaluation, and the export to GGUF (architecture `nanochat`),
//! which the Llama-family decoder runs for chat and serving.

pub mod bpe;
pub mod config;
pub mod data;
pub mod export;
pub mod model;
pub mod train;

pub use config::GptConfig;
pub use model::{Gpt, GptBlock};
