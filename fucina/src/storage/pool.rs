//! A thread-safe pool of f32 buffers bucketed by power-of-two capacity.

use std::collections::HashMap;
use std::sync::Mutex;

/// Reuses f32 buffers so the steady state of a loop allocates nothing.
#[derive(Debug)]
pub struct BufferPool {
    inner: Mutex<PoolInner>,
    max_bytes: usize,
}

#[derive(Debug, Default)]
struct PoolInner {
    buckets: HashMap<u32, Vec<Vec<f32>>>,
    bytes: usize,
    hits: u64,
    misses: u64,
}

/// Counters describing pool use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    /// Requests served from the pool.
    pub hits: u64,
    /// Requests that allocated.
    pub misses: u64,
    /// Bytes held by idle buffers.
    pub idle_bytes: usize,
}

/// The bucket of buffers with room for `len` elements: log2 of the next power of two.
fn bucket(len: usize) -> u32 {
    len.max(1).checked_next_power_of_two().map_or(usize::BITS, usize::trailing_zeros)
}

/// The capacity to allocate for `len` elements: a power of two, so that the buffer comes
/// back to `len`'s bucket (`len` itself past the largest power of two).
fn capacity(len: usize) -> usize {
    len.checked_next_power_of_two().unwrap_or(len)
}

/// `v` holding exactly `len` elements (kept values stale, new ones zero).
fn fit(mut v: Vec<f32>, len: usize) -> Vec<f32> {
    if len <= v.len() {
        v.truncate(len);
    } else {
        v.resize(len, 0.0);
    }
    v
}

impl BufferPool {
    /// A pool that keeps at most `max_bytes` of idle buffers.
    pub fn new(max_bytes: usize) -> BufferPool {
        BufferPool { inner: Mutex::new(PoolInner::default()), max_bytes }
    }

    /// A buffer of `len` elements, reused when one is idle. A reused buffer keeps stale
    /// (initialized) values; the caller overwrites every element.
    pub fn take(&self, len: usize) -> Vec<f32> {
        let v = self.reuse(len).unwrap_or_else(|| Vec::with_capacity(capacity(len)));
        fit(v, len)
    }

    /// As [`take`](Self::take), but a buffer the pool does not hold is allocated fallibly
    /// ([`super::alloc::try_with_capacity`]): too large a request is an error naming `what`,
    /// not an abort. A reused buffer keeps stale values; the caller overwrites every element.
    ///
    /// ```
    /// use fucina::storage::BufferPool;
    /// let pool = BufferPool::new(1 << 20);
    /// pool.put(pool.try_take("a product", 1000)?);
    /// assert_eq!(pool.try_take("a product", 900)?.len(), 900);
    /// assert_eq!(pool.stats().hits, 1);
    /// assert!(pool.try_take("a huge product", usize::MAX / 8).is_err());
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn try_take(&self, what: &str, len: usize) -> crate::Result<Vec<f32>> {
        let v = match self.reuse(len) {
            Some(v) => v,
            None => super::alloc::try_with_capacity(what, capacity(len))?,
        };
        Ok(fit(v, len))
    }

    /// An idle buffer of `len`'s bucket, counted as a hit, or a miss.
    fn reuse(&self, len: usize) -> Option<Vec<f32>> {
        let mut g = self.lock();
        let v = g.buckets.get_mut(&bucket(len)).and_then(Vec::pop);
        match &v {
            Some(buf) => {
                g.hits += 1;
                g.bytes -= buf.capacity() * 4;
            }
            None => g.misses += 1,
        }
        v
    }

    /// Returns a buffer to the pool (dropped if the pool is full or it is tiny).
    pub fn put(&self, v: Vec<f32>) {
        let cap = v.capacity();
        if cap < 64 || !cap.is_power_of_two() {
            return;
        }
        let mut g = self.lock();
        if g.bytes + cap * 4 > self.max_bytes {
            return;
        }
        g.bytes += cap * 4;
        g.buckets.entry(bucket(cap)).or_default().push(v);
    }

    /// Hit/miss counters and idle bytes.
    pub fn stats(&self) -> PoolStats {
        let g = self.lock();
        PoolStats { hits: g.hits, misses: g.misses, idle_bytes: g.bytes }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolInner> {
        // A poisoned pool only means a panic elsewhere; its buffers are still valid.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reuses_buffers_by_bucket() {
        let p = BufferPool::new(1 << 20);
        let a = p.take(100);
        assert_eq!(a.len(), 100);
        p.put(a);
        let b = p.take(120);
        assert_eq!(b.len(), 120);
        assert_eq!(p.stats().hits, 1);
    }
}
