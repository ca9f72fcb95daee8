//! Models written in the fucina DSL (the README MLP, the two-spirals classifier) and the
//! language-model plumbing (`llm`: tokenizer).

pub mod llm;
pub mod mlp;
pub mod quantize;
pub mod qwen3;
pub mod spirals;
