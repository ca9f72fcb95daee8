//! `deepseek [model.gguf] --chat "…"`: run a DeepSeek-V2/V3 GGUF on the CPU, streaming
//! routed experts from the mapped file under `--expert-cache-mb`.

use clap::Parser;
use fucina_models::llm::cli::LmArgs;
use std::path::Path;

/// Chat with or complete text using a DeepSeek-V2/V3 (`deepseek2`) model in GGUF format:
/// multi-head latent attention with a compressed KV cache, mixtures of experts repacked at load
/// when they fit in memory, otherwise read from the mapped file only when routed
/// (`--expert-cache-mb` streams them under a budget). Without a
/// model path it runs the tiny random DeepSeek-V3 shipped with the crate.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    #[command(flatten)]
    lm: LmArgs,
}

fn main() {
    let tiny = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/deepseek-v3-tiny-f32.gguf");
    if let Err(e) = fucina_models::lm::run_cli(&Args::parse().lm, &tiny) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
