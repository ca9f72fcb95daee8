//! The 256-value K-quant super-block formats: decoders for Q2_K..Q6_K and Q8_K, and the
//! Q8_K encoder (ggml's `quantize_row_q8_K_ref`).

use crate::backend::qdot_k::{quantize_row_q8_k, unpack, KFormat, Q8_K_BYTES};

const QK_K: usize = 256;

/// Decodes whole super-blocks of `f` through the integer unpacking the dot kernels use.
fn dequantize_k(f: KFormat, bytes: &[u8]) -> Vec<f32> {
    let bb = f.block_bytes();
    let mut out = vec![0.0f32; bytes.len() / bb * QK_K];
    for (b, o) in bytes.chunks_exact(bb).zip(out.chunks_exact_mut(QK_K)) {
        unpack(f, b).values(o);
    }
    out
}

/// Decodes Q2_K: `scales[16] qs[64] d dmin`; 16 groups of 16 with 4-bit scale and min.
pub fn dequantize_q2_k(bytes: &[u8]) -> Vec<f32> {
    dequantize_k(KFormat::Q2K, bytes)
}

/// Decodes Q3_K: `hmask[32] qs[64] scales[12] d`; 16 groups of 16 with 6-bit signed scales.
pub fn dequantize_q3_k(bytes: &[u8]) -> Vec<f32> {
    dequantize_k(KFormat::Q3K, bytes)
}

/// Decodes Q4_K: `d dmin scales[12] qs[128]`; 8 groups of 32.
pub fn dequantize_q4_k(bytes: &[u8]) -> Vec<f32> {
    dequantize_k(KFormat::Q4K, bytes)
}

/// Decodes Q5_K: `d dmin scales[12] qh[32] qs[128]`; 8 groups of 32.
pub fn dequantize_q5_k(bytes: &[u8]) -> Vec<f32> {
    dequantize_k(KFormat::Q5K, bytes)
}

/// Decodes Q6_K: `ql[128] qh[64] scales[16] d`; 16 groups of 16 with int8 scales.
pub fn dequantize_q6_k(bytes: &[u8]) -> Vec<f32> {
    dequantize_k(KFormat::Q6K, bytes)
}

/// Decodes Q8_K: `d (f32) qs[256] (i8) bsums[16] (i16)`.
pub fn dequantize_q8_k(bytes: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(bytes.len() / 292 * QK_K);
    for b in bytes.chunks_exact(292) {
        let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        out.extend(b[4..260].iter().map(|q| d * *q as i8 as f32));
    }
    out
}

/// Encodes Q8_K as ggml's `quantize_row_q8_K_ref`: `iscale = -127 / max`, 16 block sums.
pub fn quantize_q8_k(x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; x.len() / QK_K * Q8_K_BYTES];
    quantize_row_q8_k(x, &mut out);
    out
}
