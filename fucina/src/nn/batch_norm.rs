//! `BatchNorm`: batch normalization over a named channel axis, with running statistics.

use super::dropout::Mode;
use super::norm::Affine;
use crate::error::{FucinaError, Result};
use crate::ops::BatchStats;
use crate::tensor::axes::{Axis, HasAxes};
use crate::tensor::Tensor;
use crate::Module;

/// PyTorch's `BatchNorm1d`/`2d` over channel axis `C` (statistics over every other axis, so
/// one layer serves any rank). In [`Mode::Train`] it normalizes with the batch's statistics
/// and moves the running ones by `momentum` (the variance unbiased, as PyTorch does); in
/// [`Mode::Eval`] it uses the running ones. `running_mean` and `running_var` are visited
/// (saved and loaded under PyTorch's names) but never get gradients, so optimizers leave
/// them alone.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::nn::{Affine, BatchNorm, Mode};
/// let mut bn = BatchNorm::<channel>::new(2, 1e-5, 0.1, Affine::Learned)?;
/// let x = Tensor::<axes![batch, channel]>::from_vec(vec![1.0f32, 10.0, 3.0, 30.0], &[2, 2])?;
/// let y = bn.forward(&x, Mode::Train)?.to_f32_vec();
/// assert!((y[0] + 1.0).abs() < 1e-4 && (y[3] - 1.0).abs() < 1e-4);
/// assert_eq!(bn.running_mean.to_f32_vec(), vec![0.2, 2.0]);
/// # Ok::<(), fucina::FucinaError>(())
/// ```
#[derive(Module, Debug, Clone)]
pub struct BatchNorm<C: Axis + Send + Sync> {
    /// Per-channel scale, if learned.
    pub weight: Option<Tensor<(C,)>>,
    /// Per-channel shift, if learned.
    pub bias: Option<Tensor<(C,)>>,
    /// Running mean (starts at 0).
    pub running_mean: Tensor<(C,)>,
    /// Running unbiased variance (starts at 1).
    pub running_var: Tensor<(C,)>,
    /// Added to the variance.
    #[module(skip)]
    pub eps: f32,
    /// Weight of the new batch in the running statistics.
    #[module(skip)]
    pub momentum: f32,
}

impl<C: Axis + Send + Sync> BatchNorm<C> {
    /// A layer over `channels`; learned scale and shift start at 1 and 0.
    pub fn new(channels: usize, eps: f32, momentum: f32, affine: Affine) -> Result<BatchNorm<C>> {
        if !(0.0..=1.0).contains(&momentum) {
            return Err(FucinaError::InvalidArgument {
                op: "BatchNorm",
                msg: format!("momentum must be in [0, 1], got {momentum}"),
            });
        }
        let (weight, bias) = match affine {
            Affine::Learned => (Some(Tensor::ones(&[channels])?), Some(Tensor::zeros(&[channels])?)),
            Affine::Plain => (None, None),
        };
        Ok(BatchNorm {
            weight,
            bias,
            running_mean: Tensor::zeros(&[channels])?,
            running_var: Tensor::ones(&[channels])?,
            eps,
            momentum,
        })
    }

    /// Normalizes `x` over its batch axes; in training also updates the running statistics.
    pub fn forward<A: HasAxes<C>>(&mut self, x: &Tensor<A>, mode: Mode) -> Result<Tensor<A>> {
        match mode {
            Mode::Train => {
                let m = x.channel_moments::<C>()?;
                let mo = self.momentum;
                // (1 - momentum) * running + momentum * batch, per channel (bookkeeping, no graph).
                let blend = |run: &Tensor<(C,)>, new: &Tensor<(C,)>| -> Result<Tensor<(C,)>> {
                    let v =
                        run.to_f32_vec().iter().zip(new.to_f32_vec()).map(|(r, b)| (1.0 - mo) * r + mo * b).collect();
                    Tensor::from_vec(v, run.shape())
                };
                self.running_mean = blend(&self.running_mean, &m.mean)?;
                self.running_var = blend(&self.running_var, &m.var)?;
                x.batch_norm::<C>(self.weight.as_ref(), self.bias.as_ref(), BatchStats::Batch, self.eps)
            }
            Mode::Eval => {
                let stats = BatchStats::Running { mean: &self.running_mean, var: &self.running_var };
                x.batch_norm::<C>(self.weight.as_ref(), self.bias.as_ref(), stats, self.eps)
            }
        }
    }
}
