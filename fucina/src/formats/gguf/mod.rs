//! GGUF v2/v3: header, metadata key/values of every type, tensor infos, aligned data.
//!
//! [`GgufFile::open`] maps the file and parses it with every read bounds-checked, every
//! count and length checked against the bytes that remain, so a truncated or hostile file
//! gives a [`FucinaError::Format`] naming the field and offset, never a panic or a large
//! allocation. Tensor data stays in the map ([`GgufFile::tensor_data`] is zero-copy).
//! [`write_gguf`] emits a parsed file back byte for byte.

mod module_io;
mod reader;
mod value;
mod writer;

pub use module_io::ModuleGguf;

pub use reader::parse;
pub use value::{Array, Value};
pub use writer::{assign_offsets, write_gguf, write_gguf_to};

use crate::error::{FucinaError, Result};
use crate::quant::GgmlType;
use crate::storage::SharedBytes;
use std::path::Path;
use std::sync::Arc;

/// The GGUF magic, "GGUF" little endian.
pub const MAGIC: u32 = 0x4655_4747;
/// Default data alignment when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// One tensor's entry in the header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Tensor name.
    pub name: String,
    /// Sizes, ggml order (fastest-varying first).
    pub dims: Vec<u64>,
    /// Element type.
    pub ty: GgmlType,
    /// Offset of the data from the start of the data section.
    pub offset: u64,
}

impl TensorInfo {
    /// Number of elements.
    pub fn numel(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Bytes of data.
    pub fn nbytes(&self) -> Result<usize> {
        self.ty.bytes_for(self.numel() as usize)
    }

    /// Sizes in row-major (slowest-first) order, as fucina tensors use.
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|d| *d as usize).collect()
    }
}

/// A parsed GGUF header.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufHeader {
    /// Format version (2 or 3).
    pub version: u32,
    /// Metadata in file order.
    pub metadata: Vec<(String, Value)>,
    /// Tensor infos in file order.
    pub tensors: Vec<TensorInfo>,
    /// Data alignment.
    pub alignment: u64,
    /// Offset of the data section in the file.
    pub data_offset: u64,
}

impl GgufHeader {
    /// A metadata value by key.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

/// The whole pages covering `offset..offset + len` of a map of `total` bytes, clipped to the
/// map: `(start, length)`, or `None` if empty.
fn page_range(offset: usize, len: usize, total: usize) -> Option<(usize, usize)> {
    const PAGE: usize = 4096;
    let end = offset.checked_add(len)?.min(total);
    let start = offset / PAGE * PAGE;
    let end = end.div_ceil(PAGE).saturating_mul(PAGE).min(total);
    (end > start).then_some((start, end - start))
}

/// A memory-mapped GGUF file.
pub struct GgufFile {
    map: Arc<memmap2::Mmap>,
    header: GgufHeader,
    /// Whether `map` maps the file itself (its pages can be dropped and read again), rather
    /// than anonymous memory holding a copy (whose dropped pages would read back as zeros).
    file_backed: bool,
}

impl GgufFile {
    /// Maps and parses a file.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let io = |e: std::io::Error| FucinaError::io(path.display().to_string(), e);
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only and only read through bounds-checked slices; another
        // process truncating the file while it is mapped is outside what any reader can guard.
        let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }.map_err(io)?;
        let header = parse(&map)?;
        Ok(GgufFile { map: Arc::new(map), header, file_backed: true })
    }

    /// Reads a whole file into anonymous memory (asking the kernel for huge pages) and
    /// parses it: like llama.cpp's `--no-mmap`. Costs RAM for the whole file, saves TLB
    /// misses and page-cache mapping in the hot loops; [`GgufFile::open`] maps instead.
    pub fn open_resident(path: impl AsRef<Path>) -> Result<GgufFile> {
        use std::io::Read;
        let path = path.as_ref();
        let io = |e: std::io::Error| FucinaError::io(path.display().to_string(), e);
        let mut file = std::fs::File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len() as usize;
        let mut mem = memmap2::MmapMut::map_anon(len.max(1)).map_err(io)?;
        #[cfg(target_os = "linux")]
        {
            // A hint; without transparent huge pages the memory is still ordinary pages.
            let _ = mem.advise(memmap2::Advice::HugePage);
        }
        file.read_exact(&mut mem[..len]).map_err(io)?;
        let map = mem.make_read_only().map_err(io)?;
        let header = parse(&map[..len])?;
        Ok(GgufFile { map: Arc::new(map), header, file_backed: false })
    }

    /// Parses a GGUF image held in memory (copied into an aligned anonymous map, so the
    /// tensors are viewed as from a file).
    pub fn from_bytes(bytes: &[u8]) -> Result<GgufFile> {
        let io = |e: std::io::Error| FucinaError::io("in-memory gguf", e);
        let mut mem = memmap2::MmapMut::map_anon(bytes.len().max(1)).map_err(io)?;
        mem[..bytes.len()].copy_from_slice(bytes);
        let map = mem.make_read_only().map_err(io)?;
        let header = parse(&map[..bytes.len()])?;
        Ok(GgufFile { map: Arc::new(map), header, file_backed: false })
    }

    /// Asks the kernel to start reading bytes `offset..offset + len` of the file in the
    /// background (`MADV_WILLNEED`); a hint, errors ignored.
    pub fn prefetch(&self, offset: usize, len: usize) {
        if let Some((start, n)) = page_range(offset, len, self.map.len()) {
            let _ = self.map.advise_range(memmap2::Advice::WillNeed, start, n);
        }
    }

    /// Tells the kernel the pages of bytes `offset..offset + len` are not needed now
    /// (`MADV_DONTNEED`): they may be dropped from memory and are read again from the file
    /// on the next access. A hint, errors ignored; nothing at all when the bytes are a copy in
    /// anonymous memory ([`GgufFile::open_resident`], [`GgufFile::from_bytes`]), whose dropped
    /// pages would come back as zeros.
    pub fn release(&self, offset: usize, len: usize) {
        if !self.file_backed {
            return;
        }
        if let Some((start, n)) = page_range(offset, len, self.map.len()) {
            // SAFETY: the map is a read-only shared mapping of a file: after DONTNEED the
            // pages are refilled from the file on the next access, so every byte read later
            // is the same byte; no slice into the map observes a change.
            let _ = unsafe { self.map.unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, n) };
        }
    }

    /// The header.
    pub fn header(&self) -> &GgufHeader {
        &self.header
    }

    /// The whole mapped file.
    pub fn bytes(&self) -> &[u8] {
        &self.map
    }

    /// The info of tensor `name`.
    pub fn tensor_info(&self, name: &str) -> Result<&TensorInfo> {
        self.header.tensors.iter().find(|t| t.name == name).ok_or_else(|| FucinaError::MissingTensor(name.to_string()))
    }

    /// The raw bytes of tensor `name`, zero-copy from the map.
    pub fn tensor_data(&self, name: &str) -> Result<&[u8]> {
        let t = self.tensor_info(name)?;
        tensor_bytes(&self.map, &self.header, t)
    }

    /// The bytes of tensor `name` as a shared handle on the map (no copy; the map lives as
    /// long as any handle does).
    pub fn tensor_shared(&self, name: &str) -> Result<SharedBytes> {
        let t = self.tensor_info(name)?;
        let data = tensor_bytes(&self.map, &self.header, t)?;
        let start = data.as_ptr() as usize - self.map.as_ptr() as usize;
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = self.map.clone();
        SharedBytes::from_owner(owner, start, data.len()).ok_or_else(|| FucinaError::Format {
            format: "gguf",
            msg: format!("tensor `{name}` lies outside the file"),
        })
    }

    /// Tensor `name` dequantized to f32, in row-major shape.
    pub fn tensor_f32(&self, name: &str) -> Result<(Vec<usize>, Vec<f32>)> {
        let t = self.tensor_info(name)?;
        let data = tensor_bytes(&self.map, &self.header, t)?;
        Ok((t.shape(), crate::quant::dequantize(t.ty, data, t.numel() as usize)?))
    }
}

/// The data bytes of `t` inside `file` (already validated by [`parse`], checked again).
pub fn tensor_bytes<'a>(file: &'a [u8], h: &GgufHeader, t: &TensorInfo) -> Result<&'a [u8]> {
    let start = h.data_offset.checked_add(t.offset).filter(|s| *s <= file.len() as u64);
    let n = t.nbytes()? as u64;
    match start.and_then(|s| s.checked_add(n).filter(|e| *e <= file.len() as u64).map(|e| (s, e))) {
        Some((s, e)) => Ok(&file[s as usize..e as usize]),
        None => Err(FucinaError::Format {
            format: "gguf",
            msg: format!("tensor `{}` data runs past the end of the file", t.name),
        }),
    }
}
