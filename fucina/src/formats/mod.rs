//! File formats. For now safetensors (read over mmap, write), and module save/load on it.

pub mod safetensors;
