//! `amp-train --out model.nam`: fit a WaveNet to an amp with autograd and AdamW, export `.nam`.

use clap::Parser;
use fucina::formats::nam::{to_json, Architecture, Schema};
use fucina::prelude::*;
use fucina_models::nam::train::{esr, preset, synthetic_amp, synthetic_guitar, train, TrainOptions};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

/// Train a NAM WaveNet on a (dry, amp) pair and export it as `.nam`. Without `--dry`/`--wet`
/// it makes its own pair: 40 s of synthetic guitar through a tanh waveshaper with a one-pole
/// tone filter, and reports the error-to-signal ratio (ESR) on 10 s of held-out audio.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Output `.nam` file.
    #[arg(long)]
    out: PathBuf,
    /// Architecture: compact (default), nano, feather, lite, standard.
    #[arg(long, default_value = "compact")]
    preset: String,
    /// Dry input WAV (mono, 48 kHz); with `--wet`, replaces the synthetic pair.
    #[arg(long, requires = "wet")]
    dry: Option<PathBuf>,
    /// The amp's output for `--dry`, sample-aligned.
    #[arg(long, requires = "dry")]
    wet: Option<PathBuf>,
    /// Optimizer steps.
    #[arg(long, default_value_t = 600)]
    steps: usize,
    /// Segments per step.
    #[arg(long, default_value_t = 8)]
    batch: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 4e-3)]
    lr: f64,
    /// Seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Worker threads.
    #[arg(short, long)]
    threads: Option<usize>,
    /// Write the 0.5 schema (for NAM plugins before 0.7) instead of 0.7.
    #[arg(long)]
    v05: bool,
}

fn read_wav(p: &PathBuf) -> std::result::Result<Vec<f32>, String> {
    let mut r = hound::WavReader::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let spec = r.spec();
    let ch = spec.channels.max(1) as usize;
    let v: Vec<f32> = match spec.sample_format {
        hound::SampleFormat::Float => r.samples::<f32>().collect::<std::result::Result<_, _>>(),
        hound::SampleFormat::Int => {
            let s = 1.0 / (1u64 << (spec.bits_per_sample.clamp(1, 32) - 1)) as f32;
            r.samples::<i32>().map(|x| x.map(|v| v as f32 * s)).collect::<std::result::Result<_, _>>()
        }
    }
    .map_err(|e| format!("{}: {e}", p.display()))?;
    Ok(v.into_iter().step_by(ch).collect())
}

fn main() {
    let a = Args::parse();
    if let Err(e) = run(&a) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(a: &Args) -> std::result::Result<(), String> {
    let config = preset(&a.preset).ok_or_else(|| format!("unknown preset `{}`", a.preset))?;
    let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let ctx = ExecContext::with_backend(BackendKind::Native, threads).map_err(|e| e.to_string())?;
    let _g = ctx.enter();
    let (x, y, held) = match (&a.dry, &a.wet) {
        (Some(d), Some(w)) => {
            let (x, y) = (read_wav(d)?, read_wav(w)?);
            let n = x.len().min(y.len());
            let cut = n * 8 / 10;
            (x[..cut].to_vec(), y[..cut].to_vec(), Some((x[cut..n].to_vec(), y[cut..n].to_vec())))
        }
        _ => {
            let x = synthetic_guitar(48_000 * 40, a.seed);
            let y = synthetic_amp(&x, 4.0, 0.6);
            let hx = synthetic_guitar(48_000 * 10, a.seed.wrapping_add(1000));
            let hy = synthetic_amp(&hx, 4.0, 0.6);
            (x, y, Some((hx, hy)))
        }
    };
    let opts = TrainOptions { steps: a.steps, batch: a.batch, lr: a.lr, seed: a.seed, ..TrainOptions::default() };
    let pb = ProgressBar::new(opts.steps as u64);
    pb.set_style(
        ProgressStyle::with_template("[{bar:30}] step {pos}/{len} loss {msg} ({per_sec}, eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    let net = train(&ctx, &config, &x, &y, &opts, |s, loss| {
        pb.set_position(s as u64 + 1);
        pb.set_message(format!("{loss:.3e}"));
    })
    .map_err(|e| e.to_string())?;
    pb.finish_and_clear();
    if let Some((hx, hy)) = held {
        let t = Tensor::<axes![batch, time]>::from_vec(hx.clone(), &[1, hx.len()]).map_err(|e| e.to_string())?;
        let pred = fucina::autograd::no_grad(|| net.forward(&t)).map_err(|e| e.to_string())?.to_f32_vec();
        eprintln!("held-out ESR: {:.5}", esr(&pred, &hy));
    }
    let meta = serde_json::json!({ "name": format!("fucina amp-train ({})", a.preset), "modeled_by": "fucina-rs" });
    let schema = if a.v05 { Schema::V0_5 } else { Schema::V0_7 };
    let doc =
        to_json(&Architecture::WaveNet(net.config.clone()), &net.to_weights(), Some(48_000.0), Some(&meta), schema);
    std::fs::write(&a.out, serde_json::to_string(&doc).map_err(|e| e.to_string())?)
        .map_err(|e| format!("{}: {e}", a.out.display()))?;
    eprintln!("wrote {}", a.out.display());
    Ok(())
}
