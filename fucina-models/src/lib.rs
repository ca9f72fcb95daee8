//! Models written in the fucina DSL: the README's MLP and the two-spirals classifier.

pub mod mlp;
pub mod quantize;
pub mod spirals;
