//! Power spectra of real frames: `out[f, k] = |sum_n x[f, n] e^(-2 pi i k n / N)|^2` for
//! `k` in `0..=N/2`, the kernel behind [`Kernels::power_spectrum`](super::Kernels::power_spectrum)
//! (a short-time Fourier transform's frames, windowed by the caller).

use crate::error::{FucinaError, Result};

/// `frames` frames of `n_fft` real values each, row after row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spectrum {
    /// Frames.
    pub frames: usize,
    /// Values per frame (the transform's length, at least 2).
    pub n_fft: usize,
}

impl Spectrum {
    /// Frequency bins per frame: `n_fft / 2 + 1` (0 Hz to the Nyquist frequency).
    pub fn bins(&self) -> usize {
        self.n_fft / 2 + 1
    }

    /// Checks the transform's length and that `x` holds `frames * n_fft` values and `out`
    /// `frames * bins` values.
    pub fn check(&self, x: &[f32], out: &[f32]) -> Result<()> {
        let bad = |msg: String| FucinaError::InvalidArgument { op: "power_spectrum", msg };
        if self.n_fft < 2 {
            return Err(bad(format!("a transform of {} values (need at least 2)", self.n_fft)));
        }
        if self.frames.checked_mul(self.n_fft) != Some(x.len()) {
            return Err(bad(format!("{} input values for {self:?}", x.len())));
        }
        if self.frames.checked_mul(self.bins()) != Some(out.len()) {
            return Err(bad(format!("{} output values for {self:?}", out.len())));
        }
        Ok(())
    }
}

/// The specification: the discrete Fourier transform written out, each sum in `f64` with the
/// angle reduced exactly (`k n mod N`), squared magnitudes rounded to `f32` at the end.
///
/// ```
/// use fucina::backend::spectrum::{power_spectrum_spec, Spectrum};
/// // A cosine at bin 1 of a 4-point transform: (N/2)^2 at bin 1, nothing elsewhere.
/// let x = [1.0f32, 0.0, -1.0, 0.0];
/// let mut out = [0.0f32; 3];
/// power_spectrum_spec(&Spectrum { frames: 1, n_fft: 4 }, &x, &mut out);
/// assert!(out[0].abs() < 1e-12 && (out[1] - 4.0).abs() < 1e-6 && out[2].abs() < 1e-12);
/// ```
pub fn power_spectrum_spec(p: &Spectrum, x: &[f32], out: &mut [f32]) {
    let n = p.n_fft;
    let (cos, sin): (Vec<f64>, Vec<f64>) = (0..n)
        .map(|j| {
            let a = std::f64::consts::TAU * j as f64 / n as f64;
            (a.cos(), a.sin())
        })
        .unzip();
    for (frame, o) in x.chunks_exact(n).zip(out.chunks_exact_mut(p.bins())) {
        for (k, ok) in o.iter_mut().enumerate() {
            let (mut re, mut im) = (0.0f64, 0.0f64);
            for (j, &v) in frame.iter().enumerate() {
                let at = (k * j) % n;
                re += v as f64 * cos[at];
                im -= v as f64 * sin[at];
            }
            *ok = (re * re + im * im) as f32;
        }
    }
}
