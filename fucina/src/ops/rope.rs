//! Rotary position embeddings as one op (the rotation of every head of every position by
//! its angle table), in the NeoX (halves) or GPT-J (interleaved pairs) layout, over the whole
//! head or its leading part (partial rotary embedding: GLM-4.5, Qwen3.5, Gemma 4).

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
    let n = cos.len().checked_div(s).unwrap_or(0);
    let xd = contiguous_f32(ctx, x, "rope")?;
    let mut out = ctx.alloc(x.numel());
    let pairs = style == RopeStyle::Pairs;
    ctx.run(x.numel(), |k| k.rope(&xd, r, d, n, cos, sin, pairs, &mut out));
    ctx.wrap_f32(out, &shape)
}

impl<A: Axes> Tensor<A> {
    /// Rotates axis `D` (the last axis; `seq` must be the first) by the angle tables
    /// `cos`, `sin` `[seq, n]` (see [`RopeStyle`]): the leading `2n` values of each row
    /// rotate, the rest pass unchanged (`n = D/2` rotates all of them). Recorded with its
    /// backward (the inverse rotation).
    ///
    /// ```
    /// use fucina::prelude::*;
    /// use fucina::ops::RopeStyle;
    /// // One position, one head of width 4; only the first pair (0, 1) rotates, by 90 degrees.
    /// let x = Tensor::<axes![seq, head, head_dim]>::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[1, 1, 4])?;
    /// let cos = Tensor::<axes![seq, head_dim]>::from_vec(vec![0.0f32], &[1, 1])?;
    /// let sin = Tensor::<axes![seq, head_dim]>::from_vec(vec![1.0f32], &[1, 1])?;
    /// assert_eq!(x.rope(&cos, &sin, RopeStyle::Halves)?.to_f32_vec(), [-2.0, 1.0, 3.0, 4.0]);
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
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
        let n = cos.shape().get(1).copied().unwrap_or(0);
        if n == 0 || 2 * n > d || cos.shape() != [s, n] || sin.shape() != [s, n] {
            return Err(FucinaError::InvalidArgument {
                op: "rope",
                msg: format!(
                    "{s} positions of width {d} need [{s}, n] tables with 0 < 2n <= {d}, got {:?} and {:?}",
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
