//! `Linear`: `y = x W^T + b` over a named input axis.

use super::init::{fans, Init};
use crate::error::Result;
use crate::exec::ExecContext;
use crate::tensor::axes::{Axis, BroadcastFrom, CanContract};
use crate::tensor::Tensor;
use crate::Module;

/// Whether a layer has an additive bias.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bias {
    /// With a bias (PyTorch's default for `nn.Linear`).
    With,
    /// Without one.
    Without,
}

/// The axes of a [`Linear`]'s output for an input with axes `A`: `A` without `I`, then `O`.
pub type Projected<A, O, I> = <A as CanContract<(O, I), I>>::Out;

/// A linear map from axis `I` to axis `O`: weight `[O, I]` (PyTorch's layout), optional bias
/// `[O]`. The weight may be f32, f16 or bf16 (products accumulate in f32); block-quantized
/// weights are `fucina::quant::QLinear`'s (the quant layer sits above this one), with the
/// same axes and forward.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::nn::{Bias, Linear};
/// let ctx = ExecContext::new(ExecConfig { seed: 1, ..ExecConfig::default() })?;
/// let fc = Linear::<hidden, r#in>::init(&ctx, 4, 3, Bias::With)?;
/// let x = Tensor::<axes![batch, seq, in]>::ones(&[2, 5, 4])?;
/// let y: Tensor<axes![batch, seq, hidden]> = fc.forward(&x)?;
/// assert_eq!(y.shape(), &[2, 5, 3]);
/// # Ok::<(), fucina::FucinaError>(())
/// ```
#[derive(Module, Debug, Clone)]
pub struct Linear<O: Axis + Send + Sync, I: Axis + Send + Sync> {
    /// `[O, I]`.
    pub weight: Tensor<(O, I)>,
    /// `[O]`, if any.
    pub bias: Option<Tensor<(O,)>>,
}

impl<O: Axis + Send + Sync, I: Axis + Send + Sync> Linear<O, I> {
    /// A layer from its tensors.
    pub fn new(weight: Tensor<(O, I)>, bias: Option<Tensor<(O,)>>) -> Linear<O, I> {
        Linear { weight, bias }
    }

    /// A new layer initialized as PyTorch's `nn.Linear`: weight and bias uniform in
    /// `±1/sqrt(in_features)`, from the context's RNG.
    pub fn init(ctx: &ExecContext, in_features: usize, out_features: usize, bias: Bias) -> Result<Linear<O, I>> {
        let weight = Init::TORCH_LINEAR.tensor(ctx, &[out_features, in_features])?;
        let bias = match bias {
            Bias::With => {
                let bound = 1.0 / (fans(&[out_features, in_features])?.0 as f32).sqrt();
                Some(Init::Uniform { bound }.tensor(ctx, &[out_features])?)
            }
            Bias::Without => None,
        };
        Ok(Linear { weight, bias })
    }

    /// `x W^T + b`: contracts axis `I` of `x` (any other axes are kept, in order) and appends `O`.
    pub fn forward<A>(&self, x: &Tensor<A>) -> Result<Tensor<Projected<A, O, I>>>
    where
        A: CanContract<(O, I), I>,
        Projected<A, O, I>: BroadcastFrom<(O,)>,
    {
        let y = x.contract::<I, (O, I)>(&self.weight)?;
        match &self.bias {
            Some(b) => y.add(b),
            None => Ok(y),
        }
    }
}
