//! Live recognition from the microphone (feature `live`): the default input device through
//! cpal, its channels mixed to mono, resampled to the front-end's rate as it arrives
//! ([`super::wav::StreamResampler`]) and recognized by a [`Stream`] with bounded latency.

use super::stream::{Stream, StreamOptions};
use super::transcribe::{Recognizer, TokenAt};
use super::wav::StreamResampler;
use cpal::traits::{DeviceTrait, HostTrait, StreamTrait};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pieces of captured audio the channel holds before the capture drops audio (the
/// recognizer falling behind).
const QUEUE: usize = 256;

/// Recognizes the default input device's audio until Enter is pressed or `seconds` have
/// passed; `on_tokens(tokens, audio_seconds)` gets the tokens as they become final.
pub fn run(
    rec: &Recognizer,
    opts: StreamOptions,
    seconds: Option<f64>,
    mut on_tokens: impl FnMut(&[TokenAt], f64),
) -> Result<(), String> {
    let host = cpal::default_host();
    let device = host.default_input_device().ok_or("no audio input device found (is a microphone connected?)")?;
    let supported = device.default_input_config().map_err(|e| format!("input device: {e}"))?;
    let config: cpal::StreamConfig = supported.config();
    let channels = usize::from(config.channels.max(1));
    let (tx, rx) = mpsc::sync_channel::<Vec<f32>>(QUEUE);
    let dropped = Arc::new(AtomicUsize::new(0));
    let lost = dropped.clone();
    let send = move |mono: Vec<f32>| {
        if tx.try_send(mono).is_err() {
            lost.fetch_add(1, Ordering::Relaxed);
        }
    };
    let error = |e: cpal::StreamError| eprintln!("input stream error: {e}");
    let mix = move |frame: &[f32]| frame.iter().sum::<f32>() / frame.len() as f32;
    let stream = match supported.sample_format() {
        cpal::SampleFormat::F32 => device.build_input_stream(
            &config,
            move |data: &[f32], _: &_| send(data.chunks(channels).map(mix).collect()),
            error,
            None,
        ),
        cpal::SampleFormat::I16 => device.build_input_stream(
            &config,
            move |data: &[i16], _: &_| {
                send(
                    data.chunks(channels)
                        .map(|f| f.iter().map(|&s| f32::from(s) / 32768.0).sum::<f32>() / f.len() as f32)
                        .collect(),
                )
            },
            error,
            None,
        ),
        other => return Err(format!("the input device's sample format {other:?} is not supported (f32 or i16)")),
    }
    .map_err(|e| format!("cannot open the input stream: {e}"))?;
    let rate = rec.features.config().sample_rate;
    let mut resampler = StreamResampler::new(config.sample_rate.0, rate).map_err(|e| e.to_string())?;
    let mut recognizer = Stream::new(rec, opts).map_err(|e| e.to_string())?;
    let stop = Arc::new(AtomicBool::new(false));
    let enter = stop.clone();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = std::io::stdin().read_line(&mut line);
        enter.store(true, Ordering::Relaxed);
    });
    stream.play().map_err(|e| e.to_string())?;
    eprintln!(
        "listening at {} Hz ({channels} channels), recognizing at {rate} Hz: press Enter to stop",
        config.sample_rate.0
    );
    let t0 = Instant::now();
    let mut heard = 0usize;
    while !stop.load(Ordering::Relaxed) && seconds.is_none_or(|s| t0.elapsed().as_secs_f64() < s) {
        let piece = match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(p) => p,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        };
        let samples = resampler.push(&piece).map_err(|e| e.to_string())?;
        heard += samples.len();
        let tokens = recognizer.push(&samples).map_err(|e| e.to_string())?;
        on_tokens(&tokens, heard as f64 / f64::from(rate));
    }
    drop(stream);
    let tokens = recognizer.finish().map_err(|e| e.to_string())?;
    on_tokens(&tokens, heard as f64 / f64::from(rate));
    let lost = dropped.load(Ordering::Relaxed);
    if lost > 0 {
        eprintln!("{lost} pieces of audio were dropped: the recognizer fell behind (a longer --chunk-ms, a shorter --left-ms)");
    }
    Ok(())
}
