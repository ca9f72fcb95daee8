//! The specification of the order-based kernels: arg-reductions, top-k and running sums
//! along the middle axis of a contiguous `[outer, len, inner]` block.
//!
//! One "line" is the `len` elements `x[(o * len + j) * inner + i]` for fixed `(o, i)`; each
//! function below computes one line, and a backend may run the lines in any order or in
//! parallel (every line is independent, so the results are the same bits).

use std::cmp::Ordering;

/// Which extreme [`arg_line`] looks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgOp {
    /// The index of the largest element.
    Max,
    /// The index of the smallest element.
    Min,
}

/// Which way [`cumsum_line`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    /// `out[j] = x[0] + ... + x[j]`.
    Forward,
    /// `out[j] = x[j] + ... + x[len - 1]` (the backward of a forward scan).
    Reverse,
}

/// The order top-k and arg-max rank by: larger first, NaN above every number (as PyTorch
/// ranks it), equal values by the lower index.
#[inline]
pub fn rank_desc(a: (f32, usize), b: (f32, usize)) -> Ordering {
    let by_value = match (a.0.is_nan(), b.0.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => b.0.partial_cmp(&a.0).unwrap_or(Ordering::Equal),
    };
    by_value.then(a.1.cmp(&b.1))
}

/// The index of the line's largest (smallest) element: the first one among equals; the
/// first NaN when the line has one (as `torch.argmax` / `torch.argmin`). An empty line
/// gives 0 (the ops layer refuses empty lines before it gets here).
pub fn arg_line(op: ArgOp, x: &[f32], len: usize, inner: usize, at: usize) -> u32 {
    let mut best = 0usize;
    for j in 1..len {
        let (v, b) = (x[at + j * inner], x[at + best * inner]);
        if b.is_nan() {
            break;
        }
        let better = v.is_nan()
            || match op {
                ArgOp::Max => v > b,
                ArgOp::Min => v < b,
            };
        if better {
            best = j;
        }
    }
    best as u32
}

/// The `k` first elements of the line in [`rank_desc`] order, values into `vals` and indices
/// into `idx` (both strided by `inner` from `out_at`, `k` of them).
#[allow(clippy::too_many_arguments)]
pub fn topk_line(
    x: &[f32],
    len: usize,
    inner: usize,
    at: usize,
    k: usize,
    vals: &mut [f32],
    idx: &mut [u32],
    out_at: usize,
) {
    let mut order: Vec<(f32, usize)> = (0..len).map(|j| (x[at + j * inner], j)).collect();
    order.sort_by(|a, b| rank_desc(*a, *b));
    for (r, (v, j)) in order.into_iter().take(k).enumerate() {
        vals[out_at + r * inner] = v;
        idx[out_at + r * inner] = j as u32;
    }
}

/// The running sum of the line, accumulated in order in f32.
pub fn cumsum_line(dir: Scan, x: &[f32], len: usize, inner: usize, at: usize, out: &mut [f32]) {
    let mut acc = 0.0f32;
    for step in 0..len {
        let j = match dir {
            Scan::Forward => step,
            Scan::Reverse => len - 1 - step,
        };
        acc += x[at + j * inner];
        out[at + j * inner] = acc;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_follow_pytorch_rules() {
        // Ties go to the first index, NaN wins.
        assert_eq!(arg_line(ArgOp::Max, &[1.0, 3.0, 3.0, 2.0], 4, 1, 0), 1);
        assert_eq!(arg_line(ArgOp::Min, &[1.0, 0.0, 0.0], 3, 1, 0), 1);
        assert_eq!(arg_line(ArgOp::Max, &[1.0, f32::NAN, 5.0, f32::NAN], 4, 1, 0), 1);
        assert_eq!(arg_line(ArgOp::Min, &[1.0, 2.0, f32::NAN], 3, 1, 0), 2);
        let (mut v, mut i) = ([0.0f32; 3], [0u32; 3]);
        topk_line(&[2.0, 5.0, 2.0, f32::NAN, -1.0], 5, 1, 0, 3, &mut v, &mut i, 0);
        assert!(v[0].is_nan());
        assert_eq!((&v[1..], i), (&[5.0, 2.0][..], [3, 1, 0]));
        let mut out = [0.0f32; 3];
        cumsum_line(Scan::Reverse, &[1.0, 2.0, 3.0], 3, 1, 0, &mut out);
        assert_eq!(out, [6.0, 5.0, 3.0]);
    }
}
