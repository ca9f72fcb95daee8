//! Refcounted element buffers, returned to a [`BufferPool`] when dropped.

pub mod alloc;
mod bytes;
mod pool;

pub use bytes::SharedBytes;
pub use pool::{BufferPool, PoolStats};

use crate::dtype::{DType, Element};
use half::{bf16, f16};
use std::sync::Arc;

/// A typed, owned element buffer.
#[derive(Debug, Clone)]
pub enum Buffer {
    /// f32 elements.
    F32(Vec<f32>),
    /// f16 elements.
    F16(Vec<f16>),
    /// bf16 elements.
    BF16(Vec<bf16>),
    /// u32 elements.
    U32(Vec<u32>),
}

impl Buffer {
    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        match self {
            Buffer::F32(_) => DType::F32,
            Buffer::F16(_) => DType::F16,
            Buffer::BF16(_) => DType::BF16,
            Buffer::U32(_) => DType::U32,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Buffer::F32(v) => v.len(),
            Buffer::F16(v) => v.len(),
            Buffer::BF16(v) => v.len(),
            Buffer::U32(v) => v.len(),
        }
    }

    /// Whether the buffer holds no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Element `i` converted to f32.
    pub fn get_f32(&self, i: usize) -> f32 {
        match self {
            Buffer::F32(v) => v[i],
            Buffer::F16(v) => v[i].to_f32(),
            Buffer::BF16(v) => v[i].to_f32(),
            Buffer::U32(v) => v[i] as f32,
        }
    }

    /// The buffer's bytes, little endian.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        fn go<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
            v.iter().flat_map(|x| f(*x)).collect()
        }
        match self {
            Buffer::F32(v) => go(v, f32::to_le_bytes),
            Buffer::F16(v) => go(v, f16::to_le_bytes),
            Buffer::BF16(v) => go(v, bf16::to_le_bytes),
            Buffer::U32(v) => go(v, u32::to_le_bytes),
        }
    }

    /// Builds a buffer of `dtype` from little-endian bytes.
    pub fn from_le_bytes(dtype: DType, bytes: &[u8]) -> Option<Buffer> {
        let n = dtype.size_in_bytes();
        if !bytes.len().is_multiple_of(n) {
            return None;
        }
        Some(match dtype {
            DType::F32 => {
                Buffer::F32(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
            }
            DType::U32 => {
                Buffer::U32(bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
            }
            DType::F16 => Buffer::F16(bytes.chunks_exact(2).map(|c| f16::from_le_bytes([c[0], c[1]])).collect()),
            DType::BF16 => Buffer::BF16(bytes.chunks_exact(2).map(|c| bf16::from_le_bytes([c[0], c[1]])).collect()),
        })
    }
}

/// Conversion between a typed `Vec<T>` and a [`Buffer`].
pub trait BufferElement: Element {
    /// Wraps a vector.
    fn into_buffer(v: Vec<Self>) -> Buffer;
    /// Borrows the slice if the buffer holds this type.
    fn slice(b: &Buffer) -> Option<&[Self]>;
}

macro_rules! buffer_element {
    ($t:ty, $variant:ident) => {
        impl BufferElement for $t {
            fn into_buffer(v: Vec<Self>) -> Buffer {
                Buffer::$variant(v)
            }
            fn slice(b: &Buffer) -> Option<&[Self]> {
                match b {
                    Buffer::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}
buffer_element!(f32, F32);
buffer_element!(f16, F16);
buffer_element!(bf16, BF16);
buffer_element!(u32, U32);

/// A buffer shared by tensors and views; f32 buffers go back to their pool on drop.
#[derive(Debug)]
pub struct Storage {
    buf: Buffer,
    pool: Option<Arc<BufferPool>>,
}

impl Storage {
    /// Wraps a buffer that belongs to no pool.
    pub fn new(buf: Buffer) -> Storage {
        Storage { buf, pool: None }
    }

    /// Wraps a buffer that returns to `pool` when the storage is dropped.
    pub fn pooled(buf: Buffer, pool: Arc<BufferPool>) -> Storage {
        Storage { buf, pool: Some(pool) }
    }

    /// The buffer.
    pub fn buffer(&self) -> &Buffer {
        &self.buf
    }

    /// The buffer, mutably: reachable only through a uniquely held storage
    /// (`Arc::get_mut`), so no tensor can observe the writes.
    pub fn buffer_mut(&mut self) -> &mut Buffer {
        &mut self.buf
    }

    /// The dtype of the elements.
    pub fn dtype(&self) -> DType {
        self.buf.dtype()
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let (Some(pool), Buffer::F32(v)) = (self.pool.take(), &mut self.buf) {
            pool.put(std::mem::take(v));
        }
    }
}
