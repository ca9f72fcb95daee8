//! The recording hook: ops hand each result and its backward function to the recorder
//! installed on this thread (by the `autograd` layer's exec scope). With none installed,
//! or when no input is tracked, recording is a no-op and forward keeps nothing.

use crate::error::Result;
use crate::tensor::RawTensor;
use std::cell::RefCell;
use std::sync::Arc;

/// Computes the gradients of an op's inputs from the gradient of its output
/// (`None` for an input that needs none).
pub type BackwardFn = Box<dyn Fn(&RawTensor) -> Result<Vec<Option<RawTensor>>> + Send + Sync>;

/// What records the graph; implemented by the `autograd` layer.
pub trait Recorder: Send + Sync {
    /// Attaches a node to `out` whose inputs are `inputs` and whose backward is `backward`.
    fn record(&self, out: RawTensor, inputs: &[&RawTensor], backward: BackwardFn) -> RawTensor;
}

thread_local! {
    static RECORDERS: RefCell<Vec<Arc<dyn Recorder>>> = const { RefCell::new(Vec::new()) };
}

/// Installs a recorder on this thread until the returned guard drops.
pub fn install_recorder(r: Arc<dyn Recorder>) -> RecorderGuard {
    RECORDERS.with(|s| s.borrow_mut().push(r));
    RecorderGuard { _not_send: std::marker::PhantomData }
}

/// Removes the recorder installed by [`install_recorder`] when dropped.
#[must_use = "the recorder is installed only while the guard lives"]
pub struct RecorderGuard {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for RecorderGuard {
    fn drop(&mut self) {
        RECORDERS.with(|s| {
            s.borrow_mut().pop();
        });
    }
}

fn current() -> Option<Arc<dyn Recorder>> {
    RECORDERS.with(|s| s.borrow().last().cloned())
}

/// Whether an op whose inputs are `inputs` would be recorded now.
pub fn recording(inputs: &[&RawTensor]) -> bool {
    inputs.iter().any(|t| t.node().is_some()) && RECORDERS.with(|s| !s.borrow().is_empty())
}

/// Records `out` (if recording) with a backward built lazily by `make_backward`.
pub fn record(out: RawTensor, inputs: &[&RawTensor], make_backward: impl FnOnce() -> BackwardFn) -> RawTensor {
    if !recording(inputs) {
        return out;
    }
    match current() {
        Some(r) => r.record(out, inputs, make_backward()),
        None => out,
    }
}
