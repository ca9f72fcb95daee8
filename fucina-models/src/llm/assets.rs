//! The model files shipped with the crate.

use std::path::PathBuf;

/// The tiny random Qwen3 shipped with the crate (`assets/qwen3-tiny-f32.gguf`): the `qwen3`
/// binary's default, and the file the tests and `synth` build on. Its answers are noise.
pub fn default_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/qwen3-tiny-f32.gguf")
}

/// The chat model shipped with the crate, trained from scratch by `nanochat all`
/// (`assets/nanochat-d4.gguf`, 1.3 M parameters): the `chat` binary's default. It names
/// capitals, adds numbers below 100 and converts units (docs/TRAINING.md says how well).
pub fn default_chat_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/nanochat-d4.gguf")
}

/// The tiny random Parakeet CTC shipped with the crate (`assets/parakeet-ctc-tiny.safetensors`,
/// made by `tools/gen_parakeet_tiny.py`): the `asr` binary's default and the tests' model. Its
/// transcripts are noise.
pub fn default_asr_model() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/parakeet-ctc-tiny.safetensors")
}
