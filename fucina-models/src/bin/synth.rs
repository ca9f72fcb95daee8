//! `synth --preset qwen3-0.6b --format Q4_K out.gguf`: write a model file with random
//! weights in real shapes (for benchmarks and tests; no download needed).

use clap::Parser;
use fucina_models::llm::synth::{self, DeepSeekShape, Gemma4Shape, Glm4MoeShape, Qwen35Shape, Qwen3Shape};
use fucina_models::quantize::parse_target;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;

/// Write a GGUF model with random weights in the shapes of a real architecture, loadable by
/// fucina and by llama.cpp (llama.cpp's tensor names and metadata, a real BPE tokenizer
/// padded to the vocabulary size).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Output GGUF file.
    output: PathBuf,
    /// Shape preset: qwen3-0.6b, qwen3-small (4 layers, hidden 256), qwen3moe-small,
    /// llama3.2-1b, llama-small (qwen3-small's shapes as a `llama` file), deepseek-v2-lite,
    /// deepseek-moe-6g (a MoE whose Q8_0 file is ~6 GB), deepseek-small, glm4.5-air,
    /// glm4.5-mini (GLM-4.5-Air's structure at ~0.9B parameters), glm4moe-small, qwen3.5-0.8b
    /// (Qwen3.5-0.8B's shapes: Gated DeltaNet and gated attention), qwen35-small, gemma4-e2b
    /// (Gemma 4 E2B-like: per-layer embeddings, shared KV layers), gemma4-small.
    #[arg(long, default_value = "qwen3-0.6b")]
    preset: String,
    /// Storage format of the matrices: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, …
    #[arg(long, default_value = "F16")]
    format: String,
    /// Override the number of layers.
    #[arg(long)]
    layers: Option<usize>,
    /// RNG seed of the weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// The shape of a preset name.
fn preset(name: &str) -> Option<Qwen3Shape> {
    let small = Qwen3Shape {
        layers: 4,
        hidden: 256,
        ffn: 512,
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
        vocab: 1024,
        context: 2048,
        moe: None,
        tied: false,
    };
    Some(match name {
        "qwen3-0.6b" => Qwen3Shape::QWEN3_0_6B,
        "qwen3-small" => small,
        "qwen3moe-small" => Qwen3Shape { ffn: 256, moe: Some((8, 2)), ..small },
        "llama3.2-1b" => Qwen3Shape::LLAMA3_2_1B,
        "llama-small" => small,
        _ => return None,
    })
}

fn main() {
    let a = Args::parse();
    let run = || -> fucina::Result<()> {
        let model = match a.preset.as_str() {
            "glm4.5-air" | "glm4.5-mini" | "glm4moe-small" => {
                let mut s = match a.preset.as_str() {
                    "glm4.5-air" => Glm4MoeShape::GLM4_5_AIR,
                    "glm4.5-mini" => Glm4MoeShape::GLM4_5_MINI,
                    _ => Glm4MoeShape {
                        layers: 3,
                        hidden: 256,
                        heads: 4,
                        kv_heads: 2,
                        head_dim: 64,
                        ffn: 512,
                        experts: 8,
                        used: 2,
                        expert_ffn: 128,
                        vocab: 1024,
                        context: 2048,
                        qk_norm: true,
                        ..Glm4MoeShape::GLM4_5_MINI
                    },
                };
                if let Some(l) = a.layers {
                    s.layers = l;
                }
                synth::glm4moe(&s)
            }
            "qwen3.5-0.8b" | "qwen35-small" => {
                let mut s = match a.preset.as_str() {
                    "qwen3.5-0.8b" => Qwen35Shape::QWEN3_5_0_8B,
                    _ => Qwen35Shape {
                        layers: 4,
                        hidden: 256,
                        ffn: 512,
                        heads: 4,
                        kv_heads: 2,
                        head_dim: 64,
                        lin_k_heads: 2,
                        lin_v_heads: 4,
                        lin_head: 64,
                        vocab: 1024,
                        context: 2048,
                        ..Qwen35Shape::QWEN3_5_0_8B
                    },
                };
                if let Some(l) = a.layers {
                    s.layers = l;
                }
                synth::qwen35(&s)
            }
            "gemma4-e2b" | "gemma4-small" => {
                let mut s = match a.preset.as_str() {
                    "gemma4-e2b" => Gemma4Shape::E2B,
                    _ => Gemma4Shape {
                        layers: 10,
                        hidden: 256,
                        ffn: 512,
                        heads: 4,
                        kv_heads: 1,
                        head_dim_swa: 64,
                        head_dim: 128,
                        shared_kv: 5,
                        per_layer: 32,
                        window: 64,
                        vocab: 1024,
                        context: 2048,
                        ..Gemma4Shape::E2B
                    },
                };
                if let Some(l) = a.layers {
                    // The unshared layers stay a whole number of patterns, so the last of them
                    // is global and the one before it sliding (llama.cpp's cache maps the
                    // shared layers onto those two).
                    let fe = s.full_every;
                    let first = (l.saturating_sub(s.shared_kv) / fe).max(1) * fe;
                    s.layers = l;
                    s.shared_kv = l.saturating_sub(first);
                }
                synth::gemma4(&s)
            }
            "deepseek-v2-lite" | "deepseek-moe-6g" | "deepseek-small" => {
                let mut s = match a.preset.as_str() {
                    "deepseek-v2-lite" => DeepSeekShape::V2_LITE,
                    "deepseek-moe-6g" => DeepSeekShape::MOE_6G,
                    _ => DeepSeekShape {
                        layers: 3,
                        hidden: 256,
                        heads: 4,
                        kv_lora: 128,
                        qk_nope: 32,
                        qk_rope: 32,
                        v_head: 32,
                        ffn: 512,
                        experts: 8,
                        used: 2,
                        shared: 1,
                        expert_ffn: 256,
                        vocab: 1024,
                        context: 2048,
                        ..DeepSeekShape::MOE_6G
                    },
                };
                if let Some(l) = a.layers {
                    s.layers = l;
                }
                synth::deepseek(&s)
            }
            _ => {
                let mut shape = preset(&a.preset).ok_or_else(|| fucina::FucinaError::InvalidArgument {
                    op: "synth",
                    msg: format!(
                        "unknown preset `{}` (qwen3-0.6b, qwen3-small, qwen3moe-small, llama3.2-1b, llama-small, \
                         deepseek-v2-lite, deepseek-moe-6g, deepseek-small, glm4.5-air, glm4.5-mini, glm4moe-small, \
                         qwen3.5-0.8b, qwen35-small, gemma4-e2b, gemma4-small)",
                        a.preset
                    ),
                })?;
                if let Some(l) = a.layers {
                    shape.layers = l;
                }
                if a.preset.starts_with("llama") {
                    synth::llama(&shape)
                } else {
                    synth::qwen3(&shape)
                }
            }
        };
        let ty = match parse_target(&a.format)? {
            (fucina_models::quantize::Target::Uniform(t), _) => t,
            _ => {
                return Err(fucina::FucinaError::InvalidArgument {
                    op: "synth",
                    msg: "mixes (Q4_K_M…) are made with the quantize binary from an F16/F32 file".into(),
                })
            }
        };
        let pb = ProgressBar::new(model.tensors.len() as u64);
        pb.set_style(
            ProgressStyle::with_template("[{bar:30}] {pos}/{len} tensors ({elapsed}, eta {eta})")
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
        );
        let t0 = std::time::Instant::now();
        synth::write(&model, ty, a.seed, &a.output, |i, _| pb.set_position(i as u64))?;
        pb.finish_and_clear();
        let size = std::fs::metadata(&a.output).map(|m| m.len()).unwrap_or(0);
        println!(
            "{}: {} {} ({:?}), {:.1} MiB, {:.1} s",
            a.output.display(),
            a.preset,
            model.arch,
            ty,
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
