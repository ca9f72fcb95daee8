//! The ggml tensor types a GGUF file may hold, with their block geometry.

use crate::error::{FucinaError, Result};

/// A ggml tensor type (the numbering of `ggml_type`).
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GgmlType {
    /// 32-bit float.
    F32,
    /// 16-bit float.
    F16,
    /// 4-bit, 32-value blocks, one f16 scale.
    Q4_0,
    /// 4-bit, 32-value blocks, f16 scale and minimum.
    Q4_1,
    /// 5-bit, 32-value blocks, one f16 scale.
    Q5_0,
    /// 5-bit, 32-value blocks, f16 scale and minimum.
    Q5_1,
    /// 8-bit, 32-value blocks, one f16 scale.
    Q8_0,
    /// 8-bit, 32-value blocks, f16 scale and sum.
    Q8_1,
    /// 2-bit K-quant, 256-value super-blocks.
    Q2_K,
    /// 3-bit K-quant.
    Q3_K,
    /// 4-bit K-quant.
    Q4_K,
    /// 5-bit K-quant.
    Q5_K,
    /// 6-bit K-quant.
    Q6_K,
    /// 8-bit K-quant (activations of K-quant dot products).
    Q8_K,
    /// 8-bit integers.
    I8,
    /// 16-bit integers.
    I16,
    /// 32-bit integers.
    I32,
    /// 64-bit integers.
    I64,
    /// 64-bit floats.
    F64,
    /// bfloat16.
    BF16,
}

impl GgmlType {
    /// The type with ggml id `id`, or an error naming it.
    pub fn from_id(id: u32) -> Result<GgmlType> {
        Ok(match id {
            0 => GgmlType::F32,
            1 => GgmlType::F16,
            2 => GgmlType::Q4_0,
            3 => GgmlType::Q4_1,
            6 => GgmlType::Q5_0,
            7 => GgmlType::Q5_1,
            8 => GgmlType::Q8_0,
            9 => GgmlType::Q8_1,
            10 => GgmlType::Q2_K,
            11 => GgmlType::Q3_K,
            12 => GgmlType::Q4_K,
            13 => GgmlType::Q5_K,
            14 => GgmlType::Q6_K,
            15 => GgmlType::Q8_K,
            24 => GgmlType::I8,
            25 => GgmlType::I16,
            26 => GgmlType::I32,
            27 => GgmlType::I64,
            28 => GgmlType::F64,
            30 => GgmlType::BF16,
            _ => {
                return Err(FucinaError::Format {
                    format: "ggml type",
                    msg: format!("unknown or unsupported ggml type id {id}"),
                })
            }
        })
    }

    /// The type named `name` as ggml spells it (`Q4_K`, `F16`, ...; what `{:?}` prints).
    pub fn from_name(name: &str) -> Result<GgmlType> {
        (0..64).filter_map(|id| GgmlType::from_id(id).ok()).find(|t| format!("{t:?}") == name).ok_or_else(|| {
            FucinaError::InvalidArgument { op: "GgmlType::from_name", msg: format!("no ggml type `{name}`") }
        })
    }

    /// The ggml id.
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q8_1 => 9,
            GgmlType::Q2_K => 10,
            GgmlType::Q3_K => 11,
            GgmlType::Q4_K => 12,
            GgmlType::Q5_K => 13,
            GgmlType::Q6_K => 14,
            GgmlType::Q8_K => 15,
            GgmlType::I8 => 24,
            GgmlType::I16 => 25,
            GgmlType::I32 => 26,
            GgmlType::I64 => 27,
            GgmlType::F64 => 28,
            GgmlType::BF16 => 30,
        }
    }

    /// Values per block.
    pub fn block_size(self) -> usize {
        match self {
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 | GgmlType::Q8_1 => 32,
            GgmlType::Q2_K | GgmlType::Q3_K | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K | GgmlType::Q8_K => 256,
            _ => 1,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::I32 => 4,
            GgmlType::F16 | GgmlType::BF16 | GgmlType::I16 => 2,
            GgmlType::I8 => 1,
            GgmlType::I64 | GgmlType::F64 => 8,
            GgmlType::Q4_0 => 18,
            GgmlType::Q4_1 => 20,
            GgmlType::Q5_0 => 22,
            GgmlType::Q5_1 => 24,
            GgmlType::Q8_0 => 34,
            GgmlType::Q8_1 => 36,
            GgmlType::Q2_K => 84,
            GgmlType::Q3_K => 110,
            GgmlType::Q4_K => 144,
            GgmlType::Q5_K => 176,
            GgmlType::Q6_K => 210,
            GgmlType::Q8_K => 292,
        }
    }

    /// Bytes taken by `n` values (an error if `n` is not a whole number of blocks or overflows).
    pub fn bytes_for(self, n: usize) -> Result<usize> {
        let bs = self.block_size();
        if !n.is_multiple_of(bs) {
            return Err(FucinaError::Format {
                format: "ggml type",
                msg: format!("{n} values are not a whole number of {self:?} blocks of {bs}"),
            });
        }
        (n / bs)
            .checked_mul(self.block_bytes())
            .ok_or(FucinaError::Format { format: "ggml type", msg: format!("{n} values overflow") })
    }
}
