//! Typed access to a GGUF model's tensors: shapes checked against what the architecture
//! expects, errors that name the tensor, weights left in the file's pages.

use fucina::formats::gguf::GgufFile;
use fucina::prelude::*;
use fucina::quant::QWeight;
use fucina::tensor::axes::{Axes, Axis};

/// The largest integer a size in model metadata may hold (2^32): larger is an error.
pub const MAX_META_SIZE: usize = 1 << 32;

/// The product of the sizes in `parts`, or an error naming `what` when it overflows or
/// exceeds 2^48 elements (no tensor of a real model comes near; a hostile file's head
/// count times head width must not wrap around and pass the shape checks).
pub fn product(what: &str, parts: &[usize]) -> Result<usize> {
    parts.iter().try_fold(1usize, |a, p| a.checked_mul(*p)).filter(|n| *n <= 1 << 48).ok_or_else(|| {
        FucinaError::Format { format: "gguf", msg: format!("{what}: {parts:?} multiply past any model's size") }
    })
}

/// A GGUF file opened for one architecture (`general.architecture`), whose metadata keys
/// are read under that prefix.
pub struct ModelFile {
    /// The mapped file (shared with the weights that view it).
    pub gguf: std::sync::Arc<GgufFile>,
    /// The architecture name, e.g. `qwen3`.
    pub arch: String,
    /// Bytes of weights repacked for this CPU so far ([`ModelFile::matrix`]): memory the
    /// model holds of its own, next to the file's pages.
    repacked: std::sync::atomic::AtomicUsize,
}

impl ModelFile {
    /// Opens (maps) `path` and checks that its architecture is one of `accepted`.
    pub fn open(path: impl AsRef<std::path::Path>, accepted: &[&str]) -> Result<ModelFile> {
        ModelFile::open_with(path, accepted, false)
    }

    /// As [`ModelFile::open`]; with `resident`, the file is read into (huge-page) memory
    /// instead of mapped.
    pub fn open_with(path: impl AsRef<std::path::Path>, accepted: &[&str], resident: bool) -> Result<ModelFile> {
        let gguf = if resident { GgufFile::open_resident(path)? } else { GgufFile::open(path)? };
        ModelFile::from_gguf(gguf, accepted)
    }

    /// An already parsed GGUF, checked to be one of the `accepted` architectures.
    pub fn from_gguf(gguf: GgufFile, accepted: &[&str]) -> Result<ModelFile> {
        let arch = gguf
            .header()
            .get("general.architecture")
            .and_then(|v| v.as_str())
            .ok_or_else(|| FucinaError::Format { format: "gguf", msg: "no general.architecture".into() })?
            .to_string();
        if !accepted.contains(&arch.as_str()) {
            return Err(FucinaError::Format {
                format: "gguf",
                msg: format!("architecture `{arch}` is not supported here (expected one of {accepted:?})"),
            });
        }
        Ok(ModelFile { gguf: std::sync::Arc::new(gguf), arch, repacked: Default::default() })
    }

    /// A shared handle on the mapped file.
    pub fn gguf_shared(&self) -> std::sync::Arc<GgufFile> {
        self.gguf.clone()
    }

    /// Integer metadata `<arch>.<key>`, required.
    pub fn usize(&self, key: &str) -> Result<usize> {
        self.opt_usize(key)?.ok_or_else(|| self.missing(key))
    }

    /// Integer metadata `<arch>.<key>`, if present. Values above [`MAX_META_SIZE`] are
    /// errors: no real model has a size that large, and a hostile one must not reach the
    /// arithmetic and allocations that sizes feed.
    pub fn opt_usize(&self, key: &str) -> Result<Option<usize>> {
        let full = format!("{}.{key}", self.arch);
        match self.gguf.header().get(&full) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(x) if x <= MAX_META_SIZE as u64 => Ok(Some(x as usize)),
                Some(x) => Err(FucinaError::Format {
                    format: "gguf",
                    msg: format!("`{full}` = {x} is beyond any model (the limit is {MAX_META_SIZE})"),
                }),
                None => Err(FucinaError::Format { format: "gguf", msg: format!("`{full}` is not an integer") }),
            },
        }
    }

    /// Checks that a file claiming `layers` blocks can hold them (every block has at least
    /// one tensor), before anything is sized by the count.
    pub fn check_layers(&self, layers: usize) -> Result<()> {
        let tensors = self.gguf.header().tensors.len();
        if layers > tensors {
            return Err(FucinaError::Format {
                format: "gguf",
                msg: format!("`{}.block_count` = {layers}, but the file has only {tensors} tensors", self.arch),
            });
        }
        Ok(())
    }

    /// Float metadata `<arch>.<key>`, or `default` when absent.
    pub fn f32_or(&self, key: &str, default: f32) -> Result<f32> {
        let full = format!("{}.{key}", self.arch);
        match self.gguf.header().get(&full) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .map(|x| x as f32)
                .ok_or_else(|| FucinaError::Format { format: "gguf", msg: format!("`{full}` is not a number") }),
        }
    }

    fn missing(&self, key: &str) -> FucinaError {
        FucinaError::Format { format: "gguf", msg: format!("missing metadata `{}.{key}`", self.arch) }
    }

    /// Whether tensor `name` exists.
    pub fn has(&self, name: &str) -> bool {
        self.gguf.tensor_info(name).is_ok()
    }

    /// The `[rows, cols]` matrix `name` (GGUF lists it as `[cols, rows]`), kept in its format,
    /// in the layout the backend wants for this CPU ([`QWeight::prepared`]: a repacked copy, or
    /// the file's bytes).
    pub fn matrix<O: Axis, I: Axis>(&self, name: &str, rows: usize, cols: usize) -> Result<QWeight<O, I>> {
        let w = self.table(name, rows, cols)?;
        self.prepare(w)
    }

    /// The `[rows, cols]` table `name` in the file's own bytes (not repacked): for tables
    /// only read a row at a time ([`QWeight::lookup`]), such as Gemma 4's per-layer
    /// embeddings, whose pages stay in the file and are read where a token needs them.
    pub fn table<O: Axis, I: Axis>(&self, name: &str, rows: usize, cols: usize) -> Result<QWeight<O, I>> {
        let t = self.gguf.tensor_info(name)?;
        if t.shape() != [rows, cols] {
            return Err(FucinaError::Format {
                format: "gguf",
                msg: format!("tensor `{name}` has shape {:?}, the config needs [{rows}, {cols}]", t.shape()),
            });
        }
        QWeight::from_shared(t.ty, rows, cols, self.gguf.tensor_shared(name)?)
            .map_err(|e| FucinaError::Format { format: "gguf", msg: format!("tensor `{name}`: {e}") })
    }

    /// `w` in the layout the backend wants for this CPU ([`QWeight::prepared`]), counted in
    /// [`ModelFile::repacked_bytes`]: for matrices that stay resident (not for experts streamed
    /// from the file's pages, whose bytes must stay the file's).
    /// The file's pages of a repacked matrix are released (they are not read again), so the
    /// memory the process holds counts the weight once.
    pub fn prepare<O: Axis, I: Axis>(&self, w: QWeight<O, I>) -> Result<QWeight<O, I>> {
        let file = self.gguf.bytes().as_ptr_range();
        let range = w.bytes().as_ptr_range();
        let at = (file.start <= range.start && range.end <= file.end)
            .then(|| (range.start as usize - file.start as usize, w.bytes().len()));
        let w = w.prepared()?;
        if let (true, Some((offset, len))) = (w.is_repacked(), at) {
            self.gguf.release(offset, len);
        }
        self.repacked.fetch_add(w.resident_bytes(), std::sync::atomic::Ordering::Relaxed);
        Ok(w)
    }

    /// Bytes of weights [`ModelFile::matrix`] repacked into this CPU's layouts so far (the
    /// model's own memory on top of the file's pages, which it then no longer reads).
    pub fn repacked_bytes(&self) -> usize {
        self.repacked.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The stack of `n` matrices `[n, rows, cols]` named `name` (MoE experts), as one
    /// [`QWeight`] per matrix over the file's bytes (in the file's layout: a model that keeps
    /// them resident repacks them with [`ModelFile::prepare`]).
    pub fn matrices<O: Axis, I: Axis>(
        &self,
        name: &str,
        n: usize,
        rows: usize,
        cols: usize,
    ) -> Result<Vec<QWeight<O, I>>> {
        let t = self.gguf.tensor_info(name)?;
        if t.shape() != [n, rows, cols] {
            return Err(FucinaError::Format {
                format: "gguf",
                msg: format!("tensor `{name}` has shape {:?}, the config needs [{n}, {rows}, {cols}]", t.shape()),
            });
        }
        let all = self.gguf.tensor_shared(name)?;
        let per = t.ty.bytes_for(cols)? * rows;
        (0..n)
            .map(|e| {
                let bytes = all.slice(e * per, per).ok_or_else(|| FucinaError::Format {
                    format: "gguf",
                    msg: format!("tensor `{name}`: expert {e} lies outside its data"),
                })?;
                QWeight::from_shared(t.ty, rows, cols, bytes)
                    .map_err(|e| FucinaError::Format { format: "gguf", msg: format!("tensor `{name}`: {e}") })
            })
            .collect()
    }

    /// The per-pair RoPE frequency divisors `rope_freqs` (Llama 3's factors, Gemma 4's
    /// proportional RoPE), `pairs` of them, each finite and positive; all 1 when the file has
    /// none.
    pub fn rope_factors(&self, pairs: usize) -> Result<Vec<f32>> {
        if !self.has("rope_freqs.weight") {
            return Ok(vec![1.0; pairs]);
        }
        let t: Tensor<axes![head_dim]> = self.dense("rope_freqs.weight", &[pairs])?;
        let v = t.to_f32_vec();
        if let Some(bad) = v.iter().find(|x| !(x.is_finite() && **x > 0.0)) {
            return Err(FucinaError::Format { format: "gguf", msg: format!("rope_freqs holds {bad}") });
        }
        Ok(v)
    }

    /// Boolean metadata `<arch>.<key>`, or `default` when absent.
    pub fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        let full = format!("{}.{key}", self.arch);
        match self.gguf.header().get(&full) {
            None => Ok(default),
            Some(fucina::formats::gguf::Value::Bool(b)) => Ok(*b),
            Some(_) => Err(FucinaError::Format { format: "gguf", msg: format!("`{full}` is not a boolean") }),
        }
    }

    /// Tensor `name` decoded to f32 under axes `A`, with its shape checked.
    pub fn dense<A: Axes>(&self, name: &str, shape: &[usize]) -> Result<Tensor<A>> {
        let (have, data) = self.gguf.tensor_f32(name)?;
        if have != shape {
            return Err(FucinaError::Format {
                format: "gguf",
                msg: format!("tensor `{name}` has shape {have:?}, the config needs {shape:?}"),
            });
        }
        Tensor::from_vec(data, shape)
    }
}
