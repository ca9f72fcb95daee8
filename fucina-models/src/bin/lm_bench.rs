//! `lm-bench model.gguf --pp 16,64,256 --tg 32`: prompt-processing and generation speed,
//! measured like llama.cpp's `llama-bench` (random token ids, an empty cache per test).

use clap::Parser;
use fucina::prelude::*;
use std::path::PathBuf;
use std::time::Instant;

/// Measure prefill (`ppN`: one batch of N tokens into an empty cache) and decode (`tgN`: N
/// tokens one at a time from an empty cache) in tokens per second, after one warm-up pass.
/// Prints one `RESULT <test> <tok/s>` line per repetition, for scripts.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// GGUF model file.
    model: PathBuf,
    /// Prompt lengths to measure.
    #[arg(long, value_delimiter = ',', default_value = "16,64,256")]
    pp: Vec<usize>,
    /// Tokens to generate (0: skip).
    #[arg(long, default_value_t = 32)]
    tg: usize,
    /// Worker threads.
    #[arg(short, long, default_value_t = 2)]
    threads: usize,
    /// Repetitions of each test.
    #[arg(short, long, default_value_t = 3)]
    reps: usize,
    /// Keep the KV cache in f32 instead of f16 (llama.cpp's default is f16).
    #[arg(long)]
    kv_f32: bool,
    /// Read the model into memory instead of mapping it.
    #[arg(long)]
    no_mmap: bool,
    /// MoE models: the most MiB of routed experts kept resident.
    #[arg(long)]
    expert_cache_mb: Option<usize>,
}

fn main() {
    let a = Args::parse();
    let run = || -> fucina::Result<()> {
        let ctx = ExecContext::with_backend(BackendKind::Native, a.threads.max(1))?;
        let _g = ctx.enter();
        let lm = fucina_models::lm::open_with(&a.model, a.no_mmap, a.expert_cache_mb.map(|mb| mb << 20))?;
        let model = &*lm.model;
        let vocab = model.vocab_size() as u64;
        let dtype = if a.kv_f32 { DType::F32 } else { DType::F16 };
        let longest = a.pp.iter().copied().max().unwrap_or(0).max(a.tg) + 1;
        let rng = fucina::rng::Philox::new(1234);
        let tokens: Vec<u32> = (0..longest as u64).map(|i| (rng.at(0, i)[0] as u64 % vocab) as u32).collect();
        let step = |toks: &[u32], cache: &mut fucina_models::llm::KvCache| -> fucina::Result<()> {
            ctx.run_on_pool(|| model.forward(toks, cache, false)).map(|_| ())
        };
        // Warm-up: touch every weight once.
        let mut cache = model.new_cache(longest, dtype)?;
        step(&tokens[..4.min(longest)], &mut cache)?;
        eprintln!("{}: {}, {} threads, KV cache {dtype:?}", a.model.display(), lm.summary, a.threads);
        for rep in 0..a.reps {
            for &p in &a.pp {
                let mut cache = model.new_cache(longest, dtype)?;
                let t0 = Instant::now();
                step(&tokens[..p], &mut cache)?;
                let rate = p as f64 / t0.elapsed().as_secs_f64();
                println!("RESULT pp{p} {rate:.2}");
                eprintln!("rep {rep}: pp{p} {rate:.1} tok/s");
            }
            if a.tg > 0 {
                let mut cache = model.new_cache(longest, dtype)?;
                let t0 = Instant::now();
                for t in &tokens[..a.tg] {
                    step(std::slice::from_ref(t), &mut cache)?;
                }
                let rate = a.tg as f64 / t0.elapsed().as_secs_f64();
                println!("RESULT tg{} {rate:.2}", a.tg);
                eprintln!("rep {rep}: tg{} {rate:.1} tok/s", a.tg);
            }
        }
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
