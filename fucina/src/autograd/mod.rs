//! Autograd with the graph implicit in the values.
//!
//! Inside an exec scope (`ctx.open_exec_scope()`) each op whose inputs are tracked
//! attaches a `Node` to its result: the op's backward function and
//! pointers to its inputs' nodes. There is no graph object and no tape. `loss.backward(&ctx)`
//! walks the pointers from the loss, gives each node an atomic count of its consumers,
//! and runs a node's backward as soon as that count drains, on the context's bounded
//! worker pool, concurrently across independent branches. Dropping the scope releases
//! the step's graph at once; parameters (leaves) keep their accumulated gradients.

mod checkpoint;
mod engine;
mod gradcheck;
mod node;
mod scope;

pub use checkpoint::checkpoint;
pub use gradcheck::{gradcheck, GradcheckReport};
pub use scope::{no_grad, ExecScope};

use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::storage::Buffer;
use crate::tensor::axes::Axes;
use crate::tensor::{RawTensor, Tensor};
use node::Node;
use std::sync::Arc;

/// Marks a raw tensor as a trainable leaf (keeps an existing leaf as it is).
pub fn track(t: RawTensor) -> RawTensor {
    if node::of(&t).is_some_and(|n| n.is_leaf()) {
        return t;
    }
    t.detached().with_node(Arc::new(Node::leaf()))
}

/// Whether the raw tensor is a trainable leaf.
pub fn is_leaf(t: &RawTensor) -> bool {
    node::of(t).is_some_and(|n| n.is_leaf())
}

/// The gradient accumulated in a leaf, if any.
pub fn grad_of(t: &RawTensor) -> Option<RawTensor> {
    node::of(t).filter(|n| n.is_leaf()).and_then(|n| n.grad())
}

/// Clears a leaf's accumulated gradient.
pub fn zero_grad_of(t: &RawTensor) {
    if let Some(n) = node::of(t).filter(|n| n.is_leaf()) {
        n.set_grad(None);
    }
}

impl<A: Axes> Tensor<A> {
    /// This tensor as a trainable leaf: ops on it inside an exec scope are recorded.
    pub fn requires_grad(self) -> Tensor<A> {
        let raw = track(self.into_raw());
        // The axis type is unchanged, so the rank check cannot fail.
        Tensor::from_raw(raw).unwrap_or_else(|_| unreachable!("track keeps the shape"))
    }

    /// Whether this tensor is tracked (a leaf or the result of a recorded op).
    pub fn is_tracked(&self) -> bool {
        self.raw().node().is_some()
    }

    /// The same values, cut from the graph.
    pub fn detach(&self) -> Tensor<A> {
        Tensor::from_raw(self.raw().detached()).unwrap_or_else(|_| unreachable!("detach keeps the shape"))
    }

    /// The gradient accumulated in this leaf by `backward`, if any.
    pub fn grad(&self) -> Option<Tensor<A>> {
        grad_of(self.raw()).and_then(|g| Tensor::from_raw(g).ok())
    }

    /// Clears this leaf's accumulated gradient.
    pub fn zero_grad(&self) {
        zero_grad_of(self.raw())
    }

    /// Back-propagates from this one-element tensor (d self / d self = 1).
    pub fn backward(&self, ctx: &ExecContext) -> Result<()> {
        if self.numel() != 1 {
            return Err(FucinaError::InvalidArgument {
                op: "backward",
                msg: format!(
                    "backward needs a one-element loss, this tensor has {} elements; use backward_with",
                    self.numel()
                ),
            });
        }
        self.backward_with(ctx, &Tensor::from_raw(RawTensor::from_buffer(Buffer::F32(vec![1.0]), self.shape())?)?)
    }

    /// Back-propagates `grad` (d loss / d self, same shape) through the recorded graph.
    pub fn backward_with(&self, ctx: &ExecContext, grad: &Tensor<A>) -> Result<()> {
        if grad.shape() != self.shape() {
            return Err(FucinaError::InvalidArgument {
                op: "backward",
                msg: format!("gradient shape {:?} differs from the tensor's {:?}", grad.shape(), self.shape()),
            });
        }
        let root = node::of(self.raw()).ok_or(FucinaError::InvalidArgument {
            op: "backward",
            msg: "the tensor is not tracked: mark parameters with requires_grad and run forward inside ctx.open_exec_scope()".into(),
        })?;
        engine::backward(ctx, root, grad.raw().detached())
    }
}
