//! Batch normalization over a named channel axis: statistics over every other axis.

use super::elementwise::{binary_raw, unary_raw};
use super::grad::unbroadcast;
use super::{pos, reduce_raw};
use crate::backend::{BinaryOp, ReduceOp, UnaryOp};
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::tensor::axes::{Axes, Axis, HasAxes};
use crate::tensor::{RawTensor, Tensor};

/// Which mean and variance [`Tensor::batch_norm`] normalizes with.
#[derive(Debug, Clone, Copy)]
pub enum BatchStats<'a, C: Axis + Send + Sync> {
    /// The batch's own (biased variance), differentiated through: training.
    Batch,
    /// Stored running statistics, constants: evaluation.
    Running {
        /// Per-channel mean.
        mean: &'a Tensor<(C,)>,
        /// Per-channel variance.
        var: &'a Tensor<(C,)>,
    },
}

/// Per-channel mean and unbiased variance of a batch, for updating running statistics.
#[derive(Debug, Clone)]
pub struct Moments<C: Axis + Send + Sync> {
    /// Mean over every axis but the channel.
    pub mean: Tensor<(C,)>,
    /// Unbiased variance (divided by count - 1), as PyTorch keeps in `running_var`.
    pub var: Tensor<(C,)>,
}

fn mean_over(ctx: &ExecContext, t: &RawTensor, names: &[&'static str], over: &[&'static str]) -> Result<RawTensor> {
    let (s, n) = reduce_raw(ctx, ReduceOp::Sum, t, names, over)?;
    unary_raw(ctx, UnaryOp::Affine(1.0 / n.max(1) as f32, 0.0), &s)
}

impl<A: Axes> Tensor<A> {
    /// Batch normalization over channel axis `C`: `(x - mean) / sqrt(var + eps) * weight +
    /// bias` per channel, the statistics taken over every other axis ([`BatchStats::Batch`],
    /// biased variance, as PyTorch's `BatchNorm` in training) or given
    /// ([`BatchStats::Running`], as in evaluation). Gradients flow to `self`, `weight` and
    /// `bias`.
    pub fn batch_norm<C: Axis + Send + Sync>(
        &self,
        weight: Option<&Tensor<(C,)>>,
        bias: Option<&Tensor<(C,)>>,
        stats: BatchStats<'_, C>,
        eps: f32,
    ) -> Result<Tensor<A>>
    where
        A: HasAxes<C>,
    {
        let ctx = ExecContext::current();
        let names = A::names();
        let ch = [C::NAME];
        let others: Vec<&'static str> = names.iter().copied().filter(|n| *n != C::NAME).collect();
        let size = self.shape()[pos(&names, C::NAME)];
        for p in [weight, bias].into_iter().flatten() {
            if p.shape()[0] != size {
                return Err(FucinaError::ShapeMismatch { axis: C::NAME.to_string(), left: size, right: p.shape()[0] });
            }
        }
        let count = self.numel() / size.max(1);
        if matches!(stats, BatchStats::Batch) && count < 2 {
            return Err(FucinaError::InvalidArgument {
                op: "batch_norm",
                msg: format!("training statistics need more than one value per channel, got {count}"),
            });
        }
        let x = self.raw().detached();
        let (mean, var) = match stats {
            BatchStats::Batch => {
                let m = mean_over(&ctx, &x, &names, &others)?;
                let xc = binary_raw(&ctx, BinaryOp::Sub, &x, &names, &m, &ch)?;
                let v = mean_over(&ctx, &unary_raw(&ctx, UnaryOp::Square, &xc)?, &names, &others)?;
                (m, v)
            }
            BatchStats::Running { mean, var } => {
                for t in [mean, var] {
                    if t.shape()[0] != size {
                        return Err(FucinaError::ShapeMismatch {
                            axis: C::NAME.to_string(),
                            left: size,
                            right: t.shape()[0],
                        });
                    }
                }
                (mean.raw().detached(), var.raw().detached())
            }
        };
        let inv = unary_raw(&ctx, UnaryOp::Rsqrt, &unary_raw(&ctx, UnaryOp::Affine(1.0, eps), &var)?)?;
        let xc = binary_raw(&ctx, BinaryOp::Sub, &x, &names, &mean, &ch)?;
        let xhat = binary_raw(&ctx, BinaryOp::Mul, &xc, &names, &inv, &ch)?;
        let mut y = xhat.clone();
        if let Some(w) = weight {
            y = binary_raw(&ctx, BinaryOp::Mul, &y, &names, w.raw(), &ch)?;
        }
        if let Some(b) = bias {
            y = binary_raw(&ctx, BinaryOp::Add, &y, &names, b.raw(), &ch)?;
        }
        let y = super::cast_to(&y, self.dtype())?;
        let train = matches!(stats, BatchStats::Batch);
        let wd = weight.map(|w| w.raw().detached());
        let (has_w, has_b) = (weight.is_some(), bias.is_some());
        let mut inputs = vec![self.raw()];
        inputs.extend(weight.map(|w| w.raw()));
        inputs.extend(bias.map(|b| b.raw()));
        Tensor::from_raw(record(y, &inputs, move || {
            Box::new(move |g: &RawTensor| {
                let ctx = ExecContext::current();
                let ch = [C::NAME];
                let gx = match &wd {
                    Some(w) => binary_raw(&ctx, BinaryOp::Mul, g, &names, w, &ch)?,
                    None => g.clone(),
                };
                let dx = if train {
                    // inv * (gx - mean(gx) - xhat * mean(gx * xhat)), means over the batch axes.
                    let m1 = mean_over(&ctx, &gx, &names, &others)?;
                    let gxx = binary_raw(&ctx, BinaryOp::Mul, &gx, &names, &xhat, &names)?;
                    let m2 = mean_over(&ctx, &gxx, &names, &others)?;
                    let t = binary_raw(&ctx, BinaryOp::Sub, &gx, &names, &m1, &ch)?;
                    let xm = binary_raw(&ctx, BinaryOp::Mul, &xhat, &names, &m2, &ch)?;
                    let t = binary_raw(&ctx, BinaryOp::Sub, &t, &names, &xm, &names)?;
                    binary_raw(&ctx, BinaryOp::Mul, &t, &names, &inv, &ch)?
                } else {
                    binary_raw(&ctx, BinaryOp::Mul, &gx, &names, &inv, &ch)?
                };
                let mut out = vec![Some(dx)];
                if has_w {
                    let gxh = binary_raw(&ctx, BinaryOp::Mul, g, &names, &xhat, &names)?;
                    out.push(Some(unbroadcast(&ctx, &gxh, &names, &ch)?));
                }
                if has_b {
                    out.push(Some(unbroadcast(&ctx, g, &names, &ch)?));
                }
                Ok(out)
            })
        }))
    }

    /// The per-channel mean and unbiased variance over every axis but `C` (no gradient): what
    /// a batch-norm layer folds into its running statistics.
    pub fn channel_moments<C: Axis + Send + Sync>(&self) -> Result<Moments<C>>
    where
        A: HasAxes<C>,
    {
        let ctx = ExecContext::current();
        let names = A::names();
        let others: Vec<&'static str> = names.iter().copied().filter(|n| *n != C::NAME).collect();
        let x = self.raw().detached();
        let (s, n) = reduce_raw(&ctx, ReduceOp::Sum, &x, &names, &others)?;
        if n < 2 {
            return Err(FucinaError::InvalidArgument {
                op: "channel_moments",
                msg: format!("an unbiased variance needs two or more values per channel, got {n}"),
            });
        }
        let mean = unary_raw(&ctx, UnaryOp::Affine(1.0 / n as f32, 0.0), &s)?;
        let xc = binary_raw(&ctx, BinaryOp::Sub, &x, &names, &mean, &[C::NAME])?;
        let (ss, _) = reduce_raw(&ctx, ReduceOp::Sum, &unary_raw(&ctx, UnaryOp::Square, &xc)?, &names, &others)?;
        let var = unary_raw(&ctx, UnaryOp::Affine(1.0 / (n - 1) as f32, 0.0), &ss)?;
        Ok(Moments { mean: Tensor::from_raw(mean)?, var: Tensor::from_raw(var)? })
    }
}
