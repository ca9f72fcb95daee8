//! WAV input for speech models (feature `cli`): any rate, integer or float samples, any
//! channel count, read with `hound`, mixed down to mono and resampled with `rubato`'s FFT
//! resampler to the model's rate.

use fucina::prelude::*;
use rubato::{FftFixedIn, Resampler};
use std::path::Path;

/// The longest input read: one hour at 48 kHz in 8 channels.
pub const MAX_SAMPLES: usize = 3600 * 48_000 * 8;

fn err(path: &Path, msg: impl std::fmt::Display) -> FucinaError {
    FucinaError::Format { format: "wav", msg: format!("{}: {msg}", path.display()) }
}

/// A mono signal and its rate.
#[derive(Debug, Clone, PartialEq)]
pub struct Audio {
    /// Samples in `[-1, 1]`.
    pub samples: Vec<f32>,
    /// Samples per second.
    pub rate: u32,
}

impl Audio {
    /// Seconds of audio.
    pub fn seconds(&self) -> f64 {
        self.samples.len() as f64 / self.rate.max(1) as f64
    }
}

/// Reads `path` into mono samples (channels averaged; integers scaled to `[-1, 1]`).
pub fn read(path: &Path) -> Result<Audio> {
    let mut r = hound::WavReader::open(path).map_err(|e| err(path, e))?;
    let spec = r.spec();
    let channels = spec.channels as usize;
    if channels == 0 || spec.sample_rate == 0 {
        return Err(err(path, format!("{channels} channels at {} Hz", spec.sample_rate)));
    }
    let total = r.len() as usize;
    if total > MAX_SAMPLES {
        return Err(err(path, format!("{total} samples (at most {MAX_SAMPLES} are read)")));
    }
    let interleaved: Vec<f32> = match spec.sample_format {
        hound::SampleFormat::Float => r.samples::<f32>().collect::<std::result::Result<_, _>>(),
        hound::SampleFormat::Int => {
            if !(1..=32).contains(&spec.bits_per_sample) {
                return Err(err(path, format!("{}-bit integer samples", spec.bits_per_sample)));
            }
            let scale = 1.0 / (1u64 << (spec.bits_per_sample - 1)) as f32;
            r.samples::<i32>().map(|s| s.map(|v| v as f32 * scale)).collect()
        }
    }
    .map_err(|e| err(path, e))?;
    let samples = interleaved.chunks_exact(channels).map(|f| f.iter().sum::<f32>() / channels as f32).collect();
    Ok(Audio { samples, rate: spec.sample_rate })
}

/// `audio` at `rate` (unchanged when already there): `round(len * rate / in_rate)` samples,
/// the resampler's delay removed.
pub fn resample(audio: &Audio, rate: u32) -> Result<Audio> {
    if audio.rate == rate {
        return Ok(audio.clone());
    }
    let bad = |e: &dyn std::fmt::Display| FucinaError::InvalidArgument { op: "resample", msg: e.to_string() };
    const CHUNK: usize = 1024;
    let mut rs = FftFixedIn::<f32>::new(audio.rate as usize, rate as usize, CHUNK, 2, 1).map_err(|e| bad(&e))?;
    let want = (audio.samples.len() as f64 * rate as f64 / audio.rate as f64).round() as usize;
    let delay = rs.output_delay();
    let mut out = Vec::with_capacity(want + delay + CHUNK);
    let mut chunks = audio.samples.chunks_exact(CHUNK);
    for c in chunks.by_ref() {
        out.extend_from_slice(&rs.process(&[c], None).map_err(|e| bad(&e))?[0]);
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        out.extend_from_slice(&rs.process_partial(Some(&[rest]), None).map_err(|e| bad(&e))?[0]);
    }
    while out.len() < want + delay {
        let tail = rs.process_partial::<&[f32]>(None, None).map_err(|e| bad(&e))?;
        if tail[0].is_empty() {
            break;
        }
        out.extend_from_slice(&tail[0]);
    }
    let samples: Vec<f32> = out.into_iter().skip(delay).take(want).collect();
    Ok(Audio { samples, rate })
}

/// Resampling of a signal that arrives in pieces (a microphone): [`StreamResampler::push`]
/// returns the output samples ready so far, the resampler's delay removed, so the pieces'
/// outputs joined are [`resample`]'s output of the whole signal (up to its last partial block,
/// which [`resample`] flushes at the end).
pub struct StreamResampler {
    rs: Option<FftFixedIn<f32>>,
    pending: Vec<f32>,
    skip: usize,
}

impl std::fmt::Debug for StreamResampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamResampler").field("pending", &self.pending.len()).field("skip", &self.skip).finish()
    }
}

/// Input samples per resampler block (as [`resample`] uses).
const BLOCK: usize = 1024;

impl StreamResampler {
    /// From `from` Hz to `to` Hz (a pass-through when they are equal).
    pub fn new(from: u32, to: u32) -> Result<StreamResampler> {
        if from == 0 || to == 0 {
            return Err(FucinaError::InvalidArgument { op: "resample", msg: format!("rates {from} -> {to}") });
        }
        if from == to {
            return Ok(StreamResampler { rs: None, pending: Vec::new(), skip: 0 });
        }
        let rs = FftFixedIn::<f32>::new(from as usize, to as usize, BLOCK, 2, 1)
            .map_err(|e| FucinaError::InvalidArgument { op: "resample", msg: e.to_string() })?;
        let skip = rs.output_delay();
        Ok(StreamResampler { rs: Some(rs), pending: Vec::new(), skip })
    }

    /// Adds `samples`; the output samples now ready.
    pub fn push(&mut self, samples: &[f32]) -> Result<Vec<f32>> {
        let Some(rs) = self.rs.as_mut() else {
            return Ok(samples.to_vec());
        };
        self.pending.extend_from_slice(samples);
        let mut out = Vec::new();
        let mut used = 0;
        while self.pending.len() - used >= BLOCK {
            let block = &self.pending[used..used + BLOCK];
            let y = rs
                .process(&[block], None)
                .map_err(|e| FucinaError::InvalidArgument { op: "resample", msg: e.to_string() })?;
            let drop = self.skip.min(y[0].len());
            self.skip -= drop;
            out.extend_from_slice(&y[0][drop..]);
            used += BLOCK;
        }
        self.pending.drain(..used);
        Ok(out)
    }
}
