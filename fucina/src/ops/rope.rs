//! Rotary position embeddings as one op (the rotation of every head of every position by
//! its angle table), in the NeoX (halves) or GPT-J (interleaved pairs) layout.

use super::contiguous_f32;
use crate::axis::seq;
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::tensor::axes::{Axes, Axis, HasAxes};
use crate::tensor::{RawTensor, Tensor};

/// Which values a rotary embedding rotates together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RopeStyle {
    /// Pair `i` is `(i, i + d/2)`: NeoX, Qwen, Llama in transformers.
    Halves,
    /// Pair `i` is `(2i, 2i + 1)`: GPT-J, and DeepSeek's rotary part as stored in GGUF.
    Pairs,
}

fn rotate(ctx: &ExecContext, x: &RawTensor, cos: &[f32], sin: &[f32], style: RopeStyle) -> Result<RawTensor> {
    let shape = x.shape().to_vec();
    let (s, d) = (shape[0], shape[shape.len() - 1]);
    let r = x.numel().checked_div(s * d).unwrap_or(0);
    let xd = contiguous_f32(ctx, x, "rope")?;
    let mut out = ctx.alloc(x.numel());
    let pairs = style == RopeStyle::Pairs;
    ctx.run(x.numel(), |k| k.rope(&xd, r, d, cos, sin, pairs, &mut out));
    ctx.wrap_f32(out, &shape)
}

impl<A: Axes> Tensor<A> {
    /// Rotates axis `D` (the last axis; `seq` must be the first) by the angle tables
    /// `cos`, `sin` `[seq, D/2]` (see [`RopeStyle`]). Recorded with its backward (the
    /// inverse rotation).
    pub fn rope<D: Axis>(&self, cos: &Tensor<(seq, D)>, sin: &Tensor<(seq, D)>, style: RopeStyle) -> Result<Tensor<A>>
    where
        A: HasAxes<(seq, D)>,
    {
        let names = A::names();
        if names.first() != Some(&seq::NAME) || names.last() != Some(&D::NAME) {
            return Err(FucinaError::InvalidArgument {
                op: "rope",
                msg: format!("rope needs `seq` first and `{}` last, got {names:?}", D::NAME),
            });
        }
        let (s, d) = (self.shape()[0], self.shape()[names.len() - 1]);
        if !d.is_multiple_of(2) || cos.shape() != [s, d / 2] || sin.shape() != [s, d / 2] {
            return Err(FucinaError::InvalidArgument {
                op: "rope",
                msg: format!(
                    "{s} positions of width {d} need even width and [{s}, {}] tables, got {:?} and {:?}",
                    d / 2,
                    cos.shape(),
                    sin.shape()
                ),
            });
        }
        let ctx = ExecContext::current();
        let (c, sn) = (cos.to_f32_vec(), sin.to_f32_vec());
        let y = rotate(&ctx, self.raw(), &c, &sn, style)?;
        let y = record(y, &[self.raw()], move || {
            let neg: Vec<f32> = sn.iter().map(|v| -v).collect();
            Box::new(move |g: &RawTensor| {
                let ctx = ExecContext::current();
                Ok(vec![Some(rotate(&ctx, g, &c, &neg, style)?)])
            })
        });
        Tensor::from_raw(y)
    }
}
