//! Execution: the [`ExecContext`] that owns the backend, thread pool, buffer pool and RNG,
//! and the recording hook ops use when a graph is being built.

mod context;
pub mod graph;

pub use context::{ContextGuard, ExecConfig, ExecContext, MAX_THREADS};
