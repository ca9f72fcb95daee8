//! `chat model.gguf --chat "…"`: run any supported GGUF language model on the CPU, the family
//! picked from the file (`qwen3`, `qwen3moe`, `qwen35`, `qwen35moe`, `qwen2`, `llama`, `glm4moe`,
//! `nanochat`, `deepseek2`, `gemma4`),
//! its chat format from the vocabulary and the file's template.

use clap::Parser;
use fucina_models::llm::cli::{default_chat_model, LmArgs};

/// Chat with or complete text using any supported GGUF language model: Qwen3 (dense or
/// MoE), Qwen3.5 (dense or MoE), Gemma 4 (dense or MoE), Qwen2, Llama (2, 3.x; Mistral's
/// files), GLM-4.5/4.6, nanochat, DeepSeek-V2/V3. The family
/// comes from the file's `general.architecture`, the chat format from its vocabulary and
/// template. Without a model path it runs the 1.3 M-parameter nanochat trained from scratch
/// by `nanochat all` and shipped with the crate: it names capitals, adds numbers below 100
/// and converts units, and knows little else.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    #[command(flatten)]
    lm: LmArgs,
}

fn main() {
    if let Err(e) = fucina_models::lm::run_cli(&Args::parse().lm, &default_chat_model()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
