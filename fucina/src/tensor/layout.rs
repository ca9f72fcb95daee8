//! Shape, strides and offset: the view of a tensor over its storage.

use crate::error::{FucinaError, Result};

/// How a tensor's elements sit in its storage (row-major strides, in elements).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

/// Row-major strides of a shape.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1;
    for i in (0..shape.len()).rev() {
        strides[i] = acc;
        acc *= shape[i];
    }
    strides
}

impl Layout {
    /// The contiguous row-major layout of `shape`.
    pub fn contiguous(shape: &[usize]) -> Layout {
        Layout { shape: shape.to_vec(), strides: contiguous_strides(shape), offset: 0 }
    }

    /// A layout from explicit parts (the caller guarantees they stay within the storage).
    pub fn from_parts(shape: Vec<usize>, strides: Vec<usize>, offset: usize) -> Layout {
        Layout { shape, strides, offset }
    }

    /// Sizes, one per axis.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Strides in elements, one per axis.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// Offset of the first element in the storage.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Number of axes.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether the elements are dense and in row-major order.
    pub fn is_contiguous(&self) -> bool {
        let mut acc = 1;
        for i in (0..self.shape.len()).rev() {
            if self.shape[i] != 1 && self.strides[i] != acc {
                return false;
            }
            acc *= self.shape[i];
        }
        true
    }

    /// One past the largest storage index the view touches (0 when empty).
    pub fn storage_extent(&self) -> usize {
        if self.numel() == 0 {
            return 0;
        }
        self.offset + self.shape.iter().zip(&self.strides).map(|(s, st)| (s - 1) * st).sum::<usize>() + 1
    }

    /// The view with axes reordered: new axis `i` is old axis `perm[i]`.
    pub fn permuted(&self, perm: &[usize]) -> Layout {
        Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        }
    }

    /// The view of `len` elements of axis `dim` from `start`.
    pub fn narrowed(&self, dim: usize, start: usize, len: usize, axis: &str) -> Result<Layout> {
        let size = self.shape[dim];
        if start.checked_add(len).is_none_or(|end| end > size) {
            return Err(FucinaError::OutOfRange { axis: axis.to_string(), index: start + len, size });
        }
        let mut l = self.clone();
        l.shape[dim] = len;
        if len > 0 {
            l.offset += start * self.strides[dim];
        }
        Ok(l)
    }

    /// The same elements with a new shape; only for contiguous layouts.
    pub fn reshaped(&self, shape: &[usize]) -> Result<Layout> {
        let n: usize = shape.iter().product();
        if n != self.numel() {
            return Err(FucinaError::ElementCount { shape: shape.to_vec(), expected: n, got: self.numel() });
        }
        if !self.is_contiguous() {
            return Err(FucinaError::InvalidView("reshape needs a contiguous tensor".into()));
        }
        Ok(Layout { shape: shape.to_vec(), strides: contiguous_strides(shape), offset: self.offset })
    }

    /// The view with a new axis of size `size` and stride 0 at `dim` (broadcast).
    pub fn with_broadcast_axis(&self, dim: usize, size: usize) -> Layout {
        let mut l = self.clone();
        l.shape.insert(dim, size);
        l.strides.insert(dim, 0);
        l
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn views() {
        let l = Layout::contiguous(&[2, 3, 4]);
        assert_eq!(l.strides(), &[12, 4, 1]);
        assert!(l.is_contiguous());
        let p = l.permuted(&[2, 0, 1]);
        assert_eq!(p.shape(), &[4, 2, 3]);
        assert!(!p.is_contiguous());
        let n = l.narrowed(1, 1, 2, "x").unwrap();
        assert_eq!(n.offset(), 4);
        assert_eq!(n.storage_extent(), 24);
        assert!(l.narrowed(1, 2, 2, "x").is_err());
        assert!(p.reshaped(&[24]).is_err());
        assert_eq!(l.reshaped(&[6, 4]).unwrap().strides(), &[4, 1]);
    }
}
