//! `amp-bench model.nam...`: real-time factor and per-buffer latency of the streaming engine.

use clap::Parser;
use fucina_models::nam::Amp;
use std::path::PathBuf;
use std::time::Instant;

/// Measure the streaming engine on one thread: for each model and buffer size, process
/// `--seconds` of audio (noise at guitar level) buffer by buffer and report the real-time
/// factor (seconds of audio per second of compute) and the p50/p99/max time of one buffer
/// as a fraction of its deadline (buffer length / sample rate). One `RESULT` line per
/// model and buffer size, for scripts.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// `.nam` files.
    models: Vec<PathBuf>,
    /// Buffer sizes in samples.
    #[arg(long, value_delimiter = ',', default_value = "32,64,128,256,512")]
    buffers: Vec<usize>,
    /// Seconds of audio per measurement.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
}

fn main() {
    let a = Args::parse();
    if a.models.is_empty() {
        eprintln!("error: give at least one .nam file");
        std::process::exit(2);
    }
    for path in &a.models {
        let amp = match Amp::open(path) {
            Ok(m) => m,
            Err(e) => {
                eprintln!("error: {}: {e}", path.display());
                std::process::exit(1);
            }
        };
        let rate = amp.sample_rate;
        let n = (a.seconds * rate) as usize;
        // Deterministic noise at about -12 dBFS.
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let input: Vec<f32> = (0..n)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.5
            })
            .collect();
        let mut output = vec![0.0f32; n];
        let name = path.file_stem().map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        for &bs in &a.buffers {
            let mut s = amp.stream(bs.max(1));
            s.process(&input[..bs.min(n)], &mut output[..bs.min(n)]); // warm-up
            let mut times = Vec::with_capacity(n / bs + 1);
            let t0 = Instant::now();
            for (x, y) in input.chunks(bs).zip(output.chunks_mut(bs)) {
                let t = Instant::now();
                s.process(x, y);
                times.push(t.elapsed().as_secs_f64());
            }
            let total = t0.elapsed().as_secs_f64();
            std::hint::black_box(&output);
            times.sort_by(f64::total_cmp);
            let deadline = bs as f64 / rate;
            let pct = |q: f64| times[((times.len() - 1) as f64 * q) as usize] / deadline;
            let rtf = a.seconds / total;
            println!(
                "RESULT {name} {bs} {rtf:.2} {:.4} {:.4} {:.4}",
                pct(0.5),
                pct(0.99),
                times.last().copied().unwrap_or(0.0) / deadline
            );
            eprintln!(
                "{name:>14} buffer {bs:>4}: {rtf:>7.1}x real time; buffer time / deadline p50 {:.3} p99 {:.3} max {:.3}",
                pct(0.5),
                pct(0.99),
                times.last().copied().unwrap_or(0.0) / deadline
            );
        }
    }
}
