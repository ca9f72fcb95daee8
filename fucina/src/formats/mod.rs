//! File formats: safetensors (read over mmap, write), module save/load, training checkpoints.

pub mod checkpoint;
pub mod safetensors;
