//! Pieces shared by the language models (Qwen3, DeepSeek): GGUF weight access, the
//! tokenizer, rotary embeddings, the KV cache.

pub mod kv_cache;
pub mod rope;
pub mod tokenizer;
pub mod weights;

pub use kv_cache::KvCache;
pub use tokenizer::Tokenizer;
pub use weights::ModelFile;
