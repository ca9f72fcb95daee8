//! Pieces shared by the language models (Qwen3, DeepSeek): the tokenizer, and later sampling
//! and generation.

pub mod tokenizer;

pub use tokenizer::Tokenizer;
