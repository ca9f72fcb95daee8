//! A persistent worker team for the native kernels' parallel regions.
//!
//! A decode step of a language model runs about two hundred parallel products, each a few
//! tens of microseconds long. Handing each one to a pool that has gone to sleep in between
//! costs a wake-up per product (a futex, and on a VM an inter-processor interrupt), and the
//! product runs on one thread until the sleeper arrives. A [`Team`] keeps its helper threads
//! hot instead: between regions they spin on one atomic word for a while (then yield, then
//! park), so a new region starts on every thread within a cache-line transfer.
//!
//! One thread drives a team at a time (the thread that entered it, see [`Team::enter`]). A
//! region is `n` independent tasks numbered `0..n`; the driver and the helpers claim them one
//! at a time from a shared ticket, so which thread runs a task never changes what the task
//! computes: results are the same for any thread count, as with the rayon pool.
//!
//! [`for_each`] is what the kernels call: on the team when this thread has entered one (and is
//! not already inside a task), on the rayon pool when it is a pool thread, serially
//! otherwise.

use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long an idle helper spins before it starts yielding its core, and then parks.
const SPIN: Duration = Duration::from_micros(200);
/// How long it keeps yielding (letting other threads on its core run) before it parks.
const YIELD: Duration = Duration::from_millis(2);

/// Bits of the ticket word: epoch (24) | task count (20) | next task (20).
const IDX_BITS: u32 = 20;
/// The most tasks one region takes on the team (more go to the rayon pool).
pub const MAX_TASKS: usize = (1 << IDX_BITS) - 1;
const IDX_MASK: u64 = (1 << IDX_BITS) - 1;

fn ticket(epoch: u64, n: usize, next: usize) -> u64 {
    (epoch << (2 * IDX_BITS)) | ((n as u64) << IDX_BITS) | next as u64
}

fn parts(t: u64) -> (u64, usize, usize) {
    (t >> (2 * IDX_BITS), ((t >> IDX_BITS) & IDX_MASK) as usize, (t & IDX_MASK) as usize)
}

/// The task function of the current region, its lifetime erased (see [`Team::run`]).
type TaskFn = *const (dyn Fn(usize) + Sync);

struct Shared {
    /// epoch | n | next: the current region and its next unclaimed task.
    ticket: AtomicU64,
    /// The current region's task function; written by the driver before it publishes the
    /// region's ticket, read by a thread only after it claimed a task of that region.
    task: UnsafeCell<Option<TaskFn>>,
    /// Tasks of the current region that have finished.
    done: AtomicUsize,
    /// A task of the current region panicked.
    panicked: AtomicBool,
    /// Helpers parked on `wake`.
    sleeping: AtomicUsize,
    lock: Mutex<()>,
    wake: Condvar,
    stop: AtomicBool,
}

// SAFETY: `task` is written only by the driver while no task of any region is claimable
// (before the new ticket is published, after every task of the previous region finished),
// and read only by a thread that has claimed a task of the region it belongs to; the ticket's
// release/acquire pair orders the write before those reads. Everything else is atomic or
// behind the mutex.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw task pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

thread_local! {
    /// The team this thread drives, if it entered one.
    static DRIVES: std::cell::RefCell<Option<Arc<Team>>> = const { std::cell::RefCell::new(None) };
    /// This thread is running a task of a team region (nested regions run serially).
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
}

/// A driver thread plus `helpers` threads that stay hot between parallel regions.
pub struct Team {
    shared: Arc<Shared>,
    helpers: Vec<JoinHandle<()>>,
    /// Held by the thread driving a region (a second driver falls back to the pool).
    driving: Mutex<()>,
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Team({} helpers)", self.helpers.len())
    }
}

impl Team {
    /// A team of the calling thread and `helpers` new threads (named `fucina-team-<i>`).
    pub fn new(helpers: usize) -> std::io::Result<Team> {
        let shared = Arc::new(Shared {
            ticket: AtomicU64::new(0),
            task: UnsafeCell::new(None),
            done: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            sleeping: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let mut team = Team { shared: shared.clone(), helpers: Vec::with_capacity(helpers), driving: Mutex::new(()) };
        for i in 0..helpers {
            let s = shared.clone();
            // On an error the team built so far is dropped (its helpers stopped and joined).
            let h = std::thread::Builder::new().name(format!("fucina-team-{i}")).spawn(move || helper(&s))?;
            team.helpers.push(h);
        }
        Ok(team)
    }

    /// Threads that run a region: the driver and the helpers.
    pub fn size(&self) -> usize {
        self.helpers.len() + 1
    }

    /// Runs `f` with this thread as the team's driver: [`for_each`] calls inside it (on this
    /// thread) run on the team.
    pub fn enter<R>(self: &Arc<Self>, f: impl FnOnce() -> R) -> R {
        struct Restore(Option<Arc<Team>>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let prev = self.0.take();
                DRIVES.with(|d| *d.borrow_mut() = prev);
            }
        }
        let _restore = Restore(DRIVES.with(|d| d.borrow_mut().replace(self.clone())));
        f()
    }

    /// Runs tasks `0..n` of `f` on the team, the calling thread taking its share; returns
    /// when all have finished. `n` is at most [`MAX_TASKS`]. Another thread driving the team
    /// at the same time makes this run serially on the calling thread.
    pub fn run(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        assert!(n <= MAX_TASKS, "team region of {n} tasks (at most {MAX_TASKS})");
        let Ok(_driving) = self.driving.try_lock() else {
            (0..n).for_each(f);
            return;
        };
        if n <= 1 || self.helpers.is_empty() {
            (0..n).for_each(f);
            return;
        }
        let s = &*self.shared;
        let (epoch, _, _) = parts(s.ticket.load(Ordering::Acquire));
        // SAFETY: every task of the previous region has finished (the last `run` waited for
        // `done`), so no thread reads `task` now; the transmute only erases the lifetime of
        // `f`, which outlives every use: this function returns only after all `n` tasks ran.
        unsafe {
            *s.task.get() = Some(std::mem::transmute::<&(dyn Fn(usize) + Sync), TaskFn>(f));
        }
        s.done.store(0, Ordering::Relaxed);
        s.panicked.store(false, Ordering::Relaxed);
        let next_epoch = (epoch + 1) & ((1 << (64 - 2 * IDX_BITS)) - 1);
        s.ticket.store(ticket(next_epoch, n, 0), Ordering::SeqCst);
        if s.sleeping.load(Ordering::SeqCst) > 0 {
            let _g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
            s.wake.notify_all();
        }
        work(s, next_epoch);
        let mut spins = 0u32;
        while s.done.load(Ordering::Acquire) < n {
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(4096) {
                std::thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
        if s.panicked.load(Ordering::Relaxed) {
            panic!("a task of a team region panicked");
        }
    }
}

impl Drop for Team {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _g = self.shared.lock.lock().unwrap_or_else(|e| e.into_inner());
            self.shared.wake.notify_all();
        }
        for h in self.helpers.drain(..) {
            let _ = h.join();
        }
    }
}

/// Claims and runs tasks of region `epoch` until none is left.
fn work(s: &Shared, epoch: u64) {
    let mut t = s.ticket.load(Ordering::Acquire);
    loop {
        let (e, n, next) = parts(t);
        if e != epoch || next >= n {
            return;
        }
        match s.ticket.compare_exchange_weak(t, t + 1, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                // SAFETY: this thread claimed task `next` of region `epoch`, so the driver
                // wrote that region's function before publishing the ticket we read (the
                // acquire above), and cannot replace it before this task is counted in `done`.
                let f = unsafe { (*s.task.get()).map(|p| &*p) };
                if let Some(f) = f {
                    IN_TASK.with(|c| c.set(true));
                    let ok = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(next))).is_ok();
                    IN_TASK.with(|c| c.set(false));
                    if !ok {
                        s.panicked.store(true, Ordering::Relaxed);
                    }
                }
                s.done.fetch_add(1, Ordering::Release);
                t = s.ticket.load(Ordering::Acquire);
            }
            Err(now) => t = now,
        }
    }
}

/// A helper's life: wait for a new region (spin, then yield, then park), work on it, repeat.
fn helper(s: &Shared) {
    let mut seen = parts(s.ticket.load(Ordering::Acquire)).0;
    loop {
        let idle = Instant::now();
        let mut spins = 0u32;
        loop {
            if s.stop.load(Ordering::Relaxed) {
                return;
            }
            let (e, _, _) = parts(s.ticket.load(Ordering::Acquire));
            if e != seen {
                seen = e;
                break;
            }
            spins = spins.wrapping_add(1);
            if !spins.is_multiple_of(64) {
                std::hint::spin_loop();
                continue;
            }
            let waited = idle.elapsed();
            if waited < SPIN {
                std::hint::spin_loop();
            } else if waited < SPIN + YIELD {
                std::thread::yield_now();
            } else {
                let g = s.lock.lock().unwrap_or_else(|e| e.into_inner());
                s.sleeping.fetch_add(1, Ordering::SeqCst);
                let g = if parts(s.ticket.load(Ordering::SeqCst)).0 == seen && !s.stop.load(Ordering::SeqCst) {
                    s.wake.wait(g).unwrap_or_else(|e| e.into_inner())
                } else {
                    g
                };
                s.sleeping.fetch_sub(1, Ordering::SeqCst);
                drop(g);
            }
        }
        work(s, seen);
    }
}

/// Whether a [`for_each`] on this thread would run on a team: the thread drives one with
/// helpers and is not inside one of its tasks (or a serial section).
pub fn drives_team() -> bool {
    !IN_TASK.with(|c| c.get())
        && !super::in_serial()
        && DRIVES.with(|d| d.borrow().as_ref().is_some_and(|t| t.size() > 1))
}

/// Runs `f(0..n)` split over the threads available to this call: the team this thread
/// drives (outside any team task), else the rayon pool when this is one of its threads,
/// else serially. Each task must compute the same thing on any thread.
pub fn for_each(n: usize, f: impl Fn(usize) + Sync) {
    if n <= 1 {
        (0..n).for_each(f);
        return;
    }
    if IN_TASK.with(|c| c.get()) || super::in_serial() {
        (0..n).for_each(f);
        return;
    }
    let team = DRIVES.with(|d| d.borrow().clone());
    match team {
        Some(team) if n <= MAX_TASKS && team.size() > 1 => team.run(n, &f),
        _ if rayon::current_thread_index().is_some() && rayon::current_num_threads() > 1 => {
            use rayon::prelude::*;
            let f = &f;
            (0..n).into_par_iter().for_each(f)
        }
        _ => (0..n).for_each(f),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_task_runs_once_per_region_and_nested_regions_run_serially() {
        let team = Arc::new(Team::new(3).unwrap());
        team.enter(|| {
            for n in [0usize, 1, 2, 7, 64, 1000] {
                let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
                for_each(n, |i| {
                    hits[i].fetch_add(1, Ordering::Relaxed);
                    // A nested region runs on the thread of the task.
                    let inner = AtomicUsize::new(0);
                    for_each(3, |_| {
                        inner.fetch_add(1, Ordering::Relaxed);
                    });
                    assert_eq!(inner.load(Ordering::Relaxed), 3);
                });
                assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "n = {n}");
            }
        });
    }

    #[test]
    fn helpers_that_parked_wake_for_the_next_region() {
        let team = Arc::new(Team::new(1).unwrap());
        let sum = AtomicUsize::new(0);
        team.enter(|| {
            for_each(10, |i| {
                sum.fetch_add(i, Ordering::Relaxed);
            });
            std::thread::sleep(SPIN + YIELD + Duration::from_millis(20));
            for_each(10, |i| {
                sum.fetch_add(i, Ordering::Relaxed);
            });
        });
        assert_eq!(sum.load(Ordering::Relaxed), 90);
    }

    #[test]
    fn a_panicking_task_panics_the_driver_and_the_team_stays_usable() {
        let team = Arc::new(Team::new(2).unwrap());
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            team.enter(|| for_each(16, |i| assert_ne!(i, 5)));
        }));
        assert!(r.is_err());
        let count = AtomicUsize::new(0);
        team.enter(|| {
            for_each(16, |_| {
                count.fetch_add(1, Ordering::Relaxed);
            })
        });
        assert_eq!(count.load(Ordering::Relaxed), 16);
    }
}
