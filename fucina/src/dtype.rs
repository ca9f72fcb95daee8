//! Element types: f32, f16 and bf16 (via `half`), and u32 for indices.

use half::{bf16, f16};

/// The element type of a tensor's storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 half precision.
    F16,
    /// bfloat16 (8-bit exponent, 7-bit mantissa).
    BF16,
    /// Unsigned 32-bit integers, for indices and token ids.
    U32,
}

impl DType {
    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// Whether the type holds floating point values.
    pub fn is_float(self) -> bool {
        !matches!(self, DType::U32)
    }

    /// The safetensors name of the dtype.
    pub fn safetensors_name(self) -> &'static str {
        match self {
            DType::F32 => "F32",
            DType::F16 => "F16",
            DType::BF16 => "BF16",
            DType::U32 => "U32",
        }
    }

    /// Parses a safetensors dtype name.
    pub fn from_safetensors_name(s: &str) -> Option<DType> {
        Some(match s {
            "F32" => DType::F32,
            "F16" => DType::F16,
            "BF16" => DType::BF16,
            "U32" => DType::U32,
            _ => return None,
        })
    }

    /// The dtype of a binary float op's result: equal types stay, mixed types go to f32.
    pub fn promote(self, other: DType) -> DType {
        if self == other {
            self
        } else {
            DType::F32
        }
    }
}

/// A Rust type that can be stored in a tensor.
pub trait Element: Copy + Send + Sync + 'static + std::fmt::Debug {
    /// Its dtype tag.
    const DTYPE: DType;
    /// Converts to f32 (u32 converts by value).
    fn to_f32(self) -> f32;
    /// Converts from f32 (rounding to nearest even for half types).
    fn from_f32(v: f32) -> Self;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn to_f32(self) -> f32 {
        self
    }
    fn from_f32(v: f32) -> Self {
        v
    }
}

impl Element for f16 {
    const DTYPE: DType = DType::F16;
    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
}

impl Element for bf16 {
    const DTYPE: DType = DType::BF16;
    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }
    fn from_f32(v: f32) -> Self {
        bf16::from_f32(v)
    }
}

impl Element for u32 {
    const DTYPE: DType = DType::U32;
    fn to_f32(self) -> f32 {
        self as f32
    }
    fn from_f32(v: f32) -> Self {
        v as u32
    }
}
