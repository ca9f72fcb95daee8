//! fucina: eager, CPU-first deep learning with named axes checked by the compiler.
//!
//! Layers, bottom up (a module only uses the ones before it; `tests/layering.rs` checks):
//! `error`/`dtype`/`storage`/`rng` → `tensor` (+ `axis`) → `backend` → `exec`/`ops` → `autograd`
//! → `nn`/`optim` → `formats`/`quant`.
//!
//! ```
//! use fucina::prelude::*;
//!
//! let x = Tensor::<axes![batch, in]>::from_vec(vec![1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
//! let w = Tensor::<axes![out, in]>::from_vec(vec![1.0f32, 0.0, -1.0, 0.5, 0.5, 0.5], &[2, 3])?;
//! let y: Tensor<axes![batch, out]> = einsum!(x, w; in ->)?;
//! assert_eq!(y.to_f32_vec(), vec![-2.0, 3.0, -2.0, 7.5]);
//! # Ok::<(), fucina::FucinaError>(())
//! ```

extern crate self as fucina;

pub mod autograd;
pub mod axis;
pub mod backend;
pub mod dtype;
pub mod error;
pub mod exec;
pub mod formats;
pub mod nn;
pub mod ops;
pub mod optim;
pub mod quant;
pub mod rng;
pub mod storage;
pub mod tensor;

#[doc(hidden)]
pub use typenum;

pub use backend::BackendKind;
pub use dtype::DType;
pub use error::{FucinaError, Result};
pub use exec::{ExecConfig, ExecContext};
pub use fucina_macros::{axes, axis, einsum, Module};
pub use nn::Module;
pub use tensor::{RawTensor, Tensor};

/// The guides, rendered with the API documentation; their examples run as doctests.
pub mod guides {
    #[doc = include_str!("../../docs/DSL.md")]
    pub mod dsl {}

    #[doc = include_str!("../../docs/TRAINING.md")]
    pub mod training {}
}

/// Everything a model file needs: the macros, `Tensor`, `Module`, the standard axes.
pub mod prelude {
    pub use crate::axis::*;
    pub use crate::formats::safetensors::ModuleIo;
    pub use crate::ops::{Conv1dOptions, Padding};
    pub use crate::{
        axes, axis, einsum, BackendKind, DType, ExecConfig, ExecContext, FucinaError, Module, Result, Tensor,
    };
}
