//! Broadcasting views: a tensor seen with more axes (stride 0 along the new ones).

use super::elementwise::broadcast_strides;
use super::grad::unbroadcast;
use crate::error::{FucinaError, Result};
use crate::exec::graph::record;
use crate::exec::ExecContext;
use crate::tensor::axes::{Axes, Axis, BroadcastFrom, CanJoin, CanReduce};
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

    /// This tensor without its axis `X`, which must have size 1 (an error naming the axis
    /// otherwise); zero-copy. The inverse of [`Tensor::unsqueeze`].
    ///
    /// ```
    /// use fucina::prelude::*;
    /// let x = Tensor::<axes![batch, channel, time]>::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 1, 2])?;
    /// let y: Tensor<axes![batch, time]> = x.squeeze::<channel>()?;
    /// assert_eq!((y.shape(), y.to_f32_vec()), (&[2usize, 2][..], vec![1.0, 2.0, 3.0, 4.0]));
    /// assert!(y.unsqueeze::<channel>()?.permute::<axes![batch, time, channel]>()?.squeeze::<time>().is_err());
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn squeeze<X: Axis>(&self) -> Result<Tensor<<A as CanReduce<X>>::Out>>
    where
        A: CanReduce<X>,
    {
        let names = A::names();
        let d = names
            .iter()
            .position(|n| *n == X::NAME)
            .ok_or_else(|| FucinaError::InvalidArgument { op: "squeeze", msg: format!("no axis `{}`", X::NAME) })?;
        if self.shape()[d] != 1 {
            return Err(FucinaError::InvalidArgument {
                op: "squeeze",
                msg: format!("axis `{}` has size {}, not 1", X::NAME, self.shape()[d]),
            });
        }
        let t = self.raw();
        let (mut shape, mut strides) = (t.shape().to_vec(), t.layout().strides().to_vec());
        shape.remove(d);
        strides.remove(d);
        let y = t.with_layout(Layout::from_parts(shape, strides, t.layout().offset()))?;
        Tensor::from_raw(record(y, &[t], move || {
            Box::new(move |g: &RawTensor| {
                let (mut shape, mut strides) = (g.shape().to_vec(), g.layout().strides().to_vec());
                shape.insert(d, 1);
                strides.insert(d, 0);
                Ok(vec![Some(g.with_layout(Layout::from_parts(shape, strides, g.layout().offset()))?)])
            })
        }))
    }
}
