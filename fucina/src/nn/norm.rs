//! Normalization layers over a named axis: `LayerNorm`, `RmsNorm`.

use crate::error::Result;
use crate::tensor::axes::{Axis, HasAxes};
use crate::tensor::Tensor;
use crate::Module;

/// Whether a normalization layer has learned parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Affine {
    /// A scale (and, for `LayerNorm`, a shift), initialized to 1 (and 0).
    Learned,
    /// None: plain normalization.
    Plain,
}

/// `(x - mean) / sqrt(var + eps) * w + b` over axis `X` (PyTorch's `nn.LayerNorm` over one axis).
///
/// ```
/// use fucina::prelude::*;
/// use fucina::nn::{Affine, LayerNorm};
/// let ln = LayerNorm::<hidden>::new(3, 1e-5, Affine::Learned)?;
/// let x = Tensor::<axes![seq, hidden]>::from_vec(vec![1.0f32, 2.0, 3.0], &[1, 3])?;
/// let y = ln.forward(&x)?.to_f32_vec();
/// assert!((y[0] + 1.2247).abs() < 1e-3 && y[1].abs() < 1e-6);
/// # Ok::<(), fucina::FucinaError>(())
/// ```
#[derive(Module, Debug, Clone)]
pub struct LayerNorm<X: Axis + Send + Sync> {
    /// The scale `[X]`, if learned.
    pub weight: Option<Tensor<(X,)>>,
    /// The shift `[X]`, if learned.
    pub bias: Option<Tensor<(X,)>>,
    /// Added to the variance.
    #[module(skip)]
    pub eps: f32,
}

impl<X: Axis + Send + Sync> LayerNorm<X> {
    /// A layer over `size` features; learned parameters start at 1 and 0.
    pub fn new(size: usize, eps: f32, affine: Affine) -> Result<LayerNorm<X>> {
        Ok(match affine {
            Affine::Learned => {
                LayerNorm { weight: Some(Tensor::ones(&[size])?), bias: Some(Tensor::zeros(&[size])?), eps }
            }
            Affine::Plain => LayerNorm { weight: None, bias: None, eps },
        })
    }

    /// Normalizes `x` over `X`.
    pub fn forward<A: HasAxes<X>>(&self, x: &Tensor<A>) -> Result<Tensor<A>> {
        x.layer_norm::<X>(self.weight.as_ref(), self.bias.as_ref(), self.eps)
    }
}

/// `x / sqrt(mean(x^2) + eps) * w` over axis `X` (PyTorch's `nn.RMSNorm` over one axis).
#[derive(Module, Debug, Clone)]
pub struct RmsNorm<X: Axis + Send + Sync> {
    /// The scale `[X]`, if learned.
    pub weight: Option<Tensor<(X,)>>,
    /// Added to the mean square.
    #[module(skip)]
    pub eps: f32,
}

impl<X: Axis + Send + Sync> RmsNorm<X> {
    /// A layer over `size` features; a learned scale starts at 1.
    pub fn new(size: usize, eps: f32, affine: Affine) -> Result<RmsNorm<X>> {
        let weight = match affine {
            Affine::Learned => Some(Tensor::ones(&[size])?),
            Affine::Plain => None,
        };
        Ok(RmsNorm { weight, eps })
    }

    /// Normalizes `x` over `X`.
    pub fn forward<A: HasAxes<X>>(&self, x: &Tensor<A>) -> Result<Tensor<A>> {
        x.rms_norm::<X>(self.weight.as_ref(), self.eps)
    }
}
