//! 2-D convolution and pooling over named axes: the channel and spatial axes are named, every
//! other axis is a batch axis, and the axes may sit in any order.

use super::{contiguous_f32, finish, perm_to, unpermute};
use crate::backend::{Conv2d, Pool2d, PoolOp};
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::tensor::axes::{Axes, Axis, CanRename, HasAxes};
use crate::tensor::{RawTensor, Tensor};

/// Options of [`Tensor::conv2d`], per spatial axis `[H, W]` (PyTorch's `Conv2d` arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dOptions {
    /// Step between output positions.
    pub stride: [usize; 2],
    /// Zeros added on both sides.
    pub padding: [usize; 2],
    /// Spacing between kernel taps.
    pub dilation: [usize; 2],
    /// Channel groups: input and output channels split into this many independent
    /// convolutions (`groups` = channels is a depthwise convolution).
    pub groups: usize,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Conv2dOptions { stride: [1, 1], padding: [0, 0], dilation: [1, 1], groups: 1 }
    }
}

/// Options of the pooling ops, per spatial axis (PyTorch's `MaxPool2d` / `AvgPool2d`; the
/// stride defaults to the window).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolOptions {
    /// Window size.
    pub kernel: [usize; 2],
    /// Step between windows.
    pub stride: [usize; 2],
    /// Padding on both sides (at most half the window).
    pub padding: [usize; 2],
}

impl PoolOptions {
    /// A `kh x kw` window moving by its own size, no padding.
    pub fn window(kh: usize, kw: usize) -> PoolOptions {
        PoolOptions { kernel: [kh, kw], stride: [kh, kw], padding: [0, 0] }
    }
}

fn invalid(op: &'static str, msg: String) -> FucinaError {
    FucinaError::InvalidArgument { op, msg }
}

/// The permutation putting `trailing` last (in that order) after the other axes, the
/// product of the others, and the sizes of `trailing`.
pub(super) fn layout_for(
    names: &[&'static str],
    shape: &[usize],
    trailing: &[&'static str],
) -> (Vec<usize>, usize, Vec<usize>) {
    let order: Vec<&'static str> =
        names.iter().copied().filter(|n| !trailing.contains(n)).chain(trailing.iter().copied()).collect();
    let perm = perm_to(names, &order);
    let lead = names.len() - trailing.len();
    let batch = perm[..lead].iter().map(|p| shape[*p]).product();
    let sizes = perm[lead..].iter().map(|p| shape[*p]).collect();
    (perm, batch, sizes)
}

pub(super) fn checked_len(dims: &[usize], op: &'static str) -> Result<usize> {
    dims.iter().try_fold(1usize, |a, b| a.checked_mul(*b)).ok_or_else(|| invalid(op, format!("{dims:?} is too large")))
}

impl<A: Axes> Tensor<A> {
    /// Convolves the spatial axes `H`, `W` over the channel axis `C` with `weight [O, C, H, W]`
    /// (`C` of size channels / groups, `H`, `W` the kernel's extent along those axes) and an
    /// optional `bias [O]`: the result has `C` renamed `O`, `H` and `W` resized, and every
    /// other axis kept as a batch axis (PyTorch's `conv2d` when the layout is `[N, C, H, W]`).
    ///
    /// ```
    /// use fucina::prelude::*;
    /// use fucina::ops::Conv2dOptions;
    /// axis!(pub height, pub width);
    /// let img = Tensor::<axes![batch, channel, height, width]>::ones(&[1, 2, 5, 5])?;
    /// let w = Tensor::<axes![out, channel, height, width]>::ones(&[4, 2, 3, 3])?;
    /// let opts = Conv2dOptions { stride: [2, 2], padding: [1, 1], ..Conv2dOptions::default() };
    /// let y: Tensor<axes![batch, out, height, width]> = img.conv2d::<channel, height, width, out>(&w, None, opts)?;
    /// assert_eq!(y.shape(), &[1, 4, 3, 3]);
    /// assert_eq!(y.to_f32_vec()[4], 18.0, "the centre sees all 2 x 3 x 3 taps");
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn conv2d<C: Axis, H: Axis, W: Axis, O: Axis>(
        &self,
        weight: &Tensor<(O, C, H, W)>,
        bias: Option<&Tensor<(O,)>>,
        opts: Conv2dOptions,
    ) -> Result<Tensor<<A as CanRename<C, O>>::Out>>
    where
        A: HasAxes<(C, H, W)> + CanRename<C, O>,
        (O, C, H, W): Axes,
        (O,): Axes,
    {
        const OP: &str = "conv2d";
        let ctx = ExecContext::current();
        let names = A::names();
        let (perm, batch, sizes) = layout_for(&names, self.shape(), &[C::NAME, H::NAME, W::NAME]);
        let (cin, hw) = (sizes[0], [sizes[1], sizes[2]]);
        let ws = weight.shape();
        let (cout, k) = (ws[0], [ws[2], ws[3]]);
        let Conv2dOptions { stride, padding, dilation, groups } = opts;
        if groups == 0 || !cin.is_multiple_of(groups) || !cout.is_multiple_of(groups) {
            return Err(invalid(OP, format!("{groups} groups do not divide {cin} input and {cout} output channels")));
        }
        if ws[1] * groups != cin {
            return Err(FucinaError::ShapeMismatch { axis: C::NAME.to_string(), left: cin / groups, right: ws[1] });
        }
        if k.contains(&0) || stride.contains(&0) || dilation.contains(&0) {
            return Err(invalid(OP, "kernel sizes, strides and dilations must be positive".into()));
        }
        if let Some(b) = bias {
            if b.shape()[0] != cout {
                return Err(FucinaError::ShapeMismatch { axis: O::NAME.to_string(), left: cout, right: b.shape()[0] });
            }
        }
        for a in 0..2 {
            let span = dilation[a].checked_mul(k[a] - 1).and_then(|s| s.checked_add(1));
            let room = hw[a].checked_add(padding[a].saturating_mul(2));
            if span.zip(room).is_none_or(|(s, r)| r < s) {
                return Err(invalid(
                    OP,
                    format!("spatial axis {a} ({} + padding) is smaller than the kernel span", hw[a]),
                ));
            }
        }
        let p = Conv2d { batch, cin, cout, hw, k, stride, padding, dilation, groups };
        let (oh, ow) = (p.out(0), p.out(1));
        let n_out = checked_len(&[batch, cout, oh, ow], OP)?;
        let view = self.raw().with_layout(self.raw().layout().permuted(&perm))?;
        let x = contiguous_f32(&ctx, &view, OP)?;
        let w = contiguous_f32(&ctx, weight.raw(), OP)?;
        let b = match bias {
            Some(b) => Some(contiguous_f32(&ctx, b.raw(), OP)?),
            None => None,
        };
        let mut out = ctx.alloc(n_out);
        let work = n_out.saturating_mul(ws[1] * k[0] * k[1]);
        ctx.run(work, |kern| kern.conv2d(&p, &x, &w, b.as_deref(), &mut out));
        let lead: Vec<usize> = view.shape()[..names.len() - 3].to_vec();
        let shape_of = |tail: [usize; 3]| lead.iter().copied().chain(tail).collect::<Vec<usize>>();
        let y = finish(&ctx, out, &shape_of([cout, oh, ow]), self.dtype().promote(weight.dtype()))?;
        let y = unpermute(y, &perm)?;
        let mut inputs = vec![self.raw(), weight.raw()];
        inputs.extend(bias.map(|b| b.raw()));
        let has_bias = bias.is_some();
        let (xs, wsl) = (&x, &w);
        let x_shape = shape_of([cin, hw[0], hw[1]]);
        let w_shape = ws.to_vec();
        Tensor::from_raw(record(y, &inputs, move || {
            let (xv, wv) = (xs.to_vec(), wsl.to_vec());
            Box::new(move |g: &RawTensor| {
                let ctx = ExecContext::current();
                let gv = g.with_layout(g.layout().permuted(&perm))?;
                let gc = contiguous_f32(&ctx, &gv, "conv2d backward")?;
                let (mut dx, mut dw) = (vec![0.0f32; xv.len()], vec![0.0f32; wv.len()]);
                ctx.run(work, |kern| kern.conv2d_backward(&p, &xv, &wv, &gc, &mut dx, &mut dw));
                let mut grads =
                    vec![Some(unpermute(ctx.wrap_f32(dx, &x_shape)?, &perm)?), Some(ctx.wrap_f32(dw, &w_shape)?)];
                if has_bias {
                    let mut db = vec![0.0f32; cout];
                    for (i, v) in gc.iter().enumerate() {
                        db[i / (oh * ow) % cout] += v;
                    }
                    grads.push(Some(ctx.wrap_f32(db, &[cout])?));
                }
                Ok(grads)
            })
        }))
    }

    /// Max pooling over the spatial axes `H`, `W` (every other axis is a batch axis); NaN
    /// propagates, and the gradient goes to the first largest element of each window.
    pub fn max_pool2d<H: Axis, W: Axis>(&self, opts: PoolOptions) -> Result<Tensor<A>>
    where
        A: HasAxes<(H, W)>,
    {
        pool(self, [H::NAME, W::NAME], PoolOp::Max, opts, "max_pool2d")
    }

    /// Average pooling over `H`, `W`, padding zeros counted (`count_include_pad=True`).
    pub fn avg_pool2d<H: Axis, W: Axis>(&self, opts: PoolOptions) -> Result<Tensor<A>>
    where
        A: HasAxes<(H, W)>,
    {
        pool(self, [H::NAME, W::NAME], PoolOp::Avg, opts, "avg_pool2d")
    }

    /// Max pooling along one axis `T`: windows of `kernel`, moving by `stride`, `padding` on both sides.
    pub fn max_pool1d<T: Axis>(&self, kernel: usize, stride: usize, padding: usize) -> Result<Tensor<A>>
    where
        A: HasAxes<T>,
    {
        let opts = PoolOptions { kernel: [1, kernel], stride: [1, stride], padding: [0, padding] };
        pool(self, ["", T::NAME], PoolOp::Max, opts, "max_pool1d")
    }

    /// Average pooling along one axis `T` (padding zeros counted).
    pub fn avg_pool1d<T: Axis>(&self, kernel: usize, stride: usize, padding: usize) -> Result<Tensor<A>>
    where
        A: HasAxes<T>,
    {
        let opts = PoolOptions { kernel: [1, kernel], stride: [1, stride], padding: [0, padding] };
        pool(self, ["", T::NAME], PoolOp::Avg, opts, "avg_pool1d")
    }
}

/// Pools over the named spatial axes (`""` for a height of 1: the 1-D forms).
fn pool<A: Axes>(
    t: &Tensor<A>,
    axes: [&'static str; 2],
    op: PoolOp,
    opts: PoolOptions,
    name: &'static str,
) -> Result<Tensor<A>> {
    let ctx = ExecContext::current();
    if !t.dtype().is_float() {
        return Err(FucinaError::UnsupportedDType { op: name, dtype: t.dtype() });
    }
    let names = A::names();
    let spatial: Vec<&'static str> = axes.iter().copied().filter(|a| !a.is_empty()).collect();
    let (perm, planes, sizes) = layout_for(&names, t.shape(), &spatial);
    let hw = if sizes.len() == 2 { [sizes[0], sizes[1]] } else { [1, sizes[0]] };
    let PoolOptions { kernel, stride, padding } = opts;
    if kernel.contains(&0) || stride.contains(&0) {
        return Err(invalid(name, "window sizes and strides must be positive".into()));
    }
    if (0..2).any(|a| padding[a] > kernel[a] / 2) {
        return Err(invalid(name, format!("padding {padding:?} exceeds half the window {kernel:?}")));
    }
    if (0..2).any(|a| hw[a] + 2 * padding[a] < kernel[a]) {
        return Err(invalid(name, format!("input {hw:?} (+ padding) is smaller than the window {kernel:?}")));
    }
    let p = Pool2d { planes, hw, k: kernel, stride, padding };
    let (oh, ow) = (p.out(0), p.out(1));
    let n = checked_len(&[planes, oh, ow], name)?;
    let view = t.raw().with_layout(t.raw().layout().permuted(&perm))?;
    let x = contiguous_f32(&ctx, &view, name)?;
    let mut out = ctx.alloc(n);
    let mut arg = vec![0u32; n];
    ctx.run(n.saturating_mul(kernel[0] * kernel[1]), |k| k.pool2d(&p, op, &x, &mut out, &mut arg));
    let lead = names.len() - spatial.len();
    let mut shape: Vec<usize> = view.shape()[..lead].to_vec();
    shape.extend(if spatial.len() == 2 { vec![oh, ow] } else { vec![ow] });
    let y = unpermute(finish(&ctx, out, &shape, t.dtype())?, &perm)?;
    let in_shape = view.shape().to_vec();
    let plane = hw[0] * hw[1];
    Tensor::from_raw(record(y, &[t.raw()], move || {
        Box::new(move |g: &RawTensor| {
            let ctx = ExecContext::current();
            let gv = g.with_layout(g.layout().permuted(&perm))?;
            let gc = contiguous_f32(&ctx, &gv, "pool backward")?;
            let mut dx = vec![0.0f32; planes * plane];
            match op {
                PoolOp::Avg => ctx.run(dx.len(), |k| k.avg_pool2d_backward(&p, &gc, &mut dx)),
                PoolOp::Max => {
                    // Windows that saw only padding chose nothing and pass nothing back.
                    let (mut ids, mut src) = (Vec::with_capacity(arg.len()), Vec::with_capacity(arg.len()));
                    for (i, a) in arg.iter().enumerate() {
                        if *a != u32::MAX {
                            ids.push((i / (oh * ow) * plane) as u32 + a);
                            src.push(gc[i]);
                        }
                    }
                    ctx.run(ids.len(), |k| k.scatter_add_rows(1, &ids, &src, &mut dx));
                }
            }
            Ok(vec![Some(unpermute(ctx.wrap_f32(dx, &in_shape)?, &perm)?)])
        })
    }))
}
