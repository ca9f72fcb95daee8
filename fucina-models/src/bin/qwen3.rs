//! `qwen3 [model.gguf] --chat "…"`: run a Qwen3 or Qwen3-MoE GGUF (any of its dtypes) on the CPU.

use clap::Parser;
use fucina_models::llm::cli::{default_model, LmArgs};

/// Chat with or complete text using a Qwen3 (dense or MoE) model in GGUF format. Without a
/// model path it runs the tiny random-weight Qwen3 shipped with the crate (its answers are
/// noise; it exists to show the whole path working).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    #[command(flatten)]
    lm: LmArgs,
}

fn main() {
    if let Err(e) = fucina_models::lm::run_cli(&Args::parse().lm, &default_model()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
