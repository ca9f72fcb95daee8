//! `asr [model.safetensors] --in speech.wav`: speech to text with a Parakeet model (CTC, TDT
//! or RNN-T).

use clap::Parser;
use fucina::formats::safetensors::SafeTensors;
use fucina::prelude::*;
use fucina_models::parakeet::{wav, Recognizer};
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
    #[arg(long = "in")]
    input: PathBuf,
    /// Worker threads (default: all cores).
    #[arg(short, long)]
    threads: Option<usize>,
    /// Print only the text.
    #[arg(long)]
    text_only: bool,
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
    let audio = wav::read(&a.input)?;
    let rate = rec.features.config().sample_rate;
    let audio = wav::resample(&audio, rate)?;
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
