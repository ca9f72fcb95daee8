//! Neural Amp Modeler models: `.nam` files ([`fucina::formats::nam`]) run as a WaveNet
//! written in the DSL ([`wavenet`], whole signals, differentiable), as a streaming engine for
//! real time ([`stream`], no allocation per buffer), or as an LSTM ([`lstm`]); and
//! training a WaveNet with autograd and AdamW, exported back to `.nam` ([`train`]).

#[cfg(feature = "live")]
pub mod live;
pub mod lstm;
pub mod stream;
pub mod train;
pub mod wavenet;

use fucina::formats::nam::{Architecture, NamFile};
use fucina::prelude::*;
use std::path::Path;

pub use lstm::Lstm;
pub use stream::WaveNetStream;
pub use wavenet::WaveNet;

/// A loaded amp model.
pub enum AmpModel {
    /// A WaveNet.
    WaveNet(WaveNet),
    /// An LSTM.
    Lstm(Lstm),
}

/// A model running buffer by buffer.
pub enum AmpStream {
    /// WaveNet's streaming engine.
    WaveNet(Box<WaveNetStream>),
    /// An LSTM (stateful by nature).
    Lstm(Box<Lstm>),
}

impl AmpStream {
    /// Processes `input` into `output` (same length), continuing from the last call. No
    /// allocation, lock or system call.
    pub fn process(&mut self, input: &[f32], output: &mut [f32]) {
        match self {
            AmpStream::WaveNet(s) => s.process(input, output),
            AmpStream::Lstm(s) => s.process(input, output),
        }
    }

    /// Starts again from silence (WaveNet) or the file's initial state (LSTM).
    pub fn reset(&mut self) {
        match self {
            AmpStream::WaveNet(s) => s.reset(),
            AmpStream::Lstm(s) => s.reset(),
        }
    }
}

/// A loaded `.nam` file: the model and what the file says about it.
pub struct Amp {
    /// The model.
    pub model: AmpModel,
    /// Sample rate the model expects (48 kHz if the file does not say).
    pub sample_rate: f64,
    /// The file's metadata object.
    pub metadata: Option<serde_json::Value>,
}

impl Amp {
    /// Builds the model of a parsed file.
    pub fn from_file(f: &NamFile) -> Result<Amp> {
        let model = match &f.architecture {
            Architecture::WaveNet(c) => AmpModel::WaveNet(WaveNet::from_weights(c, &f.weights)?),
            Architecture::Lstm(c) => AmpModel::Lstm(Lstm::from_weights(c, &f.weights)?),
        };
        Ok(Amp { model, sample_rate: f.sample_rate.unwrap_or(48_000.0), metadata: f.metadata.clone() })
    }

    /// Reads a `.nam` file.
    pub fn open(path: impl AsRef<Path>) -> Result<Amp> {
        Amp::from_file(&NamFile::open(path)?)
    }

    /// A one-line description.
    pub fn describe(&self) -> String {
        match &self.model {
            AmpModel::WaveNet(w) => {
                let c = &w.config;
                let chans: Vec<String> =
                    c.layers.iter().map(|l| format!("{}x{}", l.channels, l.dilations.len())).collect();
                format!("WaveNet [{}], receptive field {} samples", chans.join(", "), c.receptive_field())
            }
            AmpModel::Lstm(_) => "LSTM".to_string(),
        }
    }

    /// Runs a whole signal from silence (WaveNet: the DSL forward; LSTM: its recurrence
    /// from the initial state).
    pub fn process_block(&self, input: &[f32]) -> Result<Vec<f32>> {
        match &self.model {
            AmpModel::WaveNet(w) => {
                let x = Tensor::<axes![batch, time]>::from_vec(input.to_vec(), &[1, input.len()])?;
                Ok(w.forward(&x)?.to_f32_vec())
            }
            AmpModel::Lstm(l) => {
                let mut l = l.clone();
                l.reset();
                let mut out = vec![0.0; input.len()];
                l.process(input, &mut out);
                Ok(out)
            }
        }
    }

    /// A streaming processor for buffers of up to `max_block` samples (more are split), on
    /// the native backend's kernels.
    pub fn stream(&self, max_block: usize) -> AmpStream {
        self.stream_on(max_block, fucina::backend::BackendKind::Native)
    }

    /// [`Amp::stream`] on the given backend's kernels (the WaveNet's frame products and
    /// activations; the LSTM runs its own loops).
    pub fn stream_on(&self, max_block: usize, backend: fucina::backend::BackendKind) -> AmpStream {
        match &self.model {
            AmpModel::WaveNet(w) => AmpStream::WaveNet(Box::new(WaveNetStream::with_backend(w, max_block, backend))),
            AmpModel::Lstm(l) => {
                let mut l = l.clone();
                l.reset();
                AmpStream::Lstm(Box::new(l))
            }
        }
    }
}
