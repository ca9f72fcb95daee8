//! Models written in the fucina DSL. For now: the two-layer MLP of the README.

pub mod mlp;
