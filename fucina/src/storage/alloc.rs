//! Fallible allocation for buffers whose size comes from outside (a file, a flag, a
//! request): the size is checked for overflow, against the memory the machine has, and
//! taken with `try_reserve`, so a hostile size is an [`FucinaError::OutOfMemory`] naming
//! what it was for, never an abort.

use crate::error::{FucinaError, Result};

/// Bytes of memory available to new allocations now (`MemAvailable` on Linux), or `None`
/// where that cannot be read.
pub fn available_memory() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// `n * size` bytes, or an [`FucinaError::OutOfMemory`] for `what` when that overflows.
pub fn bytes_for(what: &str, n: usize, size: usize) -> Result<usize> {
    n.checked_mul(size).filter(|b| *b <= isize::MAX as usize).ok_or_else(|| FucinaError::OutOfMemory {
        what: format!("{what} ({n} elements of {size} bytes)"),
        bytes: usize::MAX,
        available: 0,
    })
}

/// Sizes up to this are not checked against the available memory (see [`check_available`]).
pub const SMALL_BYTES: usize = 16 << 20;

/// Checks that `bytes` more bytes fit in the memory available now; `what` names the use in
/// the error. Sizes up to [`SMALL_BYTES`] pass without reading the machine's memory state.
///
/// ```
/// use fucina::storage::alloc::check_available;
/// assert!(check_available("a small buffer", 1024).is_ok());
/// assert!(check_available("an absurd buffer", usize::MAX / 2).is_err());
/// ```
pub fn check_available(what: &str, bytes: usize) -> Result<()> {
    if bytes <= SMALL_BYTES {
        // Below this, reading the machine's memory state would cost more than the
        // allocation (a `/proc` read per buffer in a decode loop); `try_reserve` still fails
        // cleanly.
        return Ok(());
    }
    match available_memory() {
        Some(avail) if bytes > avail => {
            Err(FucinaError::OutOfMemory { what: what.to_string(), bytes, available: avail })
        }
        None if bytes > isize::MAX as usize => {
            Err(FucinaError::OutOfMemory { what: what.to_string(), bytes, available: 0 })
        }
        _ => Ok(()),
    }
}

/// A vector of `n` copies of `value`, allocated fallibly: the size is checked against the
/// available memory and reserved with `try_reserve_exact`.
///
/// ```
/// use fucina::storage::alloc::try_vec;
/// assert_eq!(try_vec("zeros", 3, 0u8)?, vec![0, 0, 0]);
/// assert!(try_vec("too many", usize::MAX / 4, 0.0f32).is_err());
/// # Ok::<(), fucina::FucinaError>(())
/// ```
pub fn try_vec<T: Clone>(what: &str, n: usize, value: T) -> Result<Vec<T>> {
    let mut v = try_with_capacity(what, n)?;
    v.resize(n, value);
    Ok(v)
}

/// `len` zero bytes that start at a multiple of `align` (a power of two): a vector with
/// room to spare and the offset of the aligned range in it (allocated fallibly, as
/// [`try_vec`]). For weights that kernels stream with full-width vector loads, which must
/// not straddle cache lines.
///
/// ```
/// use fucina::storage::alloc::try_aligned_bytes;
/// let (v, off) = try_aligned_bytes("a panel", 1000, 64)?;
/// assert!(v.len() >= off + 1000 && (v.as_ptr() as usize + off) % 64 == 0);
/// # Ok::<(), fucina::FucinaError>(())
/// ```
pub fn try_aligned_bytes(what: &str, len: usize, align: usize) -> Result<(Vec<u8>, usize)> {
    let align = align.max(1);
    if !align.is_power_of_two() {
        return Err(FucinaError::InvalidArgument { op: "try_aligned_bytes", msg: format!("alignment {align}") });
    }
    let padded = len.checked_add(align - 1).ok_or_else(|| FucinaError::OutOfMemory {
        what: format!("{what} ({len} bytes aligned to {align})"),
        bytes: usize::MAX,
        available: 0,
    })?;
    let v = try_vec(what, padded, 0u8)?;
    let off = (align - v.as_ptr() as usize % align) % align;
    Ok((v, off))
}

/// An empty vector with room for `n` elements, allocated fallibly (as [`try_vec`]).
pub fn try_with_capacity<T>(what: &str, n: usize) -> Result<Vec<T>> {
    let bytes = bytes_for(what, n, std::mem::size_of::<T>().max(1))?;
    check_available(what, bytes)?;
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| FucinaError::OutOfMemory {
        what: what.to_string(),
        bytes,
        available: available_memory().unwrap_or(0),
    })?;
    Ok(v)
}
