//! Audio front-end ops: windows ([`hann_window`]), the power spectrogram of a short-time
//! Fourier transform ([`power_spectrogram`], the FFT behind the backend seam:
//! [`crate::backend::spectrum`] holds its specification) and mel filter banks
//! ([`mel_filter_bank`]) as speech models' feature extractors use them. Inference ops: a
//! tracked input is refused.

use super::contiguous_f32;
use crate::backend::spectrum::Spectrum;
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::storage::alloc;
use crate::tensor::axes::Axis;
use crate::tensor::Tensor;

/// The longest transform [`power_spectrogram`] takes.
pub const MAX_FFT: usize = 1 << 20;

fn bad(op: &'static str, msg: String) -> FucinaError {
    FucinaError::InvalidArgument { op, msg }
}

/// Whether a window is symmetric (its last value equals its first: filter design, and what
/// PyTorch's `periodic=False` gives) or periodic (one period of a longer symmetric window:
/// `periodic=True`, the spectral-analysis default).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowKind {
    /// `w[n] = 0.5 - 0.5 cos(2 pi n / (len - 1))`.
    Symmetric,
    /// `w[n] = 0.5 - 0.5 cos(2 pi n / len)`.
    Periodic,
}

/// A Hann window of `len` values (`len` of 1 is `[1]`), as `torch.hann_window`.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::ops::{hann_window, WindowKind};
/// let w = hann_window::<sample>(5, WindowKind::Symmetric)?.to_f32_vec();
/// assert_eq!(w, vec![0.0, 0.5, 1.0, 0.5, 0.0]);
/// # Ok::<(), fucina::FucinaError>(())
/// ```
pub fn hann_window<T: Axis>(len: usize, kind: WindowKind) -> Result<Tensor<(T,)>> {
    if len == 0 || len > MAX_FFT {
        return Err(bad("hann_window", format!("a window of {len} values (need 1 to {MAX_FFT})")));
    }
    let period = match kind {
        WindowKind::Symmetric => len - 1,
        WindowKind::Periodic => len,
    };
    let w: Vec<f32> = (0..len)
        .map(|n| {
            if period == 0 {
                1.0
            } else {
                (0.5 - 0.5 * (std::f64::consts::TAU * n as f64 / period as f64).cos()) as f32
            }
        })
        .collect();
    Tensor::from_vec(w, &[len])
}

/// Where the frames of a short-time Fourier transform sit on the signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Centering {
    /// `n_fft / 2` zeros before and after the signal, so frame `f` is centred on sample
    /// `f * hop` (`torch.stft(center=True, pad_mode="constant")`): `1 + len / hop` frames.
    Zeros,
    /// Frame `f` starts at sample `f * hop` (`center=False`): `1 + (len - n_fft) / hop`
    /// frames, and a signal shorter than `n_fft` is an error.
    None,
}

/// A short-time Fourier transform's framing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stft {
    /// Transform length (2 to [`MAX_FFT`]).
    pub n_fft: usize,
    /// Samples from one frame to the next (at least 1).
    pub hop: usize,
    /// Where frames sit.
    pub centering: Centering,
}

impl Stft {
    /// Frames of a signal of `len` samples.
    pub fn frames(&self, len: usize) -> Result<usize> {
        if !(2..=MAX_FFT).contains(&self.n_fft) || self.hop == 0 {
            return Err(bad(
                "stft",
                format!("n_fft {} and hop {} (need 2..={MAX_FFT} and >= 1)", self.n_fft, self.hop),
            ));
        }
        let padded = match self.centering {
            Centering::Zeros => len.checked_add(self.n_fft / 2 * 2),
            Centering::None => Some(len),
        }
        .ok_or_else(|| bad("stft", format!("a signal of {len} samples")))?;
        if padded < self.n_fft {
            return Err(bad("stft", format!("a signal of {len} samples is shorter than one frame of {}", self.n_fft)));
        }
        Ok(1 + (padded - self.n_fft) / self.hop)
    }
}

/// The power spectrogram `|STFT(x)|^2` of a signal `x [T]`: `[F, K]`, frames by frequency
/// bins (`n_fft / 2 + 1` of them, 0 Hz to Nyquist), as `torch.stft(...).abs() ** 2`.
/// `window` (at most `n_fft` values) multiplies each frame, centred in it with zeros on
/// both sides when shorter, as PyTorch pads a `win_length` window.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::ops::{hann_window, power_spectrogram, Centering, Stft, WindowKind};
/// axis!(frame, bin);
/// // A cosine on bin 4 of a 16-point transform.
/// let x: Vec<f32> = (0..64).map(|n| (std::f32::consts::TAU * 4.0 * n as f32 / 16.0).cos()).collect();
/// let x = Tensor::<(sample,)>::from_vec(x, &[64])?;
/// let w = Tensor::<(sample,)>::from_vec(vec![1.0; 16], &[16])?;
/// let stft = Stft { n_fft: 16, hop: 16, centering: Centering::None };
/// let p: Tensor<(frame, bin)> = power_spectrogram(&x, &w, &stft)?;
/// assert_eq!(p.shape(), &[4, 9]);
/// let p = p.to_f32_vec();
/// assert!((p[4] - 64.0).abs() < 1e-3 && p[3].abs() < 1e-6);
/// # Ok::<(), fucina::FucinaError>(())
/// ```
pub fn power_spectrogram<T: Axis, F: Axis, K: Axis>(
    x: &Tensor<(T,)>,
    window: &Tensor<(T,)>,
    stft: &Stft,
) -> Result<Tensor<(F, K)>> {
    if x.is_tracked() || window.is_tracked() {
        return Err(bad("power_spectrogram", "an inference op: its inputs must not require gradients".into()));
    }
    let (len, n) = (x.shape()[0], stft.n_fft);
    let frames = stft.frames(len)?;
    let win_len = window.shape()[0];
    if win_len == 0 || win_len > n {
        return Err(bad("power_spectrogram", format!("a window of {win_len} values for a transform of {n}")));
    }
    let ctx = ExecContext::current();
    let xd = contiguous_f32(&ctx, x.raw(), "power_spectrogram")?;
    let wd = contiguous_f32(&ctx, window.raw(), "power_spectrogram")?;
    // The window as long as the transform, centred.
    let mut win = vec![0.0f32; n];
    let left = (n - win_len) / 2;
    win[left..left + win_len].copy_from_slice(&wd);
    let spec = Spectrum { frames, n_fft: n };
    let total = alloc::bytes_for("spectrogram frames", frames, n)?;
    let mut framed = alloc::try_vec("spectrogram frames", total, 0.0f32)?;
    let shift = match stft.centering {
        Centering::Zeros => (n / 2) as isize,
        Centering::None => 0,
    };
    for (f, row) in framed.chunks_exact_mut(n).enumerate() {
        let start = (f * stft.hop) as isize - shift;
        for (j, (o, w)) in row.iter_mut().zip(&win).enumerate() {
            let at = start + j as isize;
            if at >= 0 && (at as usize) < len {
                *o = xd[at as usize] * w;
            }
        }
    }
    let out_len = alloc::bytes_for("a spectrogram", frames, spec.bins())?;
    alloc::check_available("a spectrogram", out_len.saturating_mul(4))?;
    let mut out = ctx.alloc(out_len);
    spec.check(&framed, &out)?;
    ctx.run(total.saturating_mul(8), |k| k.power_spectrum(&spec, &framed, &mut out));
    Tensor::from_raw(ctx.wrap_f32(out, &[frames, spec.bins()])?)
}

/// How hertz map to mels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MelScale {
    /// `2595 log10(1 + f / 700)` (HTK; torchaudio's default).
    Htk,
    /// Slaney's: linear below 1 kHz (`3 f / 200`), logarithmic above (librosa's default).
    Slaney,
}

impl MelScale {
    /// `f` hertz in mels.
    pub fn from_hz(self, f: f64) -> f64 {
        match self {
            MelScale::Htk => 2595.0 * (1.0 + f / 700.0).log10(),
            MelScale::Slaney if f >= 1000.0 => 15.0 + (f / 1000.0).ln() * (27.0 / 6.4f64.ln()),
            MelScale::Slaney => 3.0 * f / 200.0,
        }
    }

    /// `m` mels in hertz.
    pub fn to_hz(self, m: f64) -> f64 {
        match self {
            MelScale::Htk => 700.0 * (10f64.powf(m / 2595.0) - 1.0),
            MelScale::Slaney if m >= 15.0 => 1000.0 * ((6.4f64.ln() / 27.0) * (m - 15.0)).exp(),
            MelScale::Slaney => 200.0 * m / 3.0,
        }
    }
}

/// How each mel filter is scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MelNorm {
    /// Peaks of 1.
    Peak,
    /// Slaney's area normalization: each filter divided by its width in hertz (times 2).
    Slaney,
}

/// A bank of triangular mel filters over the bins of a power spectrum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MelBank {
    /// Frequency bins of the spectrum (`n_fft / 2 + 1`; at least 2).
    pub bins: usize,
    /// Filters (at least 1, at most 4096).
    pub mels: usize,
    /// Lowest frequency, in hertz.
    pub f_min: f64,
    /// Highest frequency, in hertz (at most the Nyquist frequency, at least `f_min`).
    pub f_max: f64,
    /// Sample rate of the signal, in hertz.
    pub sample_rate: u32,
    /// Hertz to mels.
    pub scale: MelScale,
    /// Filter scaling.
    pub norm: MelNorm,
}

/// The filters `[M, K]` (mels by spectrum bins) as `transformers.audio_utils.mel_filter_bank`
/// and librosa compute them: centres evenly spaced in mels, triangles in hertz over bins at
/// `i * (sample_rate / 2) / (bins - 1)`, computed in `f64`, rounded to `f32`, then normalized.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::ops::{mel_filter_bank, MelBank, MelNorm, MelScale};
/// axis!(mel, bin);
/// let bank = MelBank { bins: 257, mels: 80, f_min: 0.0, f_max: 8000.0, sample_rate: 16000,
///                      scale: MelScale::Slaney, norm: MelNorm::Slaney };
/// let f: Tensor<(mel, bin)> = mel_filter_bank(&bank)?;
/// assert_eq!(f.shape(), &[80, 257]);
/// assert!(f.to_f32_vec().iter().all(|&v| v >= 0.0));
/// # Ok::<(), fucina::FucinaError>(())
/// ```
pub fn mel_filter_bank<M: Axis, K: Axis>(b: &MelBank) -> Result<Tensor<(M, K)>> {
    let op = "mel_filter_bank";
    if !(2..=MAX_FFT).contains(&b.bins) || !(1..=4096).contains(&b.mels) {
        return Err(bad(op, format!("{} bins and {} filters (need 2..={MAX_FFT} and 1..=4096)", b.bins, b.mels)));
    }
    let nyquist = b.sample_rate as f64 / 2.0;
    if !(b.f_min.is_finite() && b.f_max.is_finite() && 0.0 <= b.f_min && b.f_min <= b.f_max && b.f_max <= nyquist) {
        return Err(bad(
            op,
            format!(
                "frequencies {} to {} Hz at {} Hz (need 0 <= min <= max <= Nyquist)",
                b.f_min, b.f_max, b.sample_rate
            ),
        ));
    }
    // numpy's linspace: start + i * step, the last point exactly `stop`.
    let linspace = |start: f64, stop: f64, n: usize| -> Vec<f64> {
        let step = (stop - start) / (n - 1) as f64;
        (0..n).map(|i| if i + 1 == n { stop } else { i as f64 * step + start }).collect()
    };
    let (lo, hi) = (b.scale.from_hz(b.f_min), b.scale.from_hz(b.f_max));
    let centres: Vec<f64> = linspace(lo, hi, b.mels + 2).into_iter().map(|m| b.scale.to_hz(m)).collect();
    let bin_hz = linspace(0.0, (b.sample_rate / 2) as f64, b.bins);
    let mut w = Vec::with_capacity(b.mels * b.bins);
    for m in 0..b.mels {
        let (c0, c1, c2) = (centres[m], centres[m + 1], centres[m + 2]);
        let enorm = 2.0 / (c2 - c0);
        for &f in &bin_hz {
            let down = -(c0 - f) / (c1 - c0);
            let up = (c2 - f) / (c2 - c1);
            let tri = down.min(up).max(0.0) as f32;
            w.push(match b.norm {
                MelNorm::Peak => tri,
                MelNorm::Slaney => (tri as f64 * enorm) as f32,
            });
        }
    }
    Tensor::from_vec(w, &[b.mels, b.bins])
}
