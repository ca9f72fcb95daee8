//! Broadcasting views: a tensor seen with more axes (stride 0 along the new ones).

use super::elementwise::broadcast_strides;
use super::grad::unbroadcast;
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::tensor::axes::{Axes, Axis, BroadcastFrom, CanJoin};
use crate::tensor::Layout;
use crate::tensor::{RawTensor, Tensor};

fn broadcast_raw(
    t: &RawTensor,
    names: Vec<&'static str>,
    target: Vec<&'static str>,
    shape: &[usize],
) -> Result<RawTensor> {
    if shape.len() != target.len() {
        return Err(FucinaError::InvalidArgument {
            op: "broadcast_to",
            msg: format!("{} sizes given for the {} axes {target:?}", shape.len(), target.len()),
        });
    }
    let st = broadcast_strides(&target, shape, &names, t.shape(), t.layout().strides())?;
    let y = t.with_layout(Layout::from_parts(shape.to_vec(), st, t.layout().offset()))?;
    Ok(record(y, &[t], move || {
        Box::new(move |g: &RawTensor| Ok(vec![Some(unbroadcast(&ExecContext::current(), g, &target, &names)?)]))
    }))
}

impl<A: Axes> Tensor<A> {
    /// This tensor seen with the axes `B` (a superset of its own, in any order) and the sizes
    /// `shape` (one per axis of `B`; the sizes of `self`'s axes must match): zero-copy, every
    /// new axis repeats the data (stride 0). The gradient sums over the new axes.
    ///
    /// ```
    /// use fucina::prelude::*;
    /// let x = Tensor::<axes![hidden]>::from_vec(vec![1.0f32, 2.0], &[2])?;
    /// let y: Tensor<axes![seq, hidden]> = x.broadcast_to(&[3, 2])?;
    /// assert_eq!(y.to_f32_vec(), vec![1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn broadcast_to<B: BroadcastFrom<A>>(&self, shape: &[usize]) -> Result<Tensor<B>> {
        Tensor::from_raw(broadcast_raw(self.raw(), A::names(), B::names(), shape)?)
    }

    /// This tensor with a new last axis `X` of size 1; zero-copy.
    pub fn unsqueeze<X: Axis>(&self) -> Result<Tensor<<A as CanJoin<(X,)>>::Out>>
    where
        A: CanJoin<(X,)>,
    {
        let mut target = A::names();
        target.push(X::NAME);
        let mut shape = self.shape().to_vec();
        shape.push(1);
        Tensor::from_raw(broadcast_raw(self.raw(), A::names(), target, &shape)?)
    }
}
