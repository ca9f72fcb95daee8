//! File formats: GGUF (read over mmap, byte-identical write), safetensors (read over mmap,
//! write), NAM `.nam` amp models, module save/load, training checkpoints.

pub mod checkpoint;
pub mod gguf;
#[cfg(feature = "nam")]
pub mod nam;
pub mod safetensors;
