//! Live audio through cpal (feature `live`): the input callback pushes samples into a
//! lock-free single-producer/single-consumer ring; the output callback pulls them, runs the
//! model's streaming engine (no allocation, lock or system call) and writes every output
//! channel. Missing devices or unsupported formats are errors that say so.

use super::{Amp, AmpStream};
use cpal::traits::{DeviceTrait, HostTrait, StreamTrait};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A fixed-capacity SPSC ring of f32 samples: `push` from one thread, `pop` from another.
pub struct Ring {
    buf: Box<[std::cell::UnsafeCell<f32>]>,
    head: AtomicUsize,
    tail: AtomicUsize,
}

// SAFETY: one producer writes slots between tail and head-1 (mod n) that the consumer does
// not read until `head` is published with Release; the consumer reads slots it owns after
// an Acquire load. Each slot is accessed by one side at a time.
unsafe impl Sync for Ring {}

impl Ring {
    /// A ring holding up to `n - 1` samples.
    pub fn new(n: usize) -> Ring {
        Ring { buf: (0..n.max(2)).map(|_| std::cell::UnsafeCell::new(0.0)).collect(), head: 0.into(), tail: 0.into() }
    }

    /// Appends what fits; returns how many samples were taken.
    pub fn push(&self, xs: impl Iterator<Item = f32>) -> usize {
        let n = self.buf.len();
        let (mut h, t) = (self.head.load(Ordering::Relaxed), self.tail.load(Ordering::Acquire));
        let mut pushed = 0;
        for x in xs {
            let next = (h + 1) % n;
            if next == t {
                break;
            }
            // SAFETY: slot h is outside the consumer's readable range until head moves past it.
            unsafe { *self.buf[h].get() = x };
            h = next;
            pushed += 1;
        }
        self.head.store(h, Ordering::Release);
        pushed
    }

    /// Fills `out` with available samples (zeros after them); returns how many were real.
    pub fn pop(&self, out: &mut [f32]) -> usize {
        let n = self.buf.len();
        let (h, mut t) = (self.head.load(Ordering::Acquire), self.tail.load(Ordering::Relaxed));
        let mut got = 0;
        for o in out.iter_mut() {
            if t == h {
                *o = 0.0;
                continue;
            }
            // SAFETY: slot t was published by the producer's Release store of head.
            *o = unsafe { *self.buf[t].get() };
            t = (t + 1) % n;
            got += 1;
        }
        self.tail.store(t, Ordering::Release);
        got
    }
}

/// Runs the default input through the model to the default output until Ctrl-C (Enter).
pub fn run(amp: &Amp, buffer: usize, gain: f32) -> Result<(), String> {
    let host = cpal::default_host();
    let input = host.default_input_device().ok_or("no audio input device found (is a sound card connected?)")?;
    let output = host.default_output_device().ok_or("no audio output device found")?;
    let rate = cpal::SampleRate(amp.sample_rate as u32);
    let pick = |configs: Vec<cpal::SupportedStreamConfigRange>, what: &str| -> Result<cpal::StreamConfig, String> {
        configs
            .into_iter()
            .filter(|c| c.sample_format() == cpal::SampleFormat::F32)
            .find(|c| c.min_sample_rate() <= rate && rate <= c.max_sample_rate())
            .map(|c| {
                let mut cfg: cpal::StreamConfig = c.with_sample_rate(rate).into();
                cfg.buffer_size = cpal::BufferSize::Fixed(buffer as u32);
                cfg
            })
            .ok_or_else(|| format!("the {what} device has no f32 format at {} Hz", rate.0))
    };
    let in_cfg = pick(input.supported_input_configs().map_err(|e| format!("input device: {e}"))?.collect(), "input")?;
    let out_cfg =
        pick(output.supported_output_configs().map_err(|e| format!("output device: {e}"))?.collect(), "output")?;
    let ring = Arc::new(Ring::new(buffer * 16));
    let (rin, rout) = (ring.clone(), ring);
    let in_ch = in_cfg.channels.max(1) as usize;
    let out_ch = out_cfg.channels.max(1) as usize;
    let in_stream = input
        .build_input_stream(
            &in_cfg,
            move |data: &[f32], _| {
                rin.push(data.iter().step_by(in_ch).map(|s| s * gain));
            },
            |e| eprintln!("input stream error: {e}"),
            None,
        )
        .map_err(|e| format!("cannot open the input stream: {e}"))?;
    let mut engine: AmpStream = amp.stream(buffer);
    let mut x = vec![0.0f32; buffer * 8];
    let mut y = vec![0.0f32; buffer * 8];
    let out_stream = output
        .build_output_stream(
            &out_cfg,
            move |data: &mut [f32], _| {
                let frames = data.len() / out_ch;
                let mut done = 0;
                while done < frames {
                    let n = (frames - done).min(x.len());
                    rout.pop(&mut x[..n]);
                    engine.process(&x[..n], &mut y[..n]);
                    for (f, v) in data[done * out_ch..(done + n) * out_ch].chunks_mut(out_ch).zip(&y[..n]) {
                        f.fill(*v);
                    }
                    done += n;
                }
            },
            |e| eprintln!("output stream error: {e}"),
            None,
        )
        .map_err(|e| format!("cannot open the output stream: {e}"))?;
    in_stream.play().map_err(|e| e.to_string())?;
    out_stream.play().map_err(|e| e.to_string())?;
    eprintln!("live at {} Hz, {buffer}-sample buffers: press Enter to stop", rate.0);
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::Ring;

    #[test]
    fn ring_keeps_order_across_threads() {
        let r = std::sync::Arc::new(Ring::new(64));
        let w = r.clone();
        let t = std::thread::spawn(move || {
            let mut next = 0u32;
            while next < 10_000 {
                let k = w.push((next..next + 7).map(|v| v as f32));
                next += k as u32;
            }
        });
        let mut seen = 0u32;
        let mut buf = [0.0f32; 5];
        while seen < 10_000 {
            let k = r.pop(&mut buf);
            for v in &buf[..k] {
                assert_eq!(*v, seen as f32);
                seen += 1;
            }
        }
        t.join().unwrap();
    }
}
