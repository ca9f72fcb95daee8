//! Saving and loading a whole [`Module`] as GGUF: its tensors and its frozen weights (the
//! quantized and half-precision matrices that `#[derive(Module)]` visits) by their dotted
//! names, each frozen weight in its own block format, byte for byte.

use super::{assign_offsets, write_gguf_to, GgufFile, GgufHeader, TensorInfo, Value};
use crate::dtype::DType;
use crate::error::{FucinaError, Result};
use crate::nn::Module;
use crate::quant::GgmlType;
use crate::storage::Buffer;
use crate::tensor::RawTensor;
use std::borrow::Cow;
use std::collections::BTreeSet;
use std::path::Path;

/// The metadata key naming the file's kind.
const KIND_KEY: &str = "general.type";
/// Its value in files [`ModuleGguf::save_gguf`] writes.
const KIND: &str = "fucina.module";

fn bad(op: &'static str, msg: String) -> FucinaError {
    FucinaError::InvalidArgument { op, msg }
}

/// GGUF save/load for every [`Module`], frozen weights included.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::formats::gguf::ModuleGguf;
/// use fucina::quant::{GgmlType, QWeight};
///
/// #[derive(Module)]
/// struct Head {
///     norm: Tensor<axes![hidden]>,
///     proj: QWeight<vocab, hidden>,
/// }
///
/// let w = Tensor::<axes![vocab, hidden]>::from_vec((0..64 * 32).map(|i| (i % 7) as f32 - 3.0).collect(), &[64, 32])?;
/// let head = Head { norm: Tensor::ones(&[32])?, proj: QWeight::quantize(&w, GgmlType::Q8_0)? };
/// let path = std::env::temp_dir().join(format!("fucina-doc-head-{}.gguf", std::process::id()));
/// head.save_gguf(&path)?;
///
/// let mut other = Head { norm: Tensor::zeros(&[32])?, proj: QWeight::quantize(&w.scale(0.5)?, GgmlType::Q4_0)? };
/// other.load_gguf(&path)?;
/// assert_eq!(other.norm.to_f32_vec(), vec![1.0; 32]);
/// assert_eq!(other.proj.ggml_type(), GgmlType::Q8_0);
/// assert_eq!(other.proj.bytes(), head.proj.bytes());
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), fucina::FucinaError>(())
/// ```
pub trait ModuleGguf: Module {
    /// Writes every tensor (in its dtype: F32, F16 or BF16) and every frozen weight (in its
    /// block format, the bytes as they are) under its dotted name. The file is written next
    /// to `path` and renamed into place, so an existing file is never left half written.
    /// A frozen weight repacked for this machine's kernels cannot be written (its bytes are
    /// not its format's): save before `QWeight::prepared`.
    fn save_gguf(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let op = "save_gguf";
        let mut names = BTreeSet::new();
        let mut infos: Vec<TensorInfo> = Vec::new();
        let mut blobs: Vec<Vec<u8>> = Vec::new();
        let mut first_err: Option<FucinaError> = None;
        let mut add = |name: &str, ty: GgmlType, shape: &[usize], bytes: Vec<u8>| -> Result<()> {
            if !names.insert(name.to_string()) {
                return Err(bad(op, format!("two tensors are named `{name}`")));
            }
            infos.push(TensorInfo {
                name: name.to_string(),
                dims: shape.iter().rev().map(|&d| d as u64).collect(),
                ty,
                offset: 0,
            });
            blobs.push(bytes);
            Ok(())
        };
        self.visit_params("", &mut |name, t| {
            if first_err.is_none() {
                if let Err(e) = param_bytes(t).and_then(|(ty, bytes)| add(name, ty, t.shape(), bytes)) {
                    first_err = Some(e);
                }
            }
        });
        self.visit_frozen("", &mut |name, w| {
            if first_err.is_some() {
                return;
            }
            let r = (|| {
                let ty = GgmlType::from_name(&w.format_name())?;
                let bytes = w.stored_bytes().ok_or_else(|| {
                    bad(
                        op,
                        format!(
                            "`{name}` is repacked for this machine's kernels, so its bytes are not {}'s: \
                             save the module before preparing its weights",
                            w.format_name()
                        ),
                    )
                })?;
                add(name, ty, &[w.rows(), w.cols()], bytes.to_vec())
            })();
            if let Err(e) = r {
                first_err = Some(e);
            }
        });
        if let Some(e) = first_err {
            return Err(e);
        }
        let metadata = vec![(KIND_KEY.to_string(), Value::String(KIND.as_bytes().to_vec()))];
        let mut header = GgufHeader { version: 3, metadata, tensors: infos, alignment: 32, data_offset: 0 };
        assign_offsets(&mut header)?;
        let tmp = path.with_extension("gguf.partial");
        let write = || -> Result<()> {
            let file = std::fs::File::create(&tmp).map_err(|e| FucinaError::io(tmp.display().to_string(), e))?;
            let mut w = std::io::BufWriter::new(file);
            write_gguf_to(&mut w, &header, |i| Ok(Cow::Borrowed(&blobs[i][..])))?;
            std::io::Write::flush(&mut w).map_err(|e| FucinaError::io(tmp.display().to_string(), e))
        };
        if let Err(e) = write() {
            std::fs::remove_file(&tmp).ok();
            return Err(e);
        }
        std::fs::rename(&tmp, path).map_err(|e| FucinaError::io(path.display().to_string(), e))
    }

    /// Replaces every tensor and every frozen weight with the same-named one of the file:
    /// tensors must have the same shape (a tensor takes the file's values in its own dtype);
    /// a frozen weight must have the same rows and columns and takes the file's format and
    /// bytes, mapped from the file (in their format's layout, not repacked). The file is
    /// checked before anything changes: a missing name, a shape that differs or a format
    /// with no kernel is an error naming the tensor, and the module is left as it was.
    fn load_gguf(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let file = GgufFile::open(path)?;
        let op = "load_gguf";
        let info = |name: &str, shape: &[usize]| -> Result<TensorInfo> {
            let t = file.tensor_info(name)?;
            if t.shape() != shape {
                return Err(bad(op, format!("`{name}` is {:?} in the file, {shape:?} in the module", t.shape())));
            }
            Ok(t.clone())
        };
        // Check everything first, so that a bad file changes nothing.
        let mut checked: Result<()> = Ok(());
        self.visit_params("", &mut |name, t| {
            if checked.is_ok() {
                checked = info(name, t.shape()).and_then(|i| match i.ty {
                    GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => Ok(()),
                    ty => Err(bad(op, format!("`{name}` is {ty:?} in the file; a tensor loads from F32, F16 or BF16"))),
                });
            }
        });
        self.visit_frozen("", &mut |name, w| {
            if checked.is_ok() {
                checked = info(name, &[w.rows(), w.cols()]).and_then(|i| {
                    w.check_replacement(&format!("{:?}", i.ty), w.rows(), w.cols(), file.tensor_data(name)?.len())
                });
            }
        });
        checked?;
        let mut first_err: Option<FucinaError> = None;
        self.visit_params_mut("", &mut |name, mut slot| {
            if first_err.is_none() {
                let r = (|| {
                    let (shape, values) = file.tensor_f32(name)?;
                    let t = RawTensor::from_buffer(Buffer::F32(values), &shape)?;
                    let t = match slot.get().dtype() {
                        DType::F32 => t,
                        dtype => crate::ops::cast_to(&t, dtype)?,
                    };
                    slot.set(t)
                })();
                first_err = r.err();
            }
        });
        self.visit_frozen_mut("", &mut |name, w| {
            if first_err.is_none() {
                let r = (|| {
                    let t = file.tensor_info(name)?;
                    w.replace(&format!("{:?}", t.ty), w.rows(), w.cols(), file.tensor_shared(name)?)
                })();
                first_err = r.err();
            }
        });
        first_err.map_or(Ok(()), Err)
    }
}

impl<M: Module + ?Sized> ModuleGguf for M {}

/// A tensor's GGUF type and little-endian bytes, in its own dtype.
fn param_bytes(t: &RawTensor) -> Result<(GgmlType, Vec<u8>)> {
    Ok(match t.dtype() {
        DType::F32 => (GgmlType::F32, Buffer::F32(t.to_f32_vec()).to_le_bytes()),
        DType::F16 => (GgmlType::F16, Buffer::F16(t.to_vec()?).to_le_bytes()),
        DType::BF16 => (GgmlType::BF16, Buffer::BF16(t.to_vec()?).to_le_bytes()),
        DType::U32 => {
            return Err(FucinaError::InvalidArgument {
                op: "save_gguf",
                msg: "a u32 tensor has no GGUF parameter type here (F32, F16, BF16)".into(),
            })
        }
    })
}
