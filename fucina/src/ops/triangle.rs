//! Index ranges and triangular masks: `arange`, `tril`, `triu`.

use crate::error::{FucinaError, Result};
use crate::storage::Buffer;
use crate::tensor::axes::{Axes, Axis, BroadcastFrom};
use crate::tensor::{RawTensor, Tensor};

/// Which side of the diagonal a triangular op keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Keep {
    /// `col - row <= diagonal`.
    Lower,
    /// `col - row >= diagonal`.
    Upper,
}

impl<X: Axis + Send + Sync> Tensor<(X,)> {
    /// `0, 1, ..., n - 1` as f32 (exact up to 2^24; larger `n` is refused).
    ///
    /// ```
    /// use fucina::prelude::*;
    /// assert_eq!(Tensor::<axes![seq]>::arange(4)?.to_f32_vec(), vec![0.0, 1.0, 2.0, 3.0]);
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn arange(n: usize) -> Result<Tensor<(X,)>> {
        if n > 1 << 24 {
            return Err(FucinaError::InvalidArgument {
                op: "arange",
                msg: format!("{n} values do not all have an exact f32; use arange_u32"),
            });
        }
        Tensor::from_raw(RawTensor::from_buffer(Buffer::F32((0..n).map(|i| i as f32).collect()), &[n])?)
    }

    /// `0, 1, ..., n - 1` as u32 (ids, positions).
    pub fn arange_u32(n: usize) -> Result<Tensor<(X,)>> {
        let n32 = u32::try_from(n)
            .map_err(|_| FucinaError::InvalidArgument { op: "arange_u32", msg: format!("{n} exceeds u32") })?;
        Tensor::from_raw(RawTensor::from_buffer(Buffer::U32((0..n32).collect()), &[n])?)
    }
}

/// A `[rows, cols]` 0/1 mask: 1 where the element is *dropped*.
fn dropped<R: Axis + Send + Sync, C: Axis + Send + Sync>(
    rows: usize,
    cols: usize,
    diagonal: i64,
    keep: Keep,
) -> Result<Tensor<(R, C)>> {
    let n = rows
        .checked_mul(cols)
        .ok_or_else(|| FucinaError::InvalidArgument { op: "tril/triu", msg: "mask too large".into() })?;
    let mut m = Vec::with_capacity(n);
    for r in 0..rows as i64 {
        for c in 0..cols as i64 {
            let kept = match keep {
                Keep::Lower => c - r <= diagonal,
                Keep::Upper => c - r >= diagonal,
            };
            m.push(if kept { 0.0f32 } else { 1.0 });
        }
    }
    Tensor::from_raw(RawTensor::from_buffer(Buffer::F32(m), &[rows, cols])?)
}

impl<A: Axes> Tensor<A> {
    /// The size of the axis called `name` (present: the callers' bounds say so).
    fn axis_len(&self, name: &str) -> usize {
        self.shape()[super::pos(&A::names(), name)]
    }

    /// The lower triangle over the axes `(R, C)` (rows `R`, columns `C`): elements with
    /// `col - row <= diagonal` kept, the rest zero (as `torch.tril`; `diagonal` 0 keeps the
    /// main diagonal, -1 drops it). Every other axis is a batch axis; gradients pass through
    /// the kept elements.
    ///
    /// ```
    /// use fucina::prelude::*;
    /// let x = Tensor::<axes![seq, kv_seq]>::ones(&[2, 3])?;
    /// assert_eq!(x.tril::<seq, kv_seq>(0)?.to_f32_vec(), vec![1.0, 0.0, 0.0, 1.0, 1.0, 0.0]);
    /// # Ok::<(), fucina::FucinaError>(())
    /// ```
    pub fn tril<R: Axis + Send + Sync, C: Axis + Send + Sync>(&self, diagonal: i64) -> Result<Tensor<A>>
    where
        A: BroadcastFrom<(R, C)>,
    {
        let mask = dropped::<R, C>(self.axis_len(R::NAME), self.axis_len(C::NAME), diagonal, Keep::Lower)?;
        self.masked_fill(&mask, 0.0)
    }

    /// The upper triangle over the axes `(R, C)`: elements with `col - row >= diagonal` kept,
    /// the rest zero (as `torch.triu`).
    pub fn triu<R: Axis + Send + Sync, C: Axis + Send + Sync>(&self, diagonal: i64) -> Result<Tensor<A>>
    where
        A: BroadcastFrom<(R, C)>,
    {
        let mask = dropped::<R, C>(self.axis_len(R::NAME), self.axis_len(C::NAME), diagonal, Keep::Upper)?;
        self.masked_fill(&mask, 0.0)
    }
}
