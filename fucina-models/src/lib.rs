//! Models written in the fucina DSL (the README MLP, the two-spirals classifier, the
//! Qwen3/Llama family, DeepSeek, nanochat, the NAM amp), the language-model plumbing
//! (`llm`: tokenizer, KV cache, sampling, chat, generation), and the apps' pieces: `lm`
//! (open any supported model), `serve` (the OpenAI-compatible server), `quantize`.
//!
//! Features (all on by default; `default-features = false` gives the bare library, which
//! compiles none of clap, axum, tokio, hyper, indicatif, png or hound):
//! - `cli`: the binaries' shared command line (`llm::cli`, clap) and progress bars;
//! - `server`: `serve`, the OpenAI-compatible HTTP server (axum, tokio, hyper);
//! - `synth`: `llm::synth`, random model files of real shapes for benchmarks and tests;
//! - `live` (off by default): live audio (cpal) for the amp and for speech recognition.

pub mod deepseek;
#[doc(hidden)]
pub mod fuzzing;
pub mod gemma4;
pub mod llm;
pub mod lm;
pub mod mlp;
pub mod nam;
pub mod nanochat;
pub mod parakeet;
pub mod quantize;
pub mod qwen3;
#[cfg(feature = "server")]
pub mod serve;
pub mod spirals;
