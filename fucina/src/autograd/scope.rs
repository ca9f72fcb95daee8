//! Exec scopes (record the graph of a step, free it on drop) and `no_grad` regions.

use super::node::{self, Node};
use crate::exec::graph::{install_recorder, BackwardFn, Recorder, RecorderGuard};
use crate::exec::{ContextGuard, ExecContext};
use crate::tensor::RawTensor;
use std::sync::{Arc, Mutex};

/// Records the nodes of one scope.
struct ScopeRecorder {
    nodes: Mutex<Vec<Arc<Node>>>,
}

impl Recorder for ScopeRecorder {
    fn record(&self, out: RawTensor, inputs: &[&RawTensor], backward: BackwardFn) -> RawTensor {
        let ins = inputs.iter().map(|t| node::of(t)).collect();
        let n = Arc::new(Node::op(ins, backward));
        self.nodes.lock().unwrap_or_else(|e| e.into_inner()).push(n.clone());
        out.with_node(n)
    }
}

/// Records nothing: results of ops are untracked.
struct NoGrad;

impl Recorder for NoGrad {
    fn record(&self, out: RawTensor, _: &[&RawTensor], _: BackwardFn) -> RawTensor {
        out
    }
}

/// An open exec scope: while it lives, ops on this thread record what backward needs;
/// dropping it releases every node recorded in it.
pub struct ExecScope {
    recorder: Arc<ScopeRecorder>,
    _recording: RecorderGuard,
    _ctx: ContextGuard,
}

impl ExecContext {
    /// Opens an exec scope on this thread (and makes this context current for it).
    pub fn open_exec_scope(&self) -> ExecScope {
        let recorder = Arc::new(ScopeRecorder { nodes: Mutex::new(Vec::new()) });
        let ctx = self.enter();
        let rec = install_recorder(recorder.clone());
        ExecScope { recorder, _recording: rec, _ctx: ctx }
    }
}

impl ExecScope {
    /// Number of op nodes recorded so far.
    pub fn recorded(&self) -> usize {
        self.recorder.nodes.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

impl Drop for ExecScope {
    fn drop(&mut self) {
        let nodes = std::mem::take(&mut *self.recorder.nodes.lock().unwrap_or_else(|e| e.into_inner()));
        for n in nodes {
            n.release();
        }
    }
}

/// Runs `f` without recording: results are untracked even inside an exec scope.
pub fn no_grad<R>(f: impl FnOnce() -> R) -> R {
    let _g = install_recorder(Arc::new(NoGrad));
    f()
}
