//! The typed error every fallible fucina call returns.

use crate::dtype::DType;
use std::sync::Arc;

/// Everything that can go wrong at run time; compile-time axis mistakes never get here.
/// New kinds may be added, so a `match` on it needs a wildcard arm.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
#[non_exhaustive]
pub enum FucinaError {
    /// Two operands disagree on the size of a named axis.
    #[error("size mismatch on axis `{axis}`: {left} vs {right}")]
    ShapeMismatch {
        /// The axis, by name.
        axis: String,
        /// The left operand's value.
        left: usize,
        /// The right operand's value.
        right: usize,
    },
    /// The number of sizes given does not match the number of axes of the type.
    #[error("rank mismatch: the axes {axes:?} need {expected} sizes, got {got}")]
    RankMismatch {
        /// The axes of the tensor type.
        axes: Vec<&'static str>,
        /// How many were expected.
        expected: usize,
        /// How many were given.
        got: usize,
    },
    /// A data buffer has the wrong number of elements for the shape.
    #[error("element count mismatch: shape {shape:?} holds {expected} elements, data has {got}")]
    ElementCount {
        /// The shape asked for.
        shape: Vec<usize>,
        /// How many were expected.
        expected: usize,
        /// How many were given.
        got: usize,
    },
    /// An op does not support this dtype.
    #[error("dtype {dtype:?} is not supported by {op}")]
    UnsupportedDType {
        /// The op that refused.
        op: &'static str,
        /// The dtype it was given.
        dtype: DType,
    },
    /// Two dtypes cannot be combined.
    #[error("dtype mismatch in {op}: {left:?} vs {right:?}")]
    DTypeMismatch {
        /// The op that refused.
        op: &'static str,
        /// The left operand's value.
        left: DType,
        /// The right operand's value.
        right: DType,
    },
    /// An index or range falls outside an axis.
    #[error("index out of range on axis `{axis}`: {index} (size {size})")]
    OutOfRange {
        /// The axis, by name.
        axis: String,
        /// The index asked for.
        index: usize,
        /// The axis's size.
        size: usize,
    },
    /// The same axis name appears twice in a tensor type.
    #[error("duplicate axis `{0}` in a tensor type")]
    DuplicateAxis(&'static str),
    /// A view cannot be expressed with strides (e.g. reshape of a non-contiguous tensor).
    #[error("invalid view: {0}")]
    InvalidView(String),
    /// An argument is outside what the op accepts.
    #[error("invalid argument to {op}: {msg}")]
    InvalidArgument {
        /// The op that refused.
        op: &'static str,
        /// What is wrong, in words.
        msg: String,
    },
    /// A parameter name was not found (module load).
    #[error("missing tensor `{0}`")]
    MissingTensor(String),
    /// An I/O error, with the path that caused it; the `std::io::Error` is its source.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file (or stream) the operation was on.
        path: String,
        /// What the operating system said.
        #[source]
        source: IoSource,
    },
    /// A file does not follow its format.
    #[error("malformed {format} file: {msg}")]
    Format {
        /// The format's name.
        format: &'static str,
        /// What is wrong, in words.
        msg: String,
    },
    /// Thread pool creation failed.
    #[error("thread pool: {0}")]
    ThreadPool(String),
    /// A buffer sized by a file, a flag or a request cannot be had: the size overflows, the
    /// allocator refused it, or it exceeds the memory the machine has.
    #[error("out of memory: {what} needs {bytes} bytes{}", if *available > 0 { format!(", {available} available") } else { String::new() })]
    OutOfMemory {
        /// What the memory was for.
        what: String,
        /// Bytes asked for (`usize::MAX` when the size itself overflows).
        bytes: usize,
        /// Bytes the machine had available when asked (0: unknown).
        available: usize,
    },
}

impl FucinaError {
    /// An [`FucinaError::Io`] on `path`, keeping `e` as its source.
    ///
    /// ```
    /// use std::error::Error;
    /// let e = fucina::FucinaError::io("model.gguf", std::io::Error::from(std::io::ErrorKind::NotFound));
    /// assert!(e.to_string().starts_with("i/o error on model.gguf"));
    /// let source = e.source().and_then(|s| s.downcast_ref::<fucina::error::IoSource>()).unwrap();
    /// assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
    /// ```
    pub fn io(path: impl Into<String>, e: std::io::Error) -> FucinaError {
        FucinaError::Io { path: path.into(), source: IoSource(Arc::new(e)) }
    }
}

/// A `std::io::Error` as an error's source, shared so that [`FucinaError`] stays `Clone`;
/// two are equal when their kind and message are.
#[derive(Debug, Clone)]
pub struct IoSource(pub Arc<std::io::Error>);

impl IoSource {
    /// The error's kind.
    pub fn kind(&self) -> std::io::ErrorKind {
        self.0.kind()
    }
}

impl PartialEq for IoSource {
    fn eq(&self, o: &Self) -> bool {
        self.0.kind() == o.0.kind() && self.0.to_string() == o.0.to_string()
    }
}

impl std::fmt::Display for IoSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for IoSource {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

/// `Result` with [`FucinaError`] as its default error (another can be named, as with std's).
pub type Result<T, E = FucinaError> = std::result::Result<T, E>;
