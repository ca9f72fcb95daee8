//! Typed axis surgery: split one named axis into named parts, merge named axes into one.
//! The compiler checks the names (no part may clash with an axis the tensor keeps); the
//! sizes are checked here. Both are views when the strides allow it.

use super::{contiguous_f32, finish, inverse, perm_to, pos};
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::tensor::axes::{Axes, Axis, CanJoin, CanReduce};
use crate::tensor::{Layout, RawTensor, Tensor};

/// The axes after [`Tensor::split_axis`]: `A` without `X`, then the parts `P`.
pub type SplitAxes<A, X, P> = <<A as CanReduce<X>>::Out as CanJoin<P>>::Out;

/// The axes after [`Tensor::merge_axes`]: `A` without the parts `P`, then `Y`.
pub type MergedAxes<A, P, Y> = <<A as CanReduce<P>>::Out as CanJoin<(Y,)>>::Out;

/// Moves the axis at `d` to the end and splits it into `sizes` (a view).
fn split_to_tail(t: &RawTensor, d: usize, sizes: &[usize]) -> Result<RawTensor> {
    let l = t.layout();
    let (mut shape, mut strides) = (l.shape().to_vec(), l.strides().to_vec());
    let (n, s) = (shape.remove(d), strides.remove(d));
    let total = sizes.iter().try_fold(1usize, |a, b| a.checked_mul(*b));
    if total != Some(n) {
        return Err(FucinaError::InvalidArgument {
            op: "split_axis",
            msg: format!("parts {sizes:?} do not multiply to the axis size {n}"),
        });
    }
    for (j, size) in sizes.iter().enumerate() {
        shape.push(*size);
        strides.push(s * sizes[j + 1..].iter().product::<usize>());
    }
    t.with_layout(Layout::from_parts(shape, strides, l.offset()))
}

/// Merges the last `k` axes into one last axis: a view when their strides nest, else a copy.
fn merge_tail(ctx: &ExecContext, t: &RawTensor, k: usize) -> Result<RawTensor> {
    let l = t.layout();
    let r = l.shape().len();
    let (head, tail) = (r - k, &l.shape()[r - k..]);
    let n: usize = tail.iter().product();
    let nested = (head..r - 1).all(|j| l.shape()[j] == 1 || l.strides()[j] == l.strides()[j + 1] * l.shape()[j + 1]);
    let mut shape = l.shape()[..head].to_vec();
    shape.push(n);
    if nested && k > 0 {
        let mut strides = l.strides()[..head].to_vec();
        strides.push(l.strides()[r - 1]);
        return t.with_layout(Layout::from_parts(shape, strides, l.offset()));
    }
    let data = contiguous_f32(ctx, t, "merge_axes")?.to_vec();
    finish(ctx, data, &shape, t.dtype())
}

impl<A: Axes> Tensor<A> {
    /// Splits axis `X` into the axes `P` of sizes `sizes` (their product must be `X`'s size),
    /// placed last in `P`'s order, the first part outermost: `[seq, q_flat]` split into
    /// `(head, head_dim)` is `[seq, head, head_dim]`. Zero-copy. The compiler refuses a part
    /// that names an axis the tensor keeps.
    ///
    /// ```
    /// use fucina::prelude::*;
    /// let x = Tensor::<axes![seq, hidden]>::from_vec((0..12).map(|v| v as f32).collect(), &[2, 6])?;
    /// let y: Tensor<axes![seq, head, head_dim]> = x.split_axis::<hidden, axes![head, head_dim]>(&[3, 2])?;
    /// assert_eq!(y.shape(), &[2, 3, 2]);
    /// let back: Tensor<axes![seq, hidden]> = y.merge_axes::<axes![head, head_dim], hidden>()?;
    /// assert_eq!(back.to_f32_vec(), x.to_f32_vec());
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn split_axis<X: Axis, P: Axes>(&self, sizes: &[usize]) -> Result<Tensor<SplitAxes<A, X, P>>>
    where
        A: CanReduce<X>,
        <A as CanReduce<X>>::Out: CanJoin<P>,
    {
        let parts = P::names().len();
        if sizes.len() != parts {
            return Err(FucinaError::InvalidArgument {
                op: "split_axis",
                msg: format!("{} sizes for {parts} parts", sizes.len()),
            });
        }
        let d = pos(&A::names(), X::NAME);
        let y = split_to_tail(self.raw(), d, sizes)?;
        let rank = A::names().len();
        Tensor::from_raw(record(y, &[self.raw()], move || {
            Box::new(move |g: &RawTensor| {
                let merged = merge_tail(&ExecContext::current(), g, parts)?;
                // The merged axis is last; move it back to `d`.
                let mut perm: Vec<usize> = (0..rank - 1).collect();
                perm.insert(d, rank - 1);
                Ok(vec![Some(merged.with_layout(merged.layout().permuted(&perm))?)])
            })
        }))
    }

    /// Merges the axes `P` (in `P`'s order, the first outermost) into one last axis `Y`: a view
    /// when their strides nest (e.g. the tensor's last axes, contiguous), else a copy.
    pub fn merge_axes<P: Axes, Y: Axis>(&self) -> Result<Tensor<MergedAxes<A, P, Y>>>
    where
        A: CanReduce<P>,
        <A as CanReduce<P>>::Out: CanJoin<(Y,)>,
    {
        let names = A::names();
        let parts = P::names();
        let order: Vec<&'static str> =
            names.iter().copied().filter(|n| !parts.contains(n)).chain(parts.iter().copied()).collect();
        let perm = perm_to(&names, &order);
        let view = self.raw().with_layout(self.raw().layout().permuted(&perm))?;
        let sizes: Vec<usize> = view.shape()[names.len() - parts.len()..].to_vec();
        let y = merge_tail(&ExecContext::current(), &view, parts.len())?;
        let back = inverse(&perm);
        Tensor::from_raw(record(y, &[self.raw()], move || {
            Box::new(move |g: &RawTensor| {
                let split = split_to_tail(g, g.shape().len() - 1, &sizes)?;
                Ok(vec![Some(split.with_layout(split.layout().permuted(&back))?)])
            })
        }))
    }
}
