//! Small products over time frames, for streaming models (the real-time amp): `out[t] +=
//! x[t] W` for `n` frames, where a frame is a short channel vector (2..64 values) and `W` is
//! `[ni, no]`. The kernel behind [`Kernels::frames_gemm_acc`](super::Kernels::frames_gemm_acc)
//! must not allocate, lock or spawn: it runs on an audio thread.

use crate::error::{FucinaError, Result};

/// The sizes and strides of one frame product: `n` frames of `ni` inputs (frame `t` at
/// `x[t * xs..]`) times `W: [ni, no]`, accumulated into `n` frames of `no` outputs (frame `t`
/// at `out[t * os..]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameGemm {
    /// Frames.
    pub n: usize,
    /// Inputs per frame.
    pub ni: usize,
    /// Outputs per frame.
    pub no: usize,
    /// Distance between input frames, in values (`>= ni`).
    pub xs: usize,
    /// Distance between output frames, in values (`>= no`).
    pub os: usize,
}

impl FrameGemm {
    /// Checks that `x`, `w` and `out` hold every value the product touches.
    pub fn check(&self, x: &[f32], w: &[f32], out: &[f32]) -> Result<()> {
        let bad = |what: &str| FucinaError::InvalidArgument {
            op: "frames_gemm_acc",
            msg: format!("{what} is too short for {self:?}"),
        };
        if self.n == 0 || self.no == 0 {
            return Ok(());
        }
        let need = |stride: usize, width: usize| (self.n - 1).checked_mul(stride)?.checked_add(width);
        if need(self.xs, self.ni).is_none_or(|v| v > x.len()) {
            return Err(bad("the input"));
        }
        if self.ni.checked_mul(self.no).is_none_or(|v| v > w.len()) {
            return Err(bad("the weight"));
        }
        if need(self.os, self.no).is_none_or(|v| v > out.len()) {
            return Err(bad("the output"));
        }
        Ok(())
    }
}

/// The specification: `out[t * os + o] += sum_i x[t * xs + i] * w[i * no + o]` for `t < n`,
/// `o < no`, summing `i` upwards from 0. Operands are assumed checked ([`FrameGemm::check`]).
///
/// ```
/// use fucina::backend::frames::{frames_gemm_acc_spec, FrameGemm};
/// // Two frames of two inputs, strided by 3; W = [[1, 2], [3, 4]].
/// let x = [1.0, 1.0, 9.0, 2.0, 0.0, 9.0];
/// let mut out = [10.0, 0.0, 0.0, 0.0];
/// frames_gemm_acc_spec(FrameGemm { n: 2, ni: 2, no: 2, xs: 3, os: 2 }, &x, &[1.0, 2.0, 3.0, 4.0], &mut out);
/// assert_eq!(out, [14.0, 6.0, 2.0, 4.0]);
/// ```
pub fn frames_gemm_acc_spec(g: FrameGemm, x: &[f32], w: &[f32], out: &mut [f32]) {
    for t in 0..g.n {
        for i in 0..g.ni {
            let v = x[t * g.xs + i];
            for o in 0..g.no {
                out[t * g.os + o] += v * w[i * g.no + o];
            }
        }
    }
}
