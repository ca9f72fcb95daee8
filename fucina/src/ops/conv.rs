//! 1-D convolution (dilated, causal or padded) over named axes.

use super::{contiguous_f32, finish};
use crate::backend::Conv1d;
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::tensor::axes::Axis;
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

impl<Bt: Axis + Send + Sync, C: Axis + Send + Sync, T: Axis + Send + Sync> Tensor<(Bt, C, T)> {
    /// Convolves `[batch, C, T]` with `weight [O, C, K]` (+ `bias [O]`) into `[batch, O, T]`.
    pub fn conv1d<O: Axis + Send + Sync, K: Axis + Send + Sync>(
        &self,
        weight: &Tensor<(O, C, K)>,
        bias: Option<&Tensor<(O,)>>,
        opts: Conv1dOptions,
    ) -> Result<Tensor<(Bt, O, T)>> {
        let ctx = ExecContext::current();
        let (batch, cin, t_in) = (self.shape()[0], self.shape()[1], self.shape()[2]);
        let (cout, wc, k) = (weight.shape()[0], weight.shape()[1], weight.shape()[2]);
        if wc != cin {
            return Err(FucinaError::ShapeMismatch { axis: C::NAME.to_string(), left: cin, right: wc });
        }
        if k == 0 || opts.dilation == 0 {
            return Err(FucinaError::InvalidArgument {
                op: "conv1d",
                msg: "kernel size and dilation must be positive".into(),
            });
        }
        if let Some(b) = bias {
            if b.shape()[0] != cout {
                return Err(FucinaError::ShapeMismatch { axis: O::NAME.to_string(), left: cout, right: b.shape()[0] });
            }
        }
        let span = opts.dilation * (k - 1);
        let (pad_left, pad_right) = match opts.padding {
            Padding::Valid => (0, 0),
            Padding::Causal => (span, 0),
            Padding::Same => (span / 2, span - span / 2),
            Padding::Explicit(l, r) => (l, r),
        };
        if t_in + pad_left + pad_right < span + 1 {
            return Err(FucinaError::InvalidArgument {
                op: "conv1d",
                msg: format!(
                    "input of length {t_in} (+{pad_left}/{pad_right} padding) is shorter than the kernel span {}",
                    span + 1
                ),
            });
        }
        let p = Conv1d { batch, cin, cout, t_in, k, dilation: opts.dilation, pad_left, pad_right };
        let x = contiguous_f32(&ctx, self.raw(), "conv1d")?;
        let w = contiguous_f32(&ctx, weight.raw(), "conv1d")?;
        let b = match bias {
            Some(b) => Some(contiguous_f32(&ctx, b.raw(), "conv1d")?),
            None => None,
        };
        let t_out = p.t_out();
        let mut out = ctx.alloc(batch * cout * t_out);
        let work = batch * cout * t_out * cin * k;
        ctx.run(work, |kern| kern.conv1d(&p, &x, &w, b.as_deref(), &mut out));
        let y = finish(&ctx, out, &[batch, cout, t_out], self.dtype().promote(weight.dtype()))?;
        let has_bias = bias.is_some();
        let mut inputs = vec![self.raw(), weight.raw()];
        inputs.extend(bias.map(|b| b.raw()));
        let (xs, ws) = (&x, &w);
        Tensor::from_raw(record(y, &inputs, move || {
            // Copied only when a graph is recorded; inference keeps nothing.
            let (xv, wv) = (xs.to_vec(), ws.to_vec());
            Box::new(move |g: &RawTensor| {
                let ctx = ExecContext::current();
                let gc = contiguous_f32(&ctx, g, "conv1d backward")?;
                let mut dx = vec![0.0f32; xv.len()];
                let mut dw = vec![0.0f32; wv.len()];
                ctx.run(work, |kern| kern.conv1d_backward(&p, &xv, &wv, &gc, &mut dx, &mut dw));
                let mut grads =
                    vec![Some(ctx.wrap_f32(dx, &[batch, cin, t_in])?), Some(ctx.wrap_f32(dw, &[cout, cin, k])?)];
                if has_bias {
                    let g3 = ctx.wrap_f32(gc.to_vec(), &[batch, cout, t_out])?;
                    grads.push(Some(
                        crate::ops::reduce_raw(
                            &ctx,
                            crate::backend::ReduceOp::Sum,
                            &g3,
                            &["b", "o", "t"],
                            &["b", "t"],
                        )?
                        .0,
                    ));
                }
                Ok(grads)
            })
        }))
    }
}
