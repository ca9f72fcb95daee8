//! `chat model.gguf --chat "…"`: run any supported GGUF language model on the CPU, the family
//! picked from the file (`qwen3`, `qwen3moe`, `qwen2`, `llama`, `glm4moe`, `deepseek2`), its chat format
//! from the vocabulary and the file's template.

use clap::Parser;
use fucina_models::llm::cli::{default_model, LmArgs};

/// Chat with or complete text using any supported GGUF language model: Qwen3 (dense or
/// MoE), Qwen2, Llama (2, 3.x; Mistral's files), GLM-4.5/4.6, DeepSeek-V2/V3. The family comes from the
/// file's `general.architecture`, the chat format from its vocabulary and template. Without a
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
