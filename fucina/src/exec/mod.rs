//! Execution: the [`ExecContext`] that owns the backend, thread pool, buffer pool and RNG.

mod context;

pub use context::{ContextGuard, ExecConfig, ExecContext};
