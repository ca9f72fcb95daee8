//! Qwen3 (dense): config from GGUF metadata and the transformer in the DSL.

pub mod config;
pub mod model;
pub mod nextn;

pub use config::Qwen3Config;
pub use model::Qwen3;
