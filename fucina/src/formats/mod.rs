//! File formats: GGUF (read over mmap, byte-identical write), safetensors (read over mmap,
//! write), module save/load, training checkpoints.

pub mod checkpoint;
pub mod gguf;
pub mod safetensors;
