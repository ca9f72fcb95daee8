//! ggml block quantization formats: types, block sizes, encoders and decoders.
//!
//! Decoders follow gguf-py's `gguf.quants` dequantizers element for element (same f32
//! arithmetic, so results are bit-identical); the Q4_0/Q4_1/Q5_0/Q5_1/Q8_0/BF16 encoders
//! follow gguf-py's quantizers (which match ggml's reference) and are byte-exact; the K-quant
//! encoders (Q2_K..Q6_K, Q8_K) are ports of ggml's `quantize_row_*_K_ref`, byte-exact against
//! ggml-quants.c itself.

mod kquants;
mod kquants_enc;
mod legacy;
mod matmul;
mod stack;
mod types;

pub use kquants::{
    dequantize_q2_k, dequantize_q3_k, dequantize_q4_k, dequantize_q5_k, dequantize_q6_k, dequantize_q8_k, quantize_q8_k,
};
pub use kquants_enc::{quantize_q2_k, quantize_q3_k, quantize_q4_k, quantize_q5_k, quantize_q6_k};
pub use legacy::{
    dequantize_q4_0, dequantize_q4_1, dequantize_q5_0, dequantize_q5_1, dequantize_q8_0, quantize_q4_0, quantize_q4_1,
    quantize_q5_0, quantize_q5_1, quantize_q8_0,
};
pub use matmul::{Product, ProductGroup, ProductOutputs, QLinear, QWeight, BF16_BATCH};
pub use stack::QWeightStack;
pub use types::GgmlType;

use crate::error::{FucinaError, Result};
use half::{bf16, f16};

pub use crate::backend::weights::f32_to_bf16_bits;

/// Encodes `x` (whose length must be a multiple of the block size) as `ty`.
pub fn quantize(ty: GgmlType, x: &[f32]) -> Result<Vec<u8>> {
    let bs = ty.block_size();
    if !x.len().is_multiple_of(bs) {
        return Err(FucinaError::InvalidArgument {
            op: "quantize",
            msg: format!("{} values are not a whole number of {ty:?} blocks of {bs}", x.len()),
        });
    }
    Ok(match ty {
        GgmlType::F32 => x.iter().flat_map(|v| v.to_le_bytes()).collect(),
        GgmlType::F16 => x.iter().flat_map(|v| f16::from_f32(*v).to_le_bytes()).collect(),
        GgmlType::BF16 => x.iter().flat_map(|v| f32_to_bf16_bits(*v).to_le_bytes()).collect(),
        GgmlType::Q4_0 => quantize_q4_0(x),
        GgmlType::Q4_1 => quantize_q4_1(x),
        GgmlType::Q5_0 => quantize_q5_0(x),
        GgmlType::Q5_1 => quantize_q5_1(x),
        GgmlType::Q8_0 => quantize_q8_0(x),
        GgmlType::Q2_K => quantize_q2_k(x),
        GgmlType::Q3_K => quantize_q3_k(x),
        GgmlType::Q4_K => quantize_q4_k(x),
        GgmlType::Q5_K => quantize_q5_k(x),
        GgmlType::Q6_K => quantize_q6_k(x),
        GgmlType::Q8_K => quantize_q8_k(x),
        other => {
            return Err(FucinaError::InvalidArgument { op: "quantize", msg: format!("no encoder for {other:?} yet") });
        }
    })
}

/// Decodes `out.len()` values of type `ty` from `bytes` (exactly that many) into `out`
/// without allocating for the formats with matmul kernels (F32, F16, BF16, Q8_0, Q4_0,
/// Q2_K..Q6_K); the values are identical to [`dequantize`]'s.
pub fn dequantize_into(ty: GgmlType, bytes: &[u8], out: &mut [f32]) -> Result<()> {
    let n = out.len();
    let need = ty.bytes_for(n)?;
    if bytes.len() != need {
        return Err(FucinaError::InvalidArgument {
            op: "dequantize",
            msg: format!("{n} values of {ty:?} take {need} bytes, got {}", bytes.len()),
        });
    }
    match matmul::weight_format(ty) {
        Some(f) => crate::backend::weights::decode_row(f, bytes, out),
        None => out.copy_from_slice(&dequantize(ty, bytes, n)?),
    }
    Ok(())
}

/// Decodes `n` values of type `ty` from `bytes` (which must hold exactly that many).
pub fn dequantize(ty: GgmlType, bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    let need = ty.bytes_for(n)?;
    if bytes.len() != need {
        return Err(FucinaError::InvalidArgument {
            op: "dequantize",
            msg: format!("{n} values of {ty:?} take {need} bytes, got {}", bytes.len()),
        });
    }
    Ok(match ty {
        GgmlType::F32 => bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
        GgmlType::F16 => bytes.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        GgmlType::BF16 => bytes.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]]).to_f32()).collect(),
        GgmlType::Q4_0 => dequantize_q4_0(bytes),
        GgmlType::Q4_1 => dequantize_q4_1(bytes),
        GgmlType::Q5_0 => dequantize_q5_0(bytes),
        GgmlType::Q5_1 => dequantize_q5_1(bytes),
        GgmlType::Q8_0 => dequantize_q8_0(bytes),
        GgmlType::Q2_K => dequantize_q2_k(bytes),
        GgmlType::Q3_K => dequantize_q3_k(bytes),
        GgmlType::Q4_K => dequantize_q4_k(bytes),
        GgmlType::Q5_K => dequantize_q5_k(bytes),
        GgmlType::Q6_K => dequantize_q6_k(bytes),
        GgmlType::Q8_K => dequantize_q8_k(bytes),
        other => {
            return Err(FucinaError::InvalidArgument { op: "dequantize", msg: format!("no decoder for {other:?}") });
        }
    })
}
