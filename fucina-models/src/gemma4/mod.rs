//! Gemma 4 (dense and MoE): config from GGUF metadata and the transformer in the DSL.

pub mod config;
pub mod model;

pub use config::Gemma4Config;
pub use model::Gemma4;
