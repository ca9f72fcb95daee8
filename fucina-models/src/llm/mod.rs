//! Pieces shared by the language models (Qwen3, DeepSeek): GGUF weight access, the
//! tokenizer, chat template, rotary embeddings, the KV cache, sampling and the generation loop.

pub mod assets;
pub mod batch;
pub mod chat;
#[cfg(feature = "cli")]
pub mod cli;
pub mod generate;
pub mod grammar;
pub mod head;
pub mod kv_cache;
pub mod moe;
pub mod reasoning;
pub mod rope;
pub mod sampling;
pub(crate) mod spm;
#[cfg(feature = "synth")]
pub mod synth;
pub mod tokenizer;
pub mod tools;
pub mod weights;

pub use batch::{LogitRows, Segment};
pub use chat::{render_chat, Message, Role};
pub use generate::{generate, generate_observed, CausalLm, GenerateOptions, GenerationStats, StopReason};
pub use kv_cache::{DraftState, KvCache, KvType, LayerShape, Values};
pub use sampling::{Sampler, SamplingParams};
pub use tokenizer::Tokenizer;
pub use weights::ModelFile;
