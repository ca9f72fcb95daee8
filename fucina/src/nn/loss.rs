//! Losses, written with the differentiable ops so they train as they are.

use crate::dtype::DType;
use crate::error::{FucinaError, Result};
use crate::tensor::axes::{Axes, Axis, BroadcastFrom, CanReduce, HasAxes};
use crate::tensor::Tensor;

/// Mean cross-entropy of `logits` over the class axis `X` against u32 class `targets`
/// (the logits' other axes). Targets equal to `ignore_index` are left out of the mean;
/// if every target is ignored the result is NaN, as in PyTorch.
pub fn cross_entropy<X: Axis, A>(
    logits: &Tensor<A>,
    targets: &Tensor<<A as CanReduce<X>>::Out>,
    ignore_index: Option<u32>,
) -> Result<Tensor<()>>
where
    A: HasAxes<X> + CanReduce<X> + CanReduce<A, Out = ()> + BroadcastFrom<A>,
{
    if targets.dtype() != DType::U32 {
        return Err(FucinaError::DTypeMismatch {
            op: "cross_entropy targets",
            left: targets.dtype(),
            right: DType::U32,
        });
    }
    let d = logits.axis_index::<X>();
    let classes = logits.shape()[d];
    let mut want: Vec<usize> = logits.shape().to_vec();
    want.remove(d);
    if targets.shape() != want.as_slice() {
        return Err(FucinaError::InvalidArgument {
            op: "cross_entropy",
            msg: format!("targets have shape {:?}, the logits without `{}` have {:?}", targets.shape(), X::NAME, want),
        });
    }
    let t = targets.to_vec::<u32>()?;
    let mut ids = Vec::with_capacity(t.len());
    let mut mask = Vec::with_capacity(t.len());
    for &c in &t {
        if Some(c) == ignore_index {
            ids.push(0);
            mask.push(0.0f32);
        } else if c as usize >= classes {
            return Err(FucinaError::OutOfRange { axis: X::NAME.to_string(), index: c as usize, size: classes });
        } else {
            ids.push(c);
            mask.push(1.0);
        }
    }
    let count: f32 = mask.iter().sum();
    let mut shape = logits.shape().to_vec();
    shape[d] = 1;
    let index = Tensor::<A>::from_vec(ids, &shape)?;
    let weights = Tensor::<A>::from_vec(mask, &shape)?;
    let picked = logits.log_softmax::<X>()?.gather::<X>(&index)?;
    picked.mul(&weights)?.sum::<A>()?.scale(-1.0 / count)
}

/// Mean squared error.
pub fn mse_loss<A>(pred: &Tensor<A>, target: &Tensor<A>) -> Result<Tensor<()>>
where
    A: Axes + BroadcastFrom<A> + CanReduce<A, Out = ()>,
{
    pred.sub(target)?.square()?.mean::<A>()
}

/// Mean binary cross-entropy of `logits` against targets in [0, 1]: `softplus(x) - x*y`,
/// stable for large |x|.
pub fn bce_with_logits<A>(logits: &Tensor<A>, target: &Tensor<A>) -> Result<Tensor<()>>
where
    A: Axes + BroadcastFrom<A> + CanReduce<A, Out = ()>,
{
    logits.softplus()?.sub(&logits.mul(target)?)?.mean::<A>()
}
