//! `ExecContext`: which backend runs, on how many threads, with which buffers and RNG.

use crate::backend::{BackendKind, Kernels, Team};
use crate::error::{FucinaError, Result};
use crate::rng::Philox;
use crate::storage::{Buffer, BufferPool, Storage};
use crate::tensor::{Layout, RawTensor};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

/// How to build an [`ExecContext`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecConfig {
    /// Which kernels run.
    pub backend: BackendKind,
    /// Worker threads (`None`: one per available core).
    pub threads: Option<usize>,
    /// Seed of the counter-based RNG.
    pub seed: u64,
    /// Most bytes of idle buffers the pool keeps (default 1 GiB). The pool only holds
    /// buffers a run has used, so what it keeps is at most about the run's peak working set;
    /// a cap below that working set makes each step allocate (and page-fault) afresh the
    /// part that does not fit: nanochat's d4 training step on 2 threads keeps about 360 MB
    /// and ran 8.3-8.4k tok/s with a 256 MiB cap, 8.8-9.0k with 1 GiB.
    pub pool_bytes: usize,
}

impl Default for ExecConfig {
    fn default() -> Self {
        ExecConfig { backend: BackendKind::Native, threads: None, seed: 0, pool_bytes: 1 << 30 }
    }
}

struct Inner {
    config: ExecConfig,
    kernels: &'static dyn Kernels,
    pool: rayon::ThreadPool,
    /// The native kernels' worker team for [`ExecContext::run_on_pool`] (more than one thread,
    /// unless `FUCINA_NO_TEAM` is set).
    team: Option<Arc<Team>>,
    threads: usize,
    buffers: Arc<BufferPool>,
    rng: Philox,
    counter: AtomicU64,
}

/// The execution context: cheap to clone (a shared handle).
///
/// Ops run on the *current* context of the calling thread: the one entered with
/// [`ExecContext::enter`], or a process-wide default (native backend, all cores, seed 0).
#[derive(Clone)]
pub struct ExecContext {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for ExecContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ExecContext({}, {} threads, seed {})",
            self.inner.kernels.name(),
            self.inner.threads,
            self.inner.config.seed
        )
    }
}

/// Kernel calls smaller than this run on the calling thread.
const INLINE_WORK: usize = 1 << 15;

thread_local! {
    static CURRENT: RefCell<Vec<ExecContext>> = const { RefCell::new(Vec::new()) };
}

/// Restores the previously current context when dropped.
#[must_use = "the context is current only while the guard lives: `let _g = ctx.enter();`"]
pub struct ContextGuard {
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        CURRENT.with(|c| {
            c.borrow_mut().pop();
        });
    }
}

/// The most worker threads a context takes.
pub const MAX_THREADS: usize = 1024;

impl ExecContext {
    /// Builds a context. More than [`MAX_THREADS`] threads is an error (each is a real OS
    /// thread with its own stack; thousands only cost time and memory).
    pub fn new(config: ExecConfig) -> Result<ExecContext> {
        let threads =
            config.threads.unwrap_or_else(|| std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)).max(1);
        if threads > MAX_THREADS {
            return Err(FucinaError::ThreadPool(format!(
                "{threads} threads asked for; the limit is {MAX_THREADS} (this machine has {})",
                std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
            )));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("fucina-{i}"))
            .build()
            .map_err(|e| FucinaError::ThreadPool(e.to_string()))?;
        let team =
            if config.backend == BackendKind::Native && threads > 1 && std::env::var_os("FUCINA_NO_TEAM").is_none() {
                Some(Arc::new(Team::new(threads - 1).map_err(|e| FucinaError::ThreadPool(e.to_string()))?))
            } else {
                None
            };
        Ok(ExecContext {
            inner: Arc::new(Inner {
                config,
                kernels: config.backend.kernels(),
                pool,
                team,
                threads,
                buffers: Arc::new(BufferPool::new(config.pool_bytes)),
                rng: Philox::new(config.seed),
                counter: AtomicU64::new(0),
            }),
        })
    }

    /// A context with the given backend and thread count, seed 0.
    pub fn with_backend(backend: BackendKind, threads: usize) -> Result<ExecContext> {
        ExecContext::new(ExecConfig { backend, threads: Some(threads), ..ExecConfig::default() })
    }

    /// The current context of this thread.
    pub fn current() -> ExecContext {
        if let Some(c) = CURRENT.with(|c| c.borrow().last().cloned()) {
            return c;
        }
        static DEFAULT: OnceLock<ExecContext> = OnceLock::new();
        DEFAULT
            .get_or_init(|| {
                let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build();
                let config = ExecConfig::default();
                match pool {
                    Ok(pool) => ExecContext {
                        inner: Arc::new(Inner {
                            config,
                            kernels: config.backend.kernels(),
                            pool,
                            team: None,
                            threads,
                            buffers: Arc::new(BufferPool::new(config.pool_bytes)),
                            rng: Philox::new(0),
                            counter: AtomicU64::new(0),
                        }),
                    },
                    // If even a default pool cannot be built, fall back to the scalar backend on one thread.
                    Err(_) => ExecContext::scalar_fallback(),
                }
            })
            .clone()
    }

    fn scalar_fallback() -> ExecContext {
        let config = ExecConfig { backend: BackendKind::Scalar, threads: Some(1), ..ExecConfig::default() };
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).use_current_thread().build();
        let pool = match pool {
            Ok(p) => p,
            Err(e) => panic!("fucina: cannot create even a one-thread pool: {e}"),
        };
        ExecContext {
            inner: Arc::new(Inner {
                config,
                kernels: config.backend.kernels(),
                pool,
                team: None,
                threads: 1,
                buffers: Arc::new(BufferPool::new(config.pool_bytes)),
                rng: Philox::new(0),
                counter: AtomicU64::new(0),
            }),
        }
    }

    /// Makes this the current context of this thread until the guard drops.
    pub fn enter(&self) -> ContextGuard {
        CURRENT.with(|c| c.borrow_mut().push(self.clone()));
        ContextGuard { _not_send: std::marker::PhantomData }
    }

    /// Runs `f` with this context current.
    pub fn scope<R>(&self, f: impl FnOnce() -> R) -> R {
        let _g = self.enter();
        f()
    }

    /// The backend.
    pub fn backend(&self) -> BackendKind {
        self.inner.config.backend
    }

    /// The configuration.
    pub fn config(&self) -> ExecConfig {
        self.inner.config
    }

    /// Number of worker threads.
    pub fn threads(&self) -> usize {
        self.inner.threads
    }

    /// Runs a kernel call of about `work` elements (or multiply-adds): on the worker pool for
    /// native, or inline and serial when the work is too small to pay for the hand-off, or
    /// when the caller is already one serial job of a parallel region (a side-by-side job
    /// such as one expert of a decode step): handing its kernels to the pool would wake a
    /// pool thread per kernel to do what this thread then waits for, with the team's helper
    /// on the same cores.
    pub fn run<R: Send>(&self, work: usize, f: impl FnOnce(&dyn Kernels) -> R + Send) -> R {
        let k = self.inner.kernels;
        match self.inner.config.backend {
            BackendKind::Scalar => f(k),
            BackendKind::Native if work < INLINE_WORK || self.inner.threads == 1 || crate::backend::in_serial() => {
                crate::backend::serial(|| f(k))
            }
            BackendKind::Native => self.inner.pool.install(|| f(k)),
        }
    }

    /// Maps `f` over `items`, results in item order: side by side (on the worker team this
    /// thread drives, else on the pool), each call serial inside with this context current,
    /// when the backend runs in parallel on more than one worker (many small independent
    /// jobs, such as the experts of one decode step, then cost one hand-off instead of one per
    /// kernel); one after another otherwise.
    pub fn map_side_by_side<T: Sync, R: Send>(
        &self,
        items: &[T],
        f: impl Fn(&T) -> crate::error::Result<R> + Sync,
    ) -> crate::error::Result<Vec<R>> {
        use rayon::prelude::*;
        if self.inner.config.backend == BackendKind::Scalar || self.inner.threads == 1 || items.len() < 2 {
            return items.iter().map(f).collect();
        }
        if crate::backend::drives_team() {
            // On the team this thread drives (a model's forward under `run_on_pool`): its
            // helpers are spinning hot, and waking the pool's other threads instead would set
            // them against the spinning helpers for the same cores.
            let slots: Vec<std::sync::Mutex<Option<crate::error::Result<R>>>> =
                items.iter().map(|_| std::sync::Mutex::new(None)).collect();
            crate::backend::for_each_task(items.len(), |i| {
                let r = self.scope(|| crate::backend::serial(|| f(&items[i])));
                *slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
            });
            return slots
                .into_iter()
                .map(|s| {
                    s.into_inner().unwrap_or_else(|e| e.into_inner()).unwrap_or_else(|| {
                        Err(crate::error::FucinaError::InvalidArgument {
                            op: "map_side_by_side",
                            msg: "a task did not run".into(),
                        })
                    })
                })
                .collect();
        }
        self.inner.pool.install(|| items.par_iter().map(|it| self.scope(|| crate::backend::serial(|| f(it)))).collect())
    }

    /// Runs `f` on this context's worker pool (the bounded pool backward runs on).
    pub fn install<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        self.inner.pool.install(f)
    }

    /// Runs `f` on one of this context's workers with this context current there. A long
    /// sequence of ops (a model's forward) run this way drives the native kernels' worker
    /// team (`backend::Team`): its helpers stay hot between the parallel products
    /// of the sequence instead of the pool being woken once per product.
    pub fn run_on_pool<R: Send>(&self, f: impl FnOnce() -> R + Send) -> R {
        if self.inner.config.backend == BackendKind::Scalar {
            return self.scope(f);
        }
        match &self.inner.team {
            Some(team) => self.inner.pool.install(|| team.enter(|| self.scope(f))),
            None => self.inner.pool.install(|| self.scope(f)),
        }
    }

    /// An f32 buffer from the pool with unspecified (initialized) contents; callers overwrite it all.
    pub(crate) fn alloc(&self, len: usize) -> Vec<f32> {
        self.inner.buffers.take(len)
    }

    /// An f32 buffer from the pool, allocated fallibly when the pool has none (an error naming
    /// `what` when memory would run out); unspecified (initialized) contents that callers
    /// overwrite.
    pub(crate) fn try_alloc(&self, what: &str, len: usize) -> Result<Vec<f32>> {
        self.inner.buffers.try_take(what, len)
    }

    /// Wraps an f32 buffer (from `alloc`) as a contiguous tensor that returns it to the pool.
    pub fn wrap_f32(&self, data: Vec<f32>, shape: &[usize]) -> Result<RawTensor> {
        let storage = Arc::new(Storage::pooled(Buffer::F32(data), self.inner.buffers.clone()));
        RawTensor::from_storage(storage, Layout::contiguous(shape))
    }

    /// Buffer pool counters.
    pub fn pool_stats(&self) -> crate::storage::PoolStats {
        self.inner.buffers.stats()
    }

    /// The RNG.
    pub fn philox(&self) -> Philox {
        self.inner.rng
    }

    /// Reserves `blocks` consecutive Philox blocks and returns the first one's index.
    pub fn reserve_rng(&self, blocks: u64) -> u64 {
        self.inner.counter.fetch_add(blocks, Ordering::Relaxed)
    }

    /// The next unused Philox block (save it to resume a run bit-exactly).
    pub fn rng_counter(&self) -> u64 {
        self.inner.counter.load(Ordering::Relaxed)
    }

    /// Restores the RNG position saved with [`rng_counter`](Self::rng_counter).
    pub fn set_rng_counter(&self, counter: u64) {
        self.inner.counter.store(counter, Ordering::Relaxed)
    }
}
