//! safetensors: an 8-byte little-endian header length, a JSON header, then raw data.
//!
//! The reader maps the file (`memmap2`) and validates the header before any tensor is
//! touched: offsets in bounds, sizes consistent with dtype and shape, no overlaps.

mod module_io;

pub use module_io::ModuleIo;

use crate::dtype::DType;
use crate::error::{FucinaError, Result};
use crate::storage::Buffer;
use crate::tensor::RawTensor;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::Path;

/// Largest header accepted (the format's own reference limit is 100 MB).
const MAX_HEADER: u64 = 100 << 20;

fn err(msg: impl Into<String>) -> FucinaError {
    FucinaError::Format { format: "safetensors", msg: msg.into() }
}

fn io_err(path: &Path, e: std::io::Error) -> FucinaError {
    FucinaError::io(path.display().to_string(), e)
}

/// A safetensors element type: every one the format defines, so a checkpoint that also
/// holds integer or boolean tensors (position ids, masks, step counters) opens; the float
/// ones fucina computes in load as tensors, the others are there as bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StDtype {
    /// `BOOL` (one byte)
    Bool,
    /// `U8`
    U8,
    /// `I8`
    I8,
    /// `F8_E4M3`
    F8E4M3,
    /// `F8_E5M2`
    F8E5M2,
    /// `I16`
    I16,
    /// `U16`
    U16,
    /// `F16`
    F16,
    /// `BF16`
    BF16,
    /// `I32`
    I32,
    /// `U32`
    U32,
    /// `F32`
    F32,
    /// `I64`
    I64,
    /// `U64`
    U64,
    /// `F64`
    F64,
}

const ST_DTYPES: [(StDtype, &str, usize); 15] = [
    (StDtype::Bool, "BOOL", 1),
    (StDtype::U8, "U8", 1),
    (StDtype::I8, "I8", 1),
    (StDtype::F8E4M3, "F8_E4M3", 1),
    (StDtype::F8E5M2, "F8_E5M2", 1),
    (StDtype::I16, "I16", 2),
    (StDtype::U16, "U16", 2),
    (StDtype::F16, "F16", 2),
    (StDtype::BF16, "BF16", 2),
    (StDtype::I32, "I32", 4),
    (StDtype::U32, "U32", 4),
    (StDtype::F32, "F32", 4),
    (StDtype::I64, "I64", 8),
    (StDtype::U64, "U64", 8),
    (StDtype::F64, "F64", 8),
];

impl StDtype {
    /// Parses a header's dtype string.
    pub fn parse(s: &str) -> Option<StDtype> {
        ST_DTYPES.iter().find(|d| d.1 == s).map(|d| d.0)
    }

    /// The header's name of the type.
    pub fn name(self) -> &'static str {
        ST_DTYPES.iter().find(|d| d.0 == self).map_or("?", |d| d.1)
    }

    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        ST_DTYPES.iter().find(|d| d.0 == self).map_or(1, |d| d.2)
    }

    /// The fucina dtype a tensor of this type loads as, if there is one.
    pub fn to_dtype(self) -> Option<DType> {
        DType::from_safetensors_name(self.name())
    }
}

/// One tensor entry of a header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Element type.
    pub dtype: StDtype,
    /// Sizes.
    pub shape: Vec<usize>,
    /// Byte range within the data section.
    pub start: usize,
    /// End of the byte range.
    pub end: usize,
}

/// A memory-mapped safetensors file with a validated header.
pub struct SafeTensors {
    map: memmap2::Mmap,
    data_start: usize,
    tensors: BTreeMap<String, TensorInfo>,
    metadata: BTreeMap<String, String>,
}

impl SafeTensors {
    /// Maps and validates a file.
    pub fn open(path: impl AsRef<Path>) -> Result<SafeTensors> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| io_err(path, e))?;
        // SAFETY: the map is read-only; the file may change underneath only if another process
        // writes it, which would also break any reader; we never hand out references past validation.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| io_err(path, e))?;
        let (data_start, tensors, metadata) = parse_header(&map)?;
        Ok(SafeTensors { map, data_start, tensors, metadata })
    }

    /// Tensor names and entries.
    pub fn tensors(&self) -> &BTreeMap<String, TensorInfo> {
        &self.tensors
    }

    /// The `__metadata__` strings.
    pub fn metadata(&self) -> &BTreeMap<String, String> {
        &self.metadata
    }

    /// The raw bytes of a tensor.
    pub fn bytes(&self, name: &str) -> Result<&[u8]> {
        let info = self.tensors.get(name).ok_or_else(|| FucinaError::MissingTensor(name.to_string()))?;
        Ok(&self.map[self.data_start + info.start..self.data_start + info.end])
    }

    /// A tensor copied out of the map (F32, F16, BF16 and U32 tensors; the others are an
    /// error naming their type, and [`SafeTensors::bytes`] gives their data).
    pub fn load(&self, name: &str) -> Result<RawTensor> {
        let info = self.tensors.get(name).ok_or_else(|| FucinaError::MissingTensor(name.to_string()))?;
        let dtype = info.dtype.to_dtype().ok_or_else(|| {
            err(format!(
                "tensor `{name}` is {}, which fucina tensors do not hold (its bytes are readable with `bytes`)",
                info.dtype.name()
            ))
        })?;
        let bytes = self.bytes(name)?;
        let buf = Buffer::from_le_bytes(dtype, bytes).ok_or_else(|| err(format!("tensor `{name}`: ragged data")))?;
        RawTensor::from_buffer(buf, &info.shape)
    }
}

/// A parsed header: where the data section starts, the tensors, the metadata.
pub type Header = (usize, BTreeMap<String, TensorInfo>, BTreeMap<String, String>);

/// Parses and validates the header of a whole file image.
pub fn parse_header(file: &[u8]) -> Result<Header> {
    if file.len() < 8 {
        return Err(err(format!("file is {} bytes, shorter than the 8-byte header length", file.len())));
    }
    let n = u64::from_le_bytes([file[0], file[1], file[2], file[3], file[4], file[5], file[6], file[7]]);
    if n > MAX_HEADER {
        return Err(err(format!("header length {n} exceeds the {MAX_HEADER}-byte limit")));
    }
    let n = n as usize;
    if 8 + n > file.len() {
        return Err(err(format!("header length {n} runs past the end of the {}-byte file", file.len())));
    }
    let header: serde_json::Value =
        serde_json::from_slice(&file[8..8 + n]).map_err(|e| err(format!("header is not valid JSON: {e}")))?;
    let obj = header.as_object().ok_or_else(|| err("header is not a JSON object"))?;
    let data_len = file.len() - 8 - n;
    let mut tensors = BTreeMap::new();
    let mut metadata = BTreeMap::new();
    for (name, v) in obj {
        if name == "__metadata__" {
            let m = v.as_object().ok_or_else(|| err("__metadata__ is not an object"))?;
            for (k, val) in m {
                let s = val.as_str().ok_or_else(|| err(format!("metadata `{k}` is not a string")))?;
                metadata.insert(k.clone(), s.to_string());
            }
            continue;
        }
        let e = v.as_object().ok_or_else(|| err(format!("entry `{name}` is not an object")))?;
        let dtype_s = e.get("dtype").and_then(|d| d.as_str()).ok_or_else(|| err(format!("`{name}`: missing dtype")))?;
        let dtype = StDtype::parse(dtype_s).ok_or_else(|| err(format!("`{name}`: unsupported dtype {dtype_s}")))?;
        let shape = e
            .get("shape")
            .and_then(|s| s.as_array())
            .ok_or_else(|| err(format!("`{name}`: missing shape")))?
            .iter()
            .map(|d| d.as_u64().map(|x| x as usize).ok_or_else(|| err(format!("`{name}`: bad shape entry"))))
            .collect::<Result<Vec<usize>>>()?;
        let offs = e
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .filter(|a| a.len() == 2)
            .ok_or_else(|| err(format!("`{name}`: data_offsets must be [begin, end]")))?;
        let start = offs[0].as_u64().ok_or_else(|| err(format!("`{name}`: bad begin offset")))? as usize;
        let end = offs[1].as_u64().ok_or_else(|| err(format!("`{name}`: bad end offset")))? as usize;
        if start > end || end > data_len {
            return Err(err(format!(
                "`{name}`: data_offsets [{start}, {end}] outside the {data_len}-byte data section"
            )));
        }
        let numel = shape.iter().try_fold(1usize, |a, d| a.checked_mul(*d));
        let bytes = numel.and_then(|n| n.checked_mul(dtype.size_in_bytes()));
        if bytes != Some(end - start) {
            return Err(err(format!("`{name}`: shape {shape:?} of {dtype:?} does not fill {} bytes", end - start)));
        }
        tensors.insert(name.clone(), TensorInfo { dtype, shape, start, end });
    }
    let mut ranges: Vec<(usize, usize, &String)> = tensors.iter().map(|(k, t)| (t.start, t.end, k)).collect();
    ranges.sort();
    for w in ranges.windows(2) {
        if w[1].0 < w[0].1 {
            return Err(err(format!("tensors `{}` and `{}` overlap", w[0].2, w[1].2)));
        }
    }
    Ok((8 + n, tensors, metadata))
}

/// Writes named tensors and metadata as a safetensors file.
pub fn save(
    path: impl AsRef<Path>,
    tensors: &[(String, RawTensor)],
    metadata: &BTreeMap<String, String>,
) -> Result<()> {
    let path = path.as_ref();
    let mut header = serde_json::Map::new();
    if !metadata.is_empty() {
        let m: serde_json::Map<String, serde_json::Value> =
            metadata.iter().map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone()))).collect();
        header.insert("__metadata__".into(), serde_json::Value::Object(m));
    }
    let mut blobs = Vec::with_capacity(tensors.len());
    let mut at = 0usize;
    for (name, t) in tensors {
        if header.contains_key(name) {
            return Err(err(format!("duplicate tensor name `{name}`")));
        }
        let bytes = match t.dtype() {
            DType::F32 => Buffer::F32(t.to_f32_vec()).to_le_bytes(),
            DType::F16 => Buffer::F16(t.to_vec()?).to_le_bytes(),
            DType::BF16 => Buffer::BF16(t.to_vec()?).to_le_bytes(),
            DType::U32 => Buffer::U32(t.to_vec()?).to_le_bytes(),
        };
        header.insert(
            name.clone(),
            serde_json::json!({
                "dtype": t.dtype().safetensors_name(),
                "shape": t.shape(),
                "data_offsets": [at, at + bytes.len()],
            }),
        );
        at += bytes.len();
        blobs.push(bytes);
    }
    let mut h = serde_json::to_vec(&serde_json::Value::Object(header)).map_err(|e| err(e.to_string()))?;
    while h.len() % 8 != 0 {
        h.push(b' ');
    }
    // Written next to `path` and renamed into place: a failed write never leaves an
    // existing file half overwritten.
    let tmp = path.with_extension("safetensors.partial");
    let write = || -> Result<()> {
        let mut f = std::io::BufWriter::new(File::create(&tmp).map_err(|e| io_err(&tmp, e))?);
        f.write_all(&(h.len() as u64).to_le_bytes()).map_err(|e| io_err(&tmp, e))?;
        f.write_all(&h).map_err(|e| io_err(&tmp, e))?;
        for b in blobs {
            f.write_all(&b).map_err(|e| io_err(&tmp, e))?;
        }
        f.flush().map_err(|e| io_err(&tmp, e))
    };
    if let Err(e) = write() {
        std::fs::remove_file(&tmp).ok();
        return Err(e);
    }
    std::fs::rename(&tmp, path).map_err(|e| io_err(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_bad_headers() {
        assert!(parse_header(&[1, 2, 3]).is_err());
        let mut f = (1u64 << 40).to_le_bytes().to_vec();
        f.extend_from_slice(b"{}");
        assert!(parse_header(&f).unwrap_err().to_string().contains("exceeds"));
        let h = br#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}"#;
        let mut f = (h.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(h);
        f.extend_from_slice(&[0; 8]);
        assert!(parse_header(&f).unwrap_err().to_string().contains("overlap"));
        let h = br#"{"a":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}}"#;
        let mut f = (h.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(h);
        f.extend_from_slice(&[0; 8]);
        assert!(parse_header(&f).unwrap_err().to_string().contains("unsupported dtype"));
        let h = br#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}"#;
        let mut f = (h.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(h);
        f.extend_from_slice(&[0; 8]);
        assert!(parse_header(&f).unwrap_err().to_string().contains("does not fill"));
    }

    #[test]
    fn integer_and_bool_tensors_open_and_name_their_type() {
        let h = br#"{"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},"mask":{"dtype":"BOOL","shape":[3],"data_offsets":[16,19]},"w":{"dtype":"F32","shape":[1],"data_offsets":[19,23]}}"#;
        let mut f = (h.len() as u64).to_le_bytes().to_vec();
        f.extend_from_slice(h);
        f.extend_from_slice(&7i64.to_le_bytes());
        f.extend_from_slice(&(-1i64).to_le_bytes());
        f.extend_from_slice(&[1, 0, 1]);
        f.extend_from_slice(&2.5f32.to_le_bytes());
        let (_, tensors, _) = parse_header(&f).unwrap();
        assert_eq!(tensors["ids"].dtype, StDtype::I64);
        assert_eq!(tensors["mask"].dtype, StDtype::Bool);
        let path = std::env::temp_dir().join(format!("fucina-st-int-{}.safetensors", std::process::id()));
        std::fs::write(&path, &f).unwrap();
        let st = SafeTensors::open(&path).unwrap();
        assert_eq!(st.load("w").unwrap().to_f32_vec(), vec![2.5]);
        assert!(st.load("ids").unwrap_err().to_string().contains("is I64"));
        assert_eq!(&st.bytes("ids").unwrap()[..8], &7i64.to_le_bytes());
        std::fs::remove_file(&path).ok();
    }
}
