//! Parameter initializers, as PyTorch's `torch.nn.init` defines them, drawn from the
//! context's counter-based RNG (so a seeded context gives the same tensors on any backend
//! and thread count).

use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::tensor::axes::Axes;
use crate::tensor::Tensor;

/// How to fill a new parameter. Fans follow PyTorch: for a shape `[out, in, rest..]`,
/// `fan_in = in * rest` and `fan_out = out * rest`; a 1-D shape has `fan_in = fan_out = len`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Init {
    /// All zeros.
    Zeros,
    /// All ones.
    Ones,
    /// Normal with this mean and standard deviation.
    Normal {
        /// Mean.
        mean: f32,
        /// Standard deviation.
        std: f32,
    },
    /// Uniform in `[-bound, bound)`.
    Uniform {
        /// Half-width.
        bound: f32,
    },
    /// `U(-b, b)` with `b = gain * sqrt(3 / fan_in)` (`kaiming_uniform_`, fan-in mode).
    KaimingUniform {
        /// The nonlinearity's gain (`sqrt(2)` for ReLU).
        gain: f32,
    },
    /// `N(0, s)` with `s = gain / sqrt(fan_in)` (`kaiming_normal_`, fan-in mode).
    KaimingNormal {
        /// The nonlinearity's gain.
        gain: f32,
    },
    /// `U(-b, b)` with `b = gain * sqrt(6 / (fan_in + fan_out))` (`xavier_uniform_`).
    XavierUniform {
        /// The nonlinearity's gain (1 for linear / sigmoid).
        gain: f32,
    },
    /// `N(0, s)` with `s = gain * sqrt(2 / (fan_in + fan_out))` (`xavier_normal_`).
    XavierNormal {
        /// The nonlinearity's gain.
        gain: f32,
    },
}

/// `(fan_in, fan_out)` of a parameter shape, PyTorch's way.
pub fn fans(shape: &[usize]) -> Result<(usize, usize)> {
    match shape {
        [] => Err(FucinaError::InvalidArgument { op: "init", msg: "a scalar has no fans".into() }),
        [n] => Ok((*n, *n)),
        [out, inp, rest @ ..] => {
            let field: usize = rest.iter().product();
            Ok((inp * field, out * field))
        }
    }
}

impl Init {
    /// PyTorch's default for `nn.Linear` / `nn.Conv*` weights: `kaiming_uniform_(a = sqrt(5))`,
    /// i.e. `U(-1/sqrt(fan_in), 1/sqrt(fan_in))`.
    pub const TORCH_LINEAR: Init = Init::KaimingUniform { gain: 0.577_350_26 }; // sqrt(2 / (1 + 5))

    /// A new tensor of `shape` filled by this rule.
    ///
    /// ```
    /// use fucina::prelude::*;
    /// use fucina::nn::Init;
    /// let ctx = ExecContext::new(ExecConfig { seed: 7, ..ExecConfig::default() })?;
    /// let w: Tensor<axes![out, in]> = Init::XavierUniform { gain: 1.0 }.tensor(&ctx, &[64, 32])?;
    /// let bound = (6.0f32 / 96.0).sqrt();
    /// assert!(w.to_f32_vec().iter().all(|v| v.abs() <= bound));
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn tensor<A: Axes>(self, ctx: &ExecContext, shape: &[usize]) -> Result<Tensor<A>> {
        let fan = |f: usize| -> Result<f32> {
            if f == 0 {
                Err(FucinaError::InvalidArgument { op: "init", msg: format!("shape {shape:?} has a zero fan") })
            } else {
                Ok(f as f32)
            }
        };
        match self {
            Init::Zeros => Tensor::zeros(shape),
            Init::Ones => Tensor::ones(shape),
            Init::Normal { mean, std } => ctx.randn(shape, mean, std),
            Init::Uniform { bound } => ctx.rand_uniform(shape, -bound, bound),
            Init::KaimingUniform { gain } => {
                let b = gain * (3.0 / fan(fans(shape)?.0)?).sqrt();
                ctx.rand_uniform(shape, -b, b)
            }
            Init::KaimingNormal { gain } => ctx.randn(shape, 0.0, gain / fan(fans(shape)?.0)?.sqrt()),
            Init::XavierUniform { gain } => {
                let (fi, fo) = fans(shape)?;
                let b = gain * (6.0 / fan(fi + fo)?).sqrt();
                ctx.rand_uniform(shape, -b, b)
            }
            Init::XavierNormal { gain } => {
                let (fi, fo) = fans(shape)?;
                ctx.randn(shape, 0.0, gain * (2.0 / fan(fi + fo)?).sqrt())
            }
        }
    }
}
