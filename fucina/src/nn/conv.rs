//! Convolution layers over named channel and spatial axes: `Conv1d` and `Conv2d`.

use super::init::Init;
use super::linear::Bias;
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::ops::{Conv1dOptions, Conv2dOptions};
use crate::tensor::axes::{Axes, Axis, CanRename, HasAxes};
use crate::tensor::Tensor;
use crate::Module;

/// PyTorch's convolution bias: uniform in `±1/sqrt(fan_in)` (none when asked for none or
/// when `fan_in` is 0, as PyTorch skips it).
fn torch_bias<O: Axis + Send + Sync>(
    ctx: &ExecContext,
    fan_in: usize,
    out_channels: usize,
    bias: Bias,
) -> Result<Option<Tensor<(O,)>>> {
    match bias {
        Bias::With if fan_in > 0 => {
            Ok(Some(Init::Uniform { bound: 1.0 / (fan_in as f32).sqrt() }.tensor(ctx, &[out_channels])?))
        }
        Bias::With | Bias::Without => Ok(None),
    }
}

/// PyTorch's `nn.Conv2d` over channel axis `C` and spatial axes `H`, `W`, producing channel
/// axis `O` (see [`Tensor::conv2d`]): weight `[O, C / groups, kh, kw]`, optional bias `[O]`.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::nn::{Bias, Conv2d};
/// use fucina::ops::Conv2dOptions;
/// axis!(pub height, pub width);
/// let ctx = ExecContext::new(ExecConfig { seed: 2, ..ExecConfig::default() })?;
/// let opts = Conv2dOptions { padding: [1, 1], ..Conv2dOptions::default() };
/// let conv = Conv2d::<out, channel, height, width>::init(&ctx, 3, 8, [3, 3], opts, Bias::With)?;
/// let img = Tensor::<axes![batch, height, width, channel]>::ones(&[2, 6, 6, 3])?; // channels-last is fine
/// let y: Tensor<axes![batch, height, width, out]> = conv.forward(&img)?;
/// assert_eq!(y.shape(), &[2, 6, 6, 8]);
/// # Ok::<(), fucina::FucinaError>(())
/// ```
#[derive(Module, Debug, Clone)]
pub struct Conv2d<O: Axis + Send + Sync, C: Axis + Send + Sync, H: Axis + Send + Sync, W: Axis + Send + Sync> {
    /// `[O, C / groups, kh, kw]`.
    pub weight: Tensor<(O, C, H, W)>,
    /// `[O]`, if any.
    pub bias: Option<Tensor<(O,)>>,
    /// Stride, padding, dilation and groups.
    #[module(skip)]
    pub options: Conv2dOptions,
}

impl<O: Axis + Send + Sync, C: Axis + Send + Sync, H: Axis + Send + Sync, W: Axis + Send + Sync> Conv2d<O, C, H, W> {
    /// A new layer initialized as PyTorch's `nn.Conv2d`: weight and bias uniform in
    /// `±1/sqrt(fan_in)`, `fan_in = in_channels / groups * kh * kw`.
    pub fn init(
        ctx: &ExecContext,
        in_channels: usize,
        out_channels: usize,
        kernel: [usize; 2],
        options: Conv2dOptions,
        bias: Bias,
    ) -> Result<Conv2d<O, C, H, W>> {
        let g = options.groups;
        if g == 0 || !in_channels.is_multiple_of(g) || !out_channels.is_multiple_of(g) {
            return Err(FucinaError::InvalidArgument {
                op: "Conv2d",
                msg: format!("{g} groups do not divide {in_channels} -> {out_channels} channels"),
            });
        }
        let shape = [out_channels, in_channels / g, kernel[0], kernel[1]];
        let weight = Init::TORCH_LINEAR.tensor(ctx, &shape)?;
        let bias = torch_bias(ctx, (in_channels / g) * kernel[0] * kernel[1], out_channels, bias)?;
        Ok(Conv2d { weight, bias, options })
    }

    /// Convolves `x` (any layout naming `C`, `H`, `W`; other axes are batch axes).
    pub fn forward<A>(&self, x: &Tensor<A>) -> Result<Tensor<<A as CanRename<C, O>>::Out>>
    where
        A: HasAxes<(C, H, W)> + CanRename<C, O>,
        (O, C, H, W): Axes,
    {
        x.conv2d::<C, H, W, O>(&self.weight, self.bias.as_ref(), self.options)
    }
}

/// PyTorch's `nn.Conv1d` (stride 1, one group) over channel axis `C` along axis `T`,
/// producing channel axis `O` (see [`Tensor::conv1d`]): weight `[O, C, k]`, optional bias
/// `[O]`; the padding may also be causal.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::nn::{Bias, Conv1d};
/// use fucina::ops::{Conv1dOptions, Padding};
/// let ctx = ExecContext::new(ExecConfig { seed: 3, ..ExecConfig::default() })?;
/// let opts = Conv1dOptions { dilation: 2, padding: Padding::Causal };
/// let conv = Conv1d::<out, channel, time>::init(&ctx, 4, 6, 3, opts, Bias::With)?;
/// let x = Tensor::<axes![batch, time, channel]>::ones(&[2, 10, 4])?; // time-major is fine
/// let y: Tensor<axes![batch, time, out]> = conv.forward(&x)?;
/// assert_eq!(y.shape(), &[2, 10, 6]);
/// # Ok::<(), fucina::FucinaError>(())
/// ```
#[derive(Module, Debug, Clone)]
pub struct Conv1d<O: Axis + Send + Sync, C: Axis + Send + Sync, T: Axis + Send + Sync> {
    /// `[O, C, k]`.
    pub weight: Tensor<(O, C, T)>,
    /// `[O]`, if any.
    pub bias: Option<Tensor<(O,)>>,
    /// Dilation and padding.
    #[module(skip)]
    pub options: Conv1dOptions,
}

impl<O: Axis + Send + Sync, C: Axis + Send + Sync, T: Axis + Send + Sync> Conv1d<O, C, T> {
    /// A new layer initialized as PyTorch's `nn.Conv1d`: weight and bias uniform in
    /// `±1/sqrt(fan_in)`, `fan_in = in_channels * kernel`.
    pub fn init(
        ctx: &ExecContext,
        in_channels: usize,
        out_channels: usize,
        kernel: usize,
        options: Conv1dOptions,
        bias: Bias,
    ) -> Result<Conv1d<O, C, T>> {
        if kernel == 0 {
            return Err(FucinaError::InvalidArgument { op: "Conv1d", msg: "the kernel size must be positive".into() });
        }
        let weight = Init::TORCH_LINEAR.tensor(ctx, &[out_channels, in_channels, kernel])?;
        let bias = torch_bias(ctx, in_channels.saturating_mul(kernel), out_channels, bias)?;
        Ok(Conv1d { weight, bias, options })
    }

    /// Convolves `x` (any layout naming `C` and `T`; other axes are batch axes).
    pub fn forward<A>(&self, x: &Tensor<A>) -> Result<Tensor<<A as CanRename<C, O>>::Out>>
    where
        A: HasAxes<(C, T)> + CanRename<C, O>,
        (O, C, T): Axes,
    {
        x.conv1d::<C, T, O>(&self.weight, self.bias.as_ref(), self.options)
    }
}
