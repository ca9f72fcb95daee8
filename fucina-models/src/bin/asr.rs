//! `asr [model.safetensors] --in speech.wav`: speech to text with a Parakeet model (CTC, TDT
//! or RNN-T).

use clap::Parser;
use fucina::formats::safetensors::SafeTensors;
use fucina::prelude::*;
use fucina_models::parakeet::{wav, Recognizer, Stream, StreamOptions};
use std::path::PathBuf;
use std::time::Instant;

/// Transcribe a WAV file with a Parakeet model (FastConformer encoder; greedy CTC, TDT or
/// RNN-T decoding): any sample rate (resampled to 16 kHz), any channel count (mixed to mono).
/// Prints each token with the time of the encoder frame that emitted it, then the text. The
/// model is a safetensors file with `transformers`' `ParakeetForCTC` / `ParakeetForTDT` /
/// `ParakeetForRNNT` names, its config in the metadata (`config`) and its vocabulary
/// (`vocab`), as `tools/convert_parakeet.py` writes them from a `transformers` checkpoint;
/// without one it runs the tiny random model shipped with the crate (its output is noise).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The model file (default: the crate's tiny random Parakeet CTC).
    model: Option<PathBuf>,
    /// Input WAV file.
    #[arg(long = "in", required_unless_present = "live")]
    input: Option<PathBuf>,
    /// Recognize the default input device (the microphone) with streaming's chunks and
    /// contexts until Enter is pressed (or `--seconds` have passed); needs a build with
    /// `--features live`.
    #[arg(long, conflicts_with = "input")]
    live: bool,
    /// Live: stop after this many seconds.
    #[arg(long)]
    seconds: Option<f64>,
    /// Worker threads (default: all cores).
    #[arg(short, long)]
    threads: Option<usize>,
    /// Print only the text.
    #[arg(long)]
    text_only: bool,
    /// Stream: feed the audio in pieces as if it arrived in real time and print each token as
    /// soon as it is final (chunks of `--chunk-ms`, with `--left-ms` of past and `--right-ms`
    /// of future audio around each), with the audio time at which it became final and the
    /// compute it waited for.
    #[arg(long)]
    stream: bool,
    /// Streaming: milliseconds of audio decoded per window (rounded to encoder frames).
    #[arg(long, default_value_t = 1040)]
    chunk_ms: u32,
    /// Streaming: milliseconds of past audio added before each chunk.
    #[arg(long, default_value_t = 4000)]
    left_ms: u32,
    /// Streaming: milliseconds of future audio waited for after each chunk (the latency).
    #[arg(long, default_value_t = 1040)]
    right_ms: u32,
    /// Streaming: milliseconds of audio per piece fed in.
    #[arg(long, default_value_t = 80)]
    piece_ms: u32,
    /// Also time this many more recognitions of the same audio and print `RESULT rtf <x>`
    /// (seconds of audio per second of compute) for each, and the process's peak memory
    /// (`RESULT peak_rss_mib`), for benches/parakeet_vs_transformers.py.
    #[arg(long, default_value_t = 0)]
    repeat: usize,
}

/// A field of /proc/self/status in MiB (Linux), if readable.
fn status_mib(field: &str) -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn main() {
    let a = Args::parse();
    if let Err(e) = run(&a) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(a: &Args) -> Result<(), FucinaError> {
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let ctx = ExecContext::with_backend(BackendKind::Native, threads)?;
    let _g = ctx.enter();
    let path = a.model.clone().unwrap_or_else(fucina_models::llm::assets::default_asr_model);
    let st = SafeTensors::open(&path)?;
    let rec = Recognizer::load(&st)?;
    let c = rec.model.config();
    eprintln!(
        "{}: Parakeet {}, {} blocks, width {}, {} heads, {} tokens, {}x subsampling",
        path.display(),
        rec.model.head(),
        c.layers,
        c.hidden,
        c.heads,
        c.vocab,
        c.subsampling_factor
    );
    let loaded_rss = status_mib("VmRSS:");
    if a.live {
        return live(a, &rec);
    }
    let input = a.input.as_ref().ok_or_else(|| FucinaError::InvalidArgument { op: "asr", msg: "no --in".into() })?;
    let audio = wav::read(input)?;
    let rate = rec.features.config().sample_rate;
    let audio = wav::resample(&audio, rate)?;
    if a.stream {
        return stream(a, &rec, &audio.samples, threads);
    }
    let t0 = Instant::now();
    let t = rec.transcribe(&audio.samples)?;
    let took = t0.elapsed().as_secs_f64();
    if !a.text_only {
        for tok in &t.tokens {
            println!("[{:7.2}s] {}", tok.start, tok.piece);
        }
    }
    println!("{}", t.text);
    eprintln!(
        "{:.2} s of audio in {:.3} s ({:.1}x real time, {} threads), {} encoder frames",
        audio.seconds(),
        took,
        audio.seconds() / took.max(1e-9),
        threads,
        t.frames
    );
    for _ in 0..a.repeat {
        let t0 = Instant::now();
        rec.transcribe(&audio.samples)?;
        println!("RESULT rtf {:.3}", audio.seconds() / t0.elapsed().as_secs_f64().max(1e-9));
    }
    if a.repeat > 0 {
        if let (Some(peak), Some(loaded)) = (status_mib("VmHWM:"), loaded_rss) {
            println!("RESULT peak_rss_mib {peak:.1}");
            println!("RESULT loaded_rss_mib {loaded:.1}");
        }
    }
    Ok(())
}

/// Streaming's chunk and contexts from the command line, in encoder frames.
fn stream_options(a: &Args, rec: &Recognizer) -> StreamOptions {
    let frame_ms = rec.frame_seconds() * 1000.0;
    let frames = |ms: u32| if ms == 0 { 0 } else { ((f64::from(ms) / frame_ms).round() as usize).max(1) };
    StreamOptions { chunk: frames(a.chunk_ms).max(1), left: frames(a.left_ms), right: frames(a.right_ms) }
}

/// `--live`: the microphone through a stream.
#[cfg(feature = "live")]
fn live(a: &Args, rec: &Recognizer) -> Result<(), FucinaError> {
    let mut all = Vec::new();
    fucina_models::parakeet::live::run(rec, stream_options(a, rec), a.seconds, |tokens, at| {
        for t in tokens {
            if !a.text_only {
                println!("[{:7.2}s] {:<12} final at {at:7.2}s", t.start, t.piece);
            }
        }
        all.extend_from_slice(tokens);
    })
    .map_err(|msg| FucinaError::InvalidArgument { op: "asr --live", msg })?;
    println!("{}", Recognizer::text(&all));
    Ok(())
}

/// `--live` without the `live` feature.
#[cfg(not(feature = "live"))]
fn live(_: &Args, _: &Recognizer) -> Result<(), FucinaError> {
    Err(FucinaError::InvalidArgument {
        op: "asr --live",
        msg: "this build has no live audio: rebuild with `cargo run -p fucina-models --release --features live --bin asr -- --live` (needs libasound2-dev on Linux)".into(),
    })
}

/// `--stream`: the audio fed in pieces, tokens printed as they become final.
fn stream(a: &Args, rec: &Recognizer, samples: &[f32], threads: usize) -> Result<(), FucinaError> {
    let frame_ms = rec.frame_seconds() * 1000.0;
    let opts = stream_options(a, rec);
    let rate = rec.features.config().sample_rate as usize;
    let piece = (rate * a.piece_ms.max(1) as usize / 1000).max(1);
    eprintln!(
        "streaming: chunks of {} frames ({:.0} ms), left {} ({:.0} ms), right {} ({:.0} ms); pieces of {} ms",
        opts.chunk,
        opts.chunk as f64 * frame_ms,
        opts.left,
        opts.left as f64 * frame_ms,
        opts.right,
        opts.right as f64 * frame_ms,
        a.piece_ms
    );
    let mut s = Stream::new(rec, opts)?;
    let mut all = Vec::new();
    let (mut worst, mut busy) = (0f64, 0f64);
    let mut fed = 0usize;
    let mut show = |tokens: Vec<fucina_models::parakeet::TokenAt>, at: f64, took: f64| {
        for t in &tokens {
            if !a.text_only {
                println!(
                    "[{:7.2}s] {:<12} final at {:7.2}s of audio (+{:.0} ms compute)",
                    t.start,
                    t.piece,
                    at,
                    took * 1000.0
                );
            }
        }
        all.extend(tokens);
    };
    for p in samples.chunks(piece) {
        fed += p.len();
        let t0 = Instant::now();
        let tokens = s.push(p)?;
        let took = t0.elapsed().as_secs_f64();
        (worst, busy) = (worst.max(took), busy + took);
        show(tokens, fed as f64 / rate as f64, took);
    }
    let t0 = Instant::now();
    let tokens = s.finish()?;
    let took = t0.elapsed().as_secs_f64();
    (worst, busy) = (worst.max(took), busy + took);
    show(tokens, fed as f64 / rate as f64, took);
    println!("{}", Recognizer::text(&all));
    let seconds = samples.len() as f64 / rate as f64;
    eprintln!(
        "{seconds:.2} s of audio in {} windows, {busy:.3} s of compute ({:.1}x real time, {threads} threads); the longest push took {:.0} ms",
        s.windows(),
        seconds / busy.max(1e-9),
        worst * 1000.0
    );
    Ok(())
}
