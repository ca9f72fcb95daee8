//! Models written in the fucina DSL (the README MLP, the two-spirals classifier, Qwen3 and
//! Qwen3-MoE), the language-model plumbing (`llm`: tokenizer, KV cache, sampling, chat,
//! generation), and the apps' pieces: `lm` (open any supported model), `serve` (the
//! OpenAI-compatible server), `quantize`.

pub mod deepseek;
#[doc(hidden)]
pub mod fuzzing;
pub mod llm;
pub mod lm;
pub mod mlp;
pub mod nam;
pub mod nanochat;
pub mod quantize;
pub mod qwen3;
pub mod serve;
pub mod spirals;
