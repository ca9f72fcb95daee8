//! 1-D convolution (dilated, causal or padded) over named axes.

use super::conv2d::{checked_len, layout_for};
use super::{contiguous_f32, finish, unpermute};
use crate::backend::Conv1d;
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::tensor::axes::{Axes, Axis, CanRename, HasAxes};
use crate::tensor::{RawTensor, Tensor};

/// How a convolution pads its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Padding {
    /// No padding: the output is shorter by `dilation * (k - 1)`.
    Valid,
    /// `dilation * (k - 1)` zeros on the left: output `t` depends on inputs `<= t` only.
    Causal,
    /// Output as long as the input, padding split evenly (extra on the right).
    Same,
    /// Explicit left and right padding.
    Explicit(usize, usize),
}

/// Options of [`Tensor::conv1d`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv1dOptions {
    /// Spacing between kernel taps (1 = dense).
    pub dilation: usize,
    /// Padding mode.
    pub padding: Padding,
}

impl Default for Conv1dOptions {
    fn default() -> Self {
        Conv1dOptions { dilation: 1, padding: Padding::Valid }
    }
}

impl<A: Axes> Tensor<A> {
    /// Convolves along the axis `T` over the channel axis `C` with `weight [O, C, T]` (`T`'s
    /// size in the weight is the kernel's length) and an optional `bias [O]`: the result has
    /// `C` renamed `O`, `T` resized by the padding, and every other axis kept as a batch axis,
    /// in any layout (PyTorch's `conv1d` when the layout is `[N, C, T]`). A weight whose axes
    /// do not name the input's channel and time axes does not compile.
    ///
    /// ```
    /// use fucina::prelude::*;
    /// use fucina::ops::{Conv1dOptions, Padding};
    /// // A time-major signal [time, channel], convolved causally with a 2-tap averaging filter.
    /// let x = Tensor::<axes![time, channel]>::from_vec(vec![1.0, 10.0, 3.0, 30.0, 5.0, 50.0], &[3, 2])?;
    /// let w = Tensor::<axes![out, channel, time]>::from_vec(vec![0.5, 0.5, 0.0, 0.0], &[1, 2, 2])?;
    /// let opts = Conv1dOptions { dilation: 1, padding: Padding::Causal };
    /// let y: Tensor<axes![time, out]> = x.conv1d::<channel, time, out>(&w, None, opts)?;
    /// assert_eq!(y.to_f32_vec(), vec![0.5, 2.0, 4.0]);
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn conv1d<C: Axis, T: Axis, O: Axis>(
        &self,
        weight: &Tensor<(O, C, T)>,
        bias: Option<&Tensor<(O,)>>,
        opts: Conv1dOptions,
    ) -> Result<Tensor<<A as CanRename<C, O>>::Out>>
    where
        A: HasAxes<(C, T)> + CanRename<C, O>,
        (O, C, T): Axes,
        (O,): Axes,
    {
        const OP: &str = "conv1d";
        let ctx = ExecContext::current();
        let names = A::names();
        let (perm, batch, sizes) = layout_for(&names, self.shape(), &[C::NAME, T::NAME]);
        let (cin, t_in) = (sizes[0], sizes[1]);
        let (cout, wc, k) = (weight.shape()[0], weight.shape()[1], weight.shape()[2]);
        if wc != cin {
            return Err(FucinaError::ShapeMismatch { axis: C::NAME.to_string(), left: cin, right: wc });
        }
        if k == 0 || opts.dilation == 0 {
            return Err(FucinaError::InvalidArgument {
                op: OP,
                msg: "kernel size and dilation must be positive".into(),
            });
        }
        if let Some(b) = bias {
            if b.shape()[0] != cout {
                return Err(FucinaError::ShapeMismatch { axis: O::NAME.to_string(), left: cout, right: b.shape()[0] });
            }
        }
        let span = opts.dilation.checked_mul(k - 1).ok_or_else(|| FucinaError::InvalidArgument {
            op: OP,
            msg: format!("dilation {} times kernel {k} overflows", opts.dilation),
        })?;
        let (pad_left, pad_right) = match opts.padding {
            Padding::Valid => (0, 0),
            Padding::Causal => (span, 0),
            Padding::Same => (span / 2, span - span / 2),
            Padding::Explicit(l, r) => (l, r),
        };
        let room = t_in.checked_add(pad_left).and_then(|v| v.checked_add(pad_right));
        if room.is_none_or(|r| r < span + 1) {
            return Err(FucinaError::InvalidArgument {
                op: OP,
                msg: format!(
                    "input of length {t_in} (+{pad_left}/{pad_right} padding) is shorter than the kernel span {}",
                    span + 1
                ),
            });
        }
        let p = Conv1d { batch, cin, cout, t_in, k, dilation: opts.dilation, pad_left, pad_right };
        let t_out = p.t_out();
        let n_out = checked_len(&[batch, cout, t_out], OP)?;
        let view = self.raw().with_layout(self.raw().layout().permuted(&perm))?;
        let x = contiguous_f32(&ctx, &view, OP)?;
        let w = contiguous_f32(&ctx, weight.raw(), OP)?;
        let b = match bias {
            Some(b) => Some(contiguous_f32(&ctx, b.raw(), OP)?),
            None => None,
        };
        let mut out = ctx.alloc(n_out);
        let work = n_out.saturating_mul(cin * k);
        ctx.run(work, |kern| kern.conv1d(&p, &x, &w, b.as_deref(), &mut out));
        let lead: Vec<usize> = view.shape()[..names.len() - 2].to_vec();
        let shape_of = |tail: [usize; 2]| lead.iter().copied().chain(tail).collect::<Vec<usize>>();
        let y = finish(&ctx, out, &shape_of([cout, t_out]), self.dtype().promote(weight.dtype()))?;
        let y = unpermute(y, &perm)?;
        let has_bias = bias.is_some();
        let mut inputs = vec![self.raw(), weight.raw()];
        inputs.extend(bias.map(|b| b.raw()));
        let (xs, ws) = (&x, &w);
        let x_shape = shape_of([cin, t_in]);
        Tensor::from_raw(record(y, &inputs, move || {
            // Copied only when a graph is recorded; inference keeps nothing.
            let (xv, wv) = (xs.to_vec(), ws.to_vec());
            Box::new(move |g: &RawTensor| {
                let ctx = ExecContext::current();
                let gv = g.with_layout(g.layout().permuted(&perm))?;
                let gc = contiguous_f32(&ctx, &gv, "conv1d backward")?;
                let mut dx = vec![0.0f32; xv.len()];
                let mut dw = vec![0.0f32; wv.len()];
                ctx.run(work, |kern| kern.conv1d_backward(&p, &xv, &wv, &gc, &mut dx, &mut dw));
                let mut grads = vec![
                    Some(unpermute(ctx.wrap_f32(dx, &x_shape)?, &perm)?),
                    Some(ctx.wrap_f32(dw, &[cout, cin, k])?),
                ];
                if has_bias {
                    let mut db = vec![0.0f32; cout];
                    for (i, v) in gc.iter().enumerate() {
                        db[i / t_out % cout] += v;
                    }
                    grads.push(Some(ctx.wrap_f32(db, &[cout])?));
                }
                Ok(grads)
            })
        }))
    }
}
