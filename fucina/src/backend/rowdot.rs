//! The function types of the block-format row kernels, shared by `qdot` (Q8_0, Q4_0) and
//! `qdot_k` (K-quants) so neither depends on the other.

/// A row kernel: one encoded weight row times one quantized activation row.
pub type RowDot = unsafe fn(&[u8], &[u8]) -> f32;

/// A four-row kernel: one encoded weight row times four quantized activation rows.
pub type RowDot4 = unsafe fn(&[u8], [&[u8]; 4]) -> [f32; 4];

/// A tile kernel: two encoded weight rows times four quantized activation rows, given the
/// activation rows' block scales as f32, four per block (`scales[4 * b + r]`: row `r`, block
/// `b`).
pub type RowDot2x4 = unsafe fn([&[u8]; 2], [&[u8]; 4], &[f32]) -> [[f32; 4]; 2];
