//! Immutable byte ranges shared between owners: a `Vec<u8>` or a memory map of a model file.

use std::ops::Deref;
use std::sync::Arc;

/// A cheap-to-clone view of `len` bytes at `start` inside a shared owner (an owned vector,
/// or a read-only memory map), so weights can stay in the file's pages instead of RAM copies.
#[derive(Clone)]
pub struct SharedBytes {
    owner: Arc<dyn AsRef<[u8]> + Send + Sync>,
    start: usize,
    len: usize,
}

impl SharedBytes {
    /// Takes ownership of a vector.
    pub fn from_vec(v: Vec<u8>) -> SharedBytes {
        let len = v.len();
        SharedBytes { owner: Arc::new(v), start: 0, len }
    }

    /// A range of a shared owner; `None` if the range is out of bounds.
    pub fn from_owner(owner: Arc<dyn AsRef<[u8]> + Send + Sync>, start: usize, len: usize) -> Option<SharedBytes> {
        let end = start.checked_add(len)?;
        ((*owner).as_ref().len() >= end).then_some(SharedBytes { owner, start, len })
    }

    /// A sub-range sharing the same owner; `None` if it lies outside these bytes.
    pub fn slice(&self, start: usize, len: usize) -> Option<SharedBytes> {
        let end = start.checked_add(len)?;
        (end <= self.len).then(|| SharedBytes { owner: self.owner.clone(), start: self.start + start, len })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &(*self.owner).as_ref()[self.start..self.start + self.len]
    }
}

impl Deref for SharedBytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.as_slice()
    }
}

impl std::fmt::Debug for SharedBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedBytes({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_checked() {
        let owner: Arc<dyn AsRef<[u8]> + Send + Sync> = Arc::new(vec![1u8, 2, 3, 4]);
        assert_eq!(&*SharedBytes::from_owner(owner.clone(), 1, 2).unwrap(), &[2, 3]);
        assert!(SharedBytes::from_owner(owner.clone(), 3, 2).is_none());
        assert!(SharedBytes::from_owner(owner, usize::MAX, 2).is_none());
        assert_eq!(&*SharedBytes::from_vec(vec![9, 8]), &[9, 8]);
        let all = SharedBytes::from_vec(vec![1, 2, 3, 4, 5]);
        let mid = all.slice(1, 3).unwrap();
        assert_eq!(&*mid, &[2, 3, 4]);
        assert_eq!(&*mid.slice(2, 1).unwrap(), &[4]);
        assert!(mid.slice(2, 2).is_none());
    }
}
