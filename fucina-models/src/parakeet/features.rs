//! Parakeet's audio front-end, as `transformers`' `ParakeetFeatureExtractor` computes it:
//! pre-emphasis, a power spectrogram (symmetric Hann window of `win_length` centred in
//! `n_fft`, frames centred on every `hop`-th sample with zeros beyond the ends), Slaney mel
//! filters, `ln(mel + 2^-24)`, then each mel band normalized to zero mean and unit variance
//! over the valid frames (`len / hop` of the `1 + len / hop` frames; the rest are zero).

use super::{frame, freq, mel};
use fucina::ops::{
    hann_window, mel_filter_bank, power_spectrogram, Centering, MelBank, MelNorm, MelScale, Stft, WindowKind,
};
use fucina::prelude::*;

/// Added to the mel energies before the logarithm (NeMo's and transformers' guard).
pub const LOG_GUARD: f32 = 1.0 / 16_777_216.0;
/// Added to each band's standard deviation before dividing by it.
pub const STD_EPSILON: f32 = 1e-5;

/// The front-end's settings (`preprocessor_config.json` of a Parakeet checkpoint).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FeatureConfig {
    /// Mel bands (`feature_size`).
    pub features: usize,
    /// Sample rate the audio must have, in hertz.
    pub sample_rate: u32,
    /// Samples between frames (`hop_length`).
    pub hop: usize,
    /// Transform length.
    pub n_fft: usize,
    /// Window length (at most `n_fft`).
    pub win_length: usize,
    /// Pre-emphasis coefficient (`y[t] = x[t] - a x[t-1]`); `None`: none.
    pub preemphasis: Option<f32>,
}

impl Default for FeatureConfig {
    /// Parakeet's: 80 mels at 16 kHz, 25 ms windows every 10 ms, `n_fft` 512, pre-emphasis 0.97.
    fn default() -> Self {
        FeatureConfig {
            features: 80,
            sample_rate: 16_000,
            hop: 160,
            n_fft: 512,
            win_length: 400,
            preemphasis: Some(0.97),
        }
    }
}

/// Log-mel features of one utterance.
#[derive(Debug, Clone)]
pub struct Features {
    /// `[frame, mel]`, normalized; frames from `valid` on are zero.
    pub values: Tensor<(frame, mel)>,
    /// Frames that cover the audio (`len / hop`): the encoder's length.
    pub valid: usize,
}

/// The front-end with its window and filters built once.
#[derive(Debug, Clone)]
pub struct FeatureExtractor {
    config: FeatureConfig,
    window: Tensor<(sample,)>,
    filters: Tensor<(mel, freq)>,
}

impl FeatureExtractor {
    /// Checks `config` and builds the window and the mel filters.
    pub fn new(config: FeatureConfig) -> Result<FeatureExtractor> {
        let c = &config;
        if c.hop == 0 || c.win_length == 0 || c.win_length > c.n_fft || c.n_fft < 2 || c.n_fft > fucina::ops::MAX_FFT {
            return Err(FucinaError::InvalidArgument {
                op: "parakeet features",
                msg: format!(
                    "hop {}, window {}, n_fft {}: need hop >= 1 and 1 <= window <= n_fft",
                    c.hop, c.win_length, c.n_fft
                ),
            });
        }
        if c.preemphasis.is_some_and(|a| !a.is_finite()) {
            return Err(FucinaError::InvalidArgument {
                op: "parakeet features",
                msg: "pre-emphasis is not finite".into(),
            });
        }
        let filters = mel_filter_bank(&MelBank {
            bins: c.n_fft / 2 + 1,
            mels: c.features,
            f_min: 0.0,
            f_max: c.sample_rate as f64 / 2.0,
            sample_rate: c.sample_rate,
            scale: MelScale::Slaney,
            norm: MelNorm::Slaney,
        })?;
        Ok(FeatureExtractor { config, window: hann_window(c.win_length, WindowKind::Symmetric)?, filters })
    }

    /// The settings.
    pub fn config(&self) -> &FeatureConfig {
        &self.config
    }

    /// Features of `audio` (mono, at the configured rate, any length of at least two hops:
    /// the normalization needs two valid frames).
    pub fn extract(&self, audio: &Tensor<(sample,)>) -> Result<Features> {
        let c = &self.config;
        let len = audio.shape()[0];
        let valid = len / c.hop;
        if valid < 2 {
            return Err(FucinaError::InvalidArgument {
                op: "parakeet features",
                msg: format!("{len} samples of audio: need at least two hops ({} samples)", 2 * c.hop),
            });
        }
        let x = match c.preemphasis {
            Some(a) => {
                let rest = audio.narrow::<sample>(1, len - 1)?.sub(&audio.narrow::<sample>(0, len - 1)?.scale(a)?)?;
                Tensor::concat::<sample>(&[&audio.narrow::<sample>(0, 1)?, &rest])?
            }
            None => audio.clone(),
        };
        let stft = Stft { n_fft: c.n_fft, hop: c.hop, centering: Centering::Zeros };
        let power: Tensor<(frame, freq)> = power_spectrogram(&x, &self.window, &stft)?;
        let filters = &self.filters;
        let mels: Tensor<(frame, mel)> = einsum!(power, filters; freq ->)?;
        let logs = mels.add_scalar(LOG_GUARD)?.log()?;
        let frames = logs.shape()[0];
        let v = logs.narrow::<frame>(0, valid)?;
        let mean: Tensor<(mel,)> = v.mean::<frame>()?;
        let centred = v.sub(&mean)?;
        let var = centred.square()?.sum::<frame>()?.scale(1.0 / (valid - 1) as f32)?;
        let normed = centred.div(&var.sqrt()?.add_scalar(STD_EPSILON)?)?;
        let values = if frames > valid {
            let zeros = Tensor::<(frame, mel)>::zeros(&[frames - valid, c.features])?;
            Tensor::concat::<frame>(&[&normed, &zeros])?
        } else {
            normed
        };
        Ok(Features { values, valid })
    }
}
