//! Streaming recognition with bounded latency: audio arrives in pieces, and every `chunk`
//! encoder frames are decoded as soon as `right` frames of audio past them have arrived. Each
//! chunk is encoded in a window that adds up to `left` frames of past audio before it and the
//! `right` frames after it (buffered, chunked inference over an offline-trained encoder: the
//! contexts stand in for the full-utterance attention, the convolutions' reach and the
//! features' per-utterance normalization, which here is over the window). Only the chunk's own
//! frames are kept; decoding carries its state across chunks (CTC: the previous frame's best
//! token, so a repeat across a boundary collapses; TDT / RNN-T: the prediction network and
//! the frame reached, [`super::transducer::Walk`]).
//!
//! Latency: a token is final `right` frames (plus one chunk at most) after its audio arrived,
//! plus the window's compute. Where `left` and `right` cover the whole utterance every window
//! is the whole utterance and the output equals offline recognition exactly (tested); shorter
//! contexts trade accuracy for latency and compute (docs/SPEECH.md states the measured
//! difference).

use super::ctc::{ctc_emissions_from, ParakeetCtc};
use super::transcribe::{ParakeetModel, Recognizer, TokenAt};
use super::transducer::{ParakeetTransducer, Walk};
use super::{frame, mel};
use fucina::prelude::*;

/// Chunk and context sizes, in encoder frames (80 ms each at Parakeet's defaults).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamOptions {
    /// Frames decoded per window (at least 1).
    pub chunk: usize,
    /// Frames of past audio added before the chunk.
    pub left: usize,
    /// Frames of future audio waited for after the chunk.
    pub right: usize,
}

impl Default for StreamOptions {
    /// 1.04 s chunks with 4 s of left context and 1.04 s of right context (about 2.1 s of
    /// latency before compute).
    fn default() -> Self {
        StreamOptions { chunk: 13, left: 50, right: 13 }
    }
}

/// Decoding state carried from chunk to chunk.
#[derive(Debug)]
enum Carry {
    Ctc { prev: Option<u32> },
    Transducer(Box<Walk>),
}

/// A streaming recognition over a [`Recognizer`]: [`Stream::push`] audio as it arrives,
/// [`Stream::finish`] at its end.
#[derive(Debug)]
pub struct Stream<'a> {
    rec: &'a Recognizer,
    opts: StreamOptions,
    /// Audio from sample `offset` on (the left context of the next chunk, and later).
    audio: Vec<f32>,
    offset: usize,
    /// Encoder frames decoded.
    done: usize,
    carry: Carry,
    windows: usize,
}

impl<'a> Stream<'a> {
    /// A stream over `rec` with `opts`.
    pub fn new(rec: &'a Recognizer, opts: StreamOptions) -> Result<Stream<'a>> {
        if opts.chunk == 0 {
            return Err(FucinaError::InvalidArgument { op: "parakeet stream", msg: "chunk of 0 frames".into() });
        }
        // A window spans left + chunk + right frames (and one more at the end).
        let window =
            opts.left.checked_add(opts.chunk).and_then(|w| w.checked_add(opts.right)).and_then(|w| w.checked_add(1));
        if window.and_then(|w| w.checked_mul(rec.frame_samples())).is_none() {
            return Err(FucinaError::InvalidArgument {
                op: "parakeet stream",
                msg: format!("window of {opts:?} frames overflows"),
            });
        }
        let carry = match &rec.model {
            ParakeetModel::Ctc(_) => Carry::Ctc { prev: None },
            ParakeetModel::Transducer(m) => Carry::Transducer(Box::new(m.start_walk()?)),
        };
        Ok(Stream { rec, opts, audio: Vec::new(), offset: 0, done: 0, carry, windows: 0 })
    }

    /// Adds `samples` (mono, at the front-end's rate); the tokens that became final.
    pub fn push(&mut self, samples: &[f32]) -> Result<Vec<TokenAt>> {
        fucina::storage::alloc::check_available("streamed audio", (self.audio.len() + samples.len()) * 4)?;
        self.audio.extend_from_slice(samples);
        self.run(false)
    }

    /// Ends the stream: decodes the frames left (their right context is what arrived); the
    /// tokens that became final.
    pub fn finish(&mut self) -> Result<Vec<TokenAt>> {
        self.run(true)
    }

    /// Windows encoded so far.
    pub fn windows(&self) -> usize {
        self.windows
    }

    /// Encoder frames decoded so far.
    pub fn frames(&self) -> usize {
        self.done
    }

    fn run(&mut self, last: bool) -> Result<Vec<TokenAt>> {
        let fs = self.rec.frame_samples();
        let hop = self.rec.features.config().hop;
        let mut out = Vec::new();
        loop {
            let total = self.offset + self.audio.len();
            let need = self.done + self.opts.chunk + self.opts.right;
            // Whole frames so far, and (at the end) the frames the whole audio has.
            let frames = if last {
                if total / hop < 2 {
                    break;
                }
                self.rec.model.config().positions(total / hop)
            } else {
                total / fs
            };
            if self.done >= frames || (!last && frames < need) {
                break;
            }
            let end_sample = (need * fs).min(total);
            let mut start = self.done.saturating_sub(self.opts.left);
            if end_sample - start * fs < 2 * hop && start > 0 {
                // The features need two hops: reach one frame further back.
                start -= 1;
            }
            let window = &self.audio[start * fs - self.offset..end_sample - self.offset];
            let features = self.rec.features(window)?;
            let keep_end = (self.done + self.opts.chunk).min(frames);
            self.windows += 1;
            let emitted = self.decode(&features, start, keep_end)?;
            out.extend(emitted.into_iter().map(|(f, id)| self.rec.token_at(f, id)));
            self.done = keep_end;
            // Keep the audio the next window's left context needs, and one frame more.
            let keep_from = self.done.saturating_sub(self.opts.left.saturating_add(1)) * fs;
            if keep_from > self.offset {
                self.audio.drain(..keep_from - self.offset);
                self.offset = keep_from;
            }
        }
        Ok(out)
    }

    /// Decodes global frames `self.done..keep_end` of a window whose encoder frame 0 is global
    /// frame `start`: the emitted tokens with their frames.
    fn decode(&mut self, features: &Tensor<(frame, mel)>, start: usize, keep_end: usize) -> Result<Vec<(usize, u32)>> {
        let done = self.done;
        match (&self.rec.model, &mut self.carry) {
            (ParakeetModel::Ctc(m), Carry::Ctc { prev }) => ctc_chunk(m, features, start, done, keep_end, prev),
            (ParakeetModel::Transducer(m), Carry::Transducer(walk)) => {
                transducer_chunk(m, features, start, keep_end, walk)
            }
            _ => unreachable!("the carry is made for the model's head in Stream::new"),
        }
    }
}

/// CTC over frames `done..keep_end`, repeats collapsed across the boundary through `prev`.
fn ctc_chunk(
    m: &ParakeetCtc,
    features: &Tensor<(frame, mel)>,
    start: usize,
    done: usize,
    keep_end: usize,
    prev: &mut Option<u32>,
) -> Result<Vec<(usize, u32)>> {
    let logits = m.logits(features)?;
    let rows = logits.shape()[0];
    if keep_end > start + rows {
        return Err(window_short(start, rows, keep_end));
    }
    let kept = logits.narrow::<seq>(done - start, keep_end - done)?;
    let best: Vec<u32> = kept.argmax::<vocab>()?.raw().to_vec::<u32>()?;
    Ok(ctc_emissions_from(&best, m.config.blank, done, prev))
}

/// The transducer's walk continued up to frame `keep_end`.
fn transducer_chunk(
    m: &ParakeetTransducer,
    features: &Tensor<(frame, mel)>,
    start: usize,
    keep_end: usize,
    walk: &mut Walk,
) -> Result<Vec<(usize, u32)>> {
    let projected = m.project(features)?;
    let rows = projected.shape()[0];
    if keep_end > start + rows {
        return Err(window_short(start, rows, keep_end));
    }
    if walk.at >= keep_end {
        return Ok(Vec::new());
    }
    // The walk may have jumped into this window's chunk: read from its frame on.
    let first = walk.at.max(start);
    let rows_from = projected.narrow::<seq>(first - start, keep_end - first)?;
    let steps = m.walk(walk, &rows_from, first, keep_end, usize::MAX, |_, _| {})?;
    Ok(steps.into_iter().filter(|s| s.token != m.config.blank).map(|s| (s.frame, s.token)).collect())
}

fn window_short(start: usize, rows: usize, keep_end: usize) -> FucinaError {
    FucinaError::InvalidArgument {
        op: "parakeet stream",
        msg: format!("a window from frame {start} encodes {rows} frames, short of frame {keep_end}"),
    }
}
