//! Opening any supported language model from a GGUF file by its `general.architecture`:
//! the entry point of the binaries and the server.

use crate::llm::generate::CausalLm;
use crate::llm::ModelFile;
use crate::qwen3::Qwen3;
use fucina::formats::gguf::GgufHeader;
use fucina::Result;
use std::path::Path;
use std::sync::Arc;

/// The architectures [`open`] accepts.
pub const ARCHITECTURES: &[&str] = &["qwen3", "qwen3moe"];

/// A loaded model with its file's header (tokenizer, metadata).
pub struct LoadedLm {
    /// The model.
    pub model: Arc<dyn CausalLm + Send>,
    /// The GGUF header.
    pub header: GgufHeader,
    /// `general.architecture`.
    pub arch: String,
    /// A one-line description for logs.
    pub summary: String,
}

/// Opens `path` (mapped, or read into memory with `resident`) and builds its model.
pub fn open(path: &Path, resident: bool) -> Result<LoadedLm> {
    let file = ModelFile::open_with(path, ARCHITECTURES, resident)?;
    let model = Qwen3::load(&file)?;
    let c = &model.config;
    let experts = c.moe.as_ref().map_or(String::new(), |m| format!(", {} of {} experts", m.used, m.experts));
    let summary = format!(
        "{}, {} layers, hidden {}, {}/{} heads{experts}, vocab {}",
        file.arch, c.layers, c.hidden, c.heads, c.kv_heads, c.vocab
    );
    Ok(LoadedLm { model: Arc::new(model), header: file.gguf.header().clone(), arch: file.arch.clone(), summary })
}
