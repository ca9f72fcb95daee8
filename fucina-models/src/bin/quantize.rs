//! `quantize in.gguf out.gguf Q8_0`: re-encode a GGUF file's weights (like llama-quantize).

use clap::Parser;
use fucina_models::quantize::{parse_target, quantize_file};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

/// Re-encode the 2-D float weights of a GGUF file in another block format.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Input GGUF file.
    input: PathBuf,
    /// Output GGUF file.
    output: PathBuf,
    /// Target: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, or the
    /// llama.cpp mixes Q4_K_M / Q5_K_M (Q6_K for embeddings, output and some attn_v/ffn_down).
    format: String,
}

fn main() {
    let a = Args::parse();
    let run = || -> fucina::Result<()> {
        let (ty, ft) = parse_target(&a.format)?;
        let pb = ProgressBar::new(0);
        pb.set_style(
            ProgressStyle::with_template("[{bar:30}] {pos}/{len} tensors {msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let t0 = std::time::Instant::now();
        let report = quantize_file(&a.input, &a.output, ty, ft, |done, total, name| {
            pb.set_length(total as u64);
            pb.set_position(done as u64);
            pb.set_message(name.to_string());
        })?;
        pb.finish_and_clear();
        for (name, want, got) in &report.fallbacks {
            eprintln!("{name}: rows are not whole {want:?} blocks; using {got:?} instead");
        }
        let (re, copied) = (report.reencoded, report.copied);
        let size = std::fs::metadata(&a.output).map(|m| m.len()).unwrap_or(0);
        println!(
            "{} -> {}: {re} tensors re-encoded as {ty:?}, {copied} copied, {:.1} MiB, {:.1} s",
            a.input.display(),
            a.output.display(),
            size as f64 / (1 << 20) as f64,
            t0.elapsed().as_secs_f64()
        );
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
