//! The bounds-checked GGUF parser.

use super::{Array, GgufHeader, TensorInfo, Value, DEFAULT_ALIGNMENT, MAGIC};
use crate::error::{FucinaError, Result};
use crate::quant::GgmlType;

/// The most dimensions a ggml tensor has.
const MAX_DIMS: u32 = 4;
/// Nesting limit for arrays of arrays.
const MAX_DEPTH: usize = 8;

struct Cursor<'a> {
    b: &'a [u8],
    at: usize,
}

fn err(at: usize, msg: impl Into<String>) -> FucinaError {
    FucinaError::Format { format: "gguf", msg: format!("at byte {at}: {}", msg.into()) }
}

impl<'a> Cursor<'a> {
    fn remaining(&self) -> usize {
        self.b.len() - self.at
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(err(self.at, format!("{what} needs {n} bytes, {} remain (truncated file?)", self.remaining())));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn arr<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let s = self.take(N, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        Ok(u32::from_le_bytes(self.arr(what)?))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        Ok(u64::from_le_bytes(self.arr(what)?))
    }

    fn string(&mut self, what: &str) -> Result<Vec<u8>> {
        let at = self.at;
        let n = self.u64(what)?;
        if n > self.remaining() as u64 {
            return Err(err(
                at,
                format!("{what}: string length {n} exceeds the {} bytes that remain", self.remaining()),
            ));
        }
        Ok(self.take(n as usize, what)?.to_vec())
    }

    /// A count of items each at least `min_size` bytes, checked against what remains.
    fn count(&mut self, what: &str, min_size: usize) -> Result<usize> {
        let at = self.at;
        let n = self.u64(what)?;
        if n.saturating_mul(min_size as u64) > self.remaining() as u64 {
            return Err(err(at, format!("{what} {n} cannot fit in the {} bytes that remain", self.remaining())));
        }
        Ok(n as usize)
    }

    /// An array: element type, count, elements, stored in one typed vector.
    fn array(&mut self, what: &str, depth: usize) -> Result<Array> {
        if depth >= MAX_DEPTH {
            return Err(err(self.at, format!("{what}: arrays nested deeper than {MAX_DEPTH}")));
        }
        let et = self.u32(what)?;
        let min = match et {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            8 | 10..=12 => 8,
            9 => 12,
            t => return Err(err(self.at - 4, format!("{what}: unknown array element type {t}"))),
        };
        let n = self.count(&format!("{what}: array length"), min)?;
        macro_rules! fixed {
            ($variant:ident, $t:ty) => {{
                let bytes = self.take(n * min, what)?;
                Array::$variant(
                    bytes.chunks_exact(min).map(|c| <$t>::from_le_bytes(c.try_into().unwrap_or_default())).collect(),
                )
            }};
        }
        Ok(match et {
            0 => Array::U8(self.take(n, what)?.to_vec()),
            1 => Array::I8(self.take(n, what)?.iter().map(|b| *b as i8).collect()),
            2 => fixed!(U16, u16),
            3 => fixed!(I16, i16),
            4 => fixed!(U32, u32),
            5 => fixed!(I32, i32),
            6 => fixed!(F32, f32),
            7 => {
                let at = self.at;
                let bytes = self.take(n, what)?;
                match bytes.iter().position(|b| *b > 1) {
                    Some(i) => return Err(err(at + i, format!("{what}: bool byte is {}, not 0 or 1", bytes[i]))),
                    None => Array::Bool(bytes.iter().map(|b| *b == 1).collect()),
                }
            }
            8 => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.string(what)?);
                }
                Array::String(v)
            }
            9 => {
                let mut v = Vec::with_capacity(n);
                for _ in 0..n {
                    v.push(self.array(what, depth + 1)?);
                }
                Array::Array(v)
            }
            10 => fixed!(U64, u64),
            11 => fixed!(I64, i64),
            _ => fixed!(F64, f64),
        })
    }

    fn value(&mut self, ty: u32, what: &str, depth: usize) -> Result<Value> {
        Ok(match ty {
            0 => Value::U8(self.arr::<1>(what)?[0]),
            1 => Value::I8(self.arr::<1>(what)?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.arr(what)?)),
            3 => Value::I16(i16::from_le_bytes(self.arr(what)?)),
            4 => Value::U32(self.u32(what)?),
            5 => Value::I32(i32::from_le_bytes(self.arr(what)?)),
            6 => Value::F32(f32::from_le_bytes(self.arr(what)?)),
            7 => {
                let at = self.at;
                match self.arr::<1>(what)?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => return Err(err(at, format!("{what}: bool byte is {b}, not 0 or 1"))),
                }
            }
            8 => Value::String(self.string(what)?),
            9 => Value::Array(self.array(what, depth)?),
            10 => Value::U64(self.u64(what)?),
            11 => Value::I64(i64::from_le_bytes(self.arr(what)?)),
            12 => Value::F64(f64::from_le_bytes(self.arr(what)?)),
            t => return Err(err(self.at.saturating_sub(4), format!("{what}: unknown metadata value type {t}"))),
        })
    }
}

/// Parses and validates a whole GGUF file image.
pub fn parse(file: &[u8]) -> Result<GgufHeader> {
    let mut c = Cursor { b: file, at: 0 };
    let magic = c.u32("magic")?;
    if magic != MAGIC {
        return Err(err(0, format!("magic is {magic:#010x}, not GGUF")));
    }
    let version = c.u32("version")?;
    if (2..=3).contains(&version.swap_bytes()) {
        return Err(err(
            4,
            format!(
                "version field {version:#010x} is a byte-swapped {}: a big-endian GGUF; only little-endian files are supported",
                version.swap_bytes()
            ),
        ));
    }
    if !(2..=3).contains(&version) {
        return Err(err(4, format!("version {version} is not supported (2 and 3 are)")));
    }
    // Each tensor info takes at least 8 (name) + 4 + 4 + 8 bytes, each key/value at least 8 + 4 + 1.
    let n_tensors = c.count("tensor count", 24)?;
    let n_kv = c.count("metadata count", 13)?;
    let mut metadata = Vec::with_capacity(n_kv);
    for i in 0..n_kv {
        let key_bytes = c.string(&format!("metadata key #{i}"))?;
        let key = String::from_utf8(key_bytes).map_err(|_| err(c.at, format!("metadata key #{i} is not UTF-8")))?;
        let ty = c.u32(&format!("type of `{key}`"))?;
        let v = c.value(ty, &format!("value of `{key}`"), 0)?;
        metadata.push((key, v));
    }
    let alignment = match metadata.iter().find(|(k, _)| k == "general.alignment") {
        None => DEFAULT_ALIGNMENT,
        Some((_, Value::U32(a))) if *a > 0 && a.is_power_of_two() => *a as u64,
        Some((_, v)) => return Err(err(c.at, format!("general.alignment must be a power-of-two u32, got {v:?}"))),
    };
    let mut tensors = Vec::with_capacity(n_tensors);
    for i in 0..n_tensors {
        let at = c.at;
        let name = String::from_utf8(c.string(&format!("tensor #{i} name"))?)
            .map_err(|_| err(at, format!("tensor #{i} name is not UTF-8")))?;
        let nd = c.u32(&format!("`{name}` rank"))?;
        if nd == 0 || nd > MAX_DIMS {
            return Err(err(c.at - 4, format!("`{name}` has {nd} dimensions (1..={MAX_DIMS} allowed)")));
        }
        let mut dims = Vec::with_capacity(nd as usize);
        for _ in 0..nd {
            dims.push(c.u64(&format!("`{name}` dimension"))?);
        }
        let tat = c.at;
        let ty =
            GgmlType::from_id(c.u32(&format!("`{name}` type"))?).map_err(|e| err(tat, format!("`{name}`: {e}")))?;
        let offset = c.u64(&format!("`{name}` offset"))?;
        let numel = dims
            .iter()
            .try_fold(1u64, |a, d| a.checked_mul(*d))
            .ok_or_else(|| err(at, format!("`{name}`: element count overflows")))?;
        if numel == 0 {
            return Err(err(at, format!("`{name}` has a zero dimension")));
        }
        if dims[0] % ty.block_size() as u64 != 0 {
            return Err(err(
                at,
                format!("`{name}`: first dimension {} is not a multiple of the {ty:?} block size", dims[0]),
            ));
        }
        if offset % alignment != 0 {
            return Err(err(tat + 4, format!("`{name}`: offset {offset} is not aligned to {alignment}")));
        }
        if tensors.iter().any(|t: &TensorInfo| t.name == name) {
            return Err(err(at, format!("duplicate tensor name `{name}`")));
        }
        tensors.push(TensorInfo { name, dims, ty, offset });
    }
    let data_offset = (c.at as u64).div_ceil(alignment) * alignment;
    if data_offset > file.len() as u64 && !tensors.is_empty() {
        return Err(err(c.at, "the data section starts past the end of the file"));
    }
    let data_len = (file.len() as u64).saturating_sub(data_offset);
    let mut ranges = Vec::with_capacity(tensors.len());
    for t in &tensors {
        let n =
            t.ty.bytes_for(usize::try_from(t.numel()).map_err(|_| err(0, format!("`{}` is too large", t.name)))?)
                .map_err(|e| err(0, format!("`{}`: {e}", t.name)))? as u64;
        let end = t.offset.checked_add(n).filter(|e| *e <= data_len);
        match end {
            Some(e) => ranges.push((t.offset, e, &t.name)),
            None => {
                return Err(err(
                    data_offset as usize,
                    format!(
                        "`{}`: data [{}, +{n}) runs past the {data_len}-byte data section (truncated file?)",
                        t.name, t.offset
                    ),
                ))
            }
        }
    }
    ranges.sort();
    for w in ranges.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(err(data_offset as usize, format!("tensors `{}` and `{}` overlap", w[0].2, w[1].2)));
        }
    }
    Ok(GgufHeader { version, metadata, tensors, alignment, data_offset })
}
