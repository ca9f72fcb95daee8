//! `lm-bench model.gguf --pp 16,64,256 --tg 32 [--streams 1,2,4,8]`: prompt-processing and
//! generation speed, measured like llama.cpp's `llama-bench` (random token ids, one cache
//! emptied before every run, an untimed warm-up run of each test), and batched decode like
//! its `llama-batched-bench`.

use clap::Parser;
use fucina::prelude::*;
use fucina_models::llm::{KvType, LogitRows};
use std::path::PathBuf;
use std::time::Instant;

/// Measure prefill (`ppN`: one batch of N tokens into an empty cache) and decode (`tgN`: N
/// tokens one at a time from an empty cache) in tokens per second, after an untimed warm-up
/// run of each prompt length and one decode step (as llama-bench warms up each test); one
/// cache serves every run, emptied before each.
/// Prints one `RESULT <test> <tok/s>` line per repetition, for scripts. Before the tests, a
/// read-bandwidth probe (the same threads summing a buffer eight times the last-level cache)
/// gives the machine's memory bandwidth (`PROBE read_gbs <GB/s>`); each decode result is
/// also given as the bytes of weights it streams per token (for a MoE: the dense weights and
/// the used share of the routed experts) times tok/s, as a fraction of
/// that bandwidth (`RESULT tgN_bw <fraction>`).
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
    /// How the KV cache stores keys and values: f16 (llama.cpp's default), f32 or q8_0.
    #[arg(long, default_value = "f16")]
    kv: KvType,
    /// Keep the KV cache in f32 (the same as `--kv f32`).
    #[arg(long)]
    kv_f32: bool,
    /// Read the model into memory instead of mapping it.
    #[arg(long)]
    no_mmap: bool,
    /// MoE models: the most MiB of routed experts kept resident.
    #[arg(long)]
    expert_cache_mb: Option<usize>,
    /// Batched decode, as llama.cpp's `llama-batched-bench`: for each N, N sequences each
    /// prefilled with `--stream-pp` tokens of its own, then `--tg` tokens decoded for all N
    /// in lockstep (one pass per step); prints the aggregate rate `RESULT tg<tg>_x<N>`.
    #[arg(long, value_delimiter = ',')]
    streams: Vec<usize>,
    /// Prompt tokens per sequence before a batched decode.
    #[arg(long, default_value_t = 32)]
    stream_pp: usize,
    /// Tokens already in the cache before each pp/tg test (fed untimed first), as
    /// llama-bench's `-d`: attention over a filled cache.
    #[arg(long, default_value_t = 0)]
    depth: usize,
}

fn main() {
    let a = Args::parse();
    let run = || -> fucina::Result<()> {
        let ctx = ExecContext::with_backend(BackendKind::Native, a.threads.max(1))?;
        let _g = ctx.enter();
        let lm = fucina_models::lm::open_with(&a.model, a.no_mmap, a.expert_cache_mb.map(|mb| mb << 20))?;
        let model = &*lm.model;
        let vocab = model.vocab_size() as u64;
        let dtype = if a.kv_f32 { KvType::F32 } else { a.kv };
        let longest = (a.pp.iter().copied().max().unwrap_or(0).max(a.tg) + 1)
            .checked_add(a.depth)
            .filter(|n| *n <= model.context_length())
            .ok_or(FucinaError::InvalidArgument {
                op: "lm-bench",
                msg: "--depth plus the tests exceed the context".into(),
            })?;
        let stream_len =
            a.stream_pp.checked_add(a.tg).filter(|n| a.streams.is_empty() || *n <= model.context_length()).ok_or(
                FucinaError::InvalidArgument { op: "lm-bench", msg: "--stream-pp plus --tg exceed the context".into() },
            )?;
        let rng = fucina::rng::Philox::new(1234);
        let tokens: Vec<u32> = (0..longest as u64).map(|i| (rng.at(0, i)[0] as u64 % vocab) as u32).collect();
        let (filler, tokens) = tokens.split_at(a.depth);
        // One cache for every test, as llama-bench keeps one context: cleared and given its
        // `--depth` tokens again (untimed) before each run.
        let mut cache = model.new_cache(longest, dtype)?;
        let reset = |cache: &mut fucina_models::llm::KvCache| -> fucina::Result<()> {
            cache.clear();
            if !filler.is_empty() {
                ctx.run_on_pool(|| model.forward(filler, cache, LogitRows::Last))?;
            }
            Ok(())
        };
        let step = |toks: &[u32], cache: &mut fucina_models::llm::KvCache| -> fucina::Result<()> {
            ctx.run_on_pool(|| model.forward(toks, cache, LogitRows::Last)).map(|_| ())
        };
        let probe = read_bandwidth(&ctx);
        println!("PROBE read_gbs {:.2}", probe / 1e9);
        let per_token = decode_bytes(&lm.header);
        eprintln!(
            "read bandwidth {:.1} GB/s ({} threads); decode streams {:.1} MiB of weights per token",
            probe / 1e9,
            a.threads,
            per_token as f64 / (1 << 20) as f64
        );
        // Warm-up, as llama-bench does per test: each prompt length once and one decode
        // step, untimed (every weight touched, the cache's and the buffers' pages in place).
        for &p in &a.pp {
            reset(&mut cache)?;
            step(&tokens[..p], &mut cache)?;
        }
        if a.tg > 0 || a.pp.is_empty() {
            reset(&mut cache)?;
            step(&tokens[..1.min(tokens.len())], &mut cache)?;
        }
        eprintln!("{}: {}, {} threads, KV cache {dtype:?}", a.model.display(), lm.summary, a.threads);
        for rep in 0..a.reps {
            for &p in &a.pp {
                reset(&mut cache)?;
                let t0 = Instant::now();
                step(&tokens[..p], &mut cache)?;
                let rate = p as f64 / t0.elapsed().as_secs_f64();
                println!("RESULT pp{p} {rate:.2}");
                eprintln!("rep {rep}: pp{p} {rate:.1} tok/s");
            }
            for &n in &a.streams {
                let rate = batched_decode(model, &ctx, n, a.stream_pp, a.tg, stream_len, dtype, vocab)?;
                println!("RESULT tg{}_x{n} {rate:.2}", a.tg);
                eprintln!("rep {rep}: tg{} x {n} streams {rate:.1} tok/s in all", a.tg);
            }
            if a.tg > 0 {
                reset(&mut cache)?;
                let t0 = Instant::now();
                for t in &tokens[..a.tg] {
                    step(std::slice::from_ref(t), &mut cache)?;
                }
                let rate = a.tg as f64 / t0.elapsed().as_secs_f64();
                let frac = rate * per_token as f64 / probe;
                println!("RESULT tg{} {rate:.2}", a.tg);
                println!("RESULT tg{}_bw {frac:.3}", a.tg);
                eprintln!("rep {rep}: tg{} {rate:.1} tok/s ({:.0}% of the read bandwidth)", a.tg, 100.0 * frac);
            }
        }
        Ok(())
    };
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

/// Aggregate decode rate of `n` sequences: each gets `pp` prompt tokens of its own (not
/// timed), then `tg` steps each feed every sequence its next token in one pass.
#[allow(clippy::too_many_arguments)]
fn batched_decode(
    model: &dyn fucina_models::llm::CausalLm,
    ctx: &ExecContext,
    n: usize,
    pp: usize,
    tg: usize,
    len: usize,
    dtype: KvType,
    vocab: u64,
) -> fucina::Result<f64> {
    use fucina_models::llm::Segment;
    let rng = fucina::rng::Philox::new(99);
    let toks: Vec<Vec<u32>> =
        (0..n as u64).map(|s| (0..len as u64).map(|i| (rng.at(s, i)[0] as u64 % vocab) as u32).collect()).collect();
    let mut caches = (0..n).map(|_| model.new_cache(len, dtype)).collect::<fucina::Result<Vec<_>>>()?;
    if pp > 0 {
        for (c, t) in caches.iter_mut().zip(&toks) {
            ctx.run_on_pool(|| model.forward(&t[..pp], c, LogitRows::Last))?;
        }
    }
    let t0 = Instant::now();
    for i in pp..pp + tg {
        let mut batch: Vec<Segment<'_>> = caches
            .iter_mut()
            .zip(&toks)
            .map(|(c, t)| Segment { tokens: &t[i..i + 1], cache: c, rows: LogitRows::Last })
            .collect();
        ctx.run_on_pool(|| model.forward_batch(&mut batch))?;
    }
    Ok((n * tg) as f64 / t0.elapsed().as_secs_f64())
}

/// Bytes of weights one decode step reads: every tensor but the embedding table (of which
/// it reads one row), unless the output head is tied to it, and Gemma 4's per-layer
/// embedding table (one row too).
fn decode_bytes(h: &fucina::formats::gguf::GgufHeader) -> u64 {
    let tied = !h.tensors.iter().any(|t| t.name == "output.weight");
    // Stacked routed experts (`*_exps`): a token reads `expert_used_count` of `expert_count`.
    let arch = h.get("general.architecture").and_then(|v| v.as_str()).unwrap_or("");
    let meta = |k: &str| h.get(&format!("{arch}.{k}")).and_then(|v| v.as_u64()).filter(|v| *v > 0);
    let (used, total) = match (meta("expert_used_count"), meta("expert_count")) {
        (Some(u), Some(t)) if u <= t => (u, t),
        _ => (1, 1),
    };
    h.tensors
        .iter()
        .filter(|t| (tied || t.name != "token_embd.weight") && t.name != "per_layer_token_embd.weight")
        .map(|t| {
            let b = t.nbytes().map_or(0, |b| b as u64);
            if t.name.contains("_exps") {
                b / total * used
            } else {
                b
            }
        })
        .sum()
}

/// The best of five timed reads of a buffer far larger than the caches, split over the
/// context's workers: bytes per second.
fn read_bandwidth(ctx: &ExecContext) -> f64 {
    use rayon::prelude::*;
    const BYTES: usize = 512 << 20;
    let buf: Vec<u64> = (0..BYTES / 8).map(|i| i as u64).collect();
    let mut best = 0.0f64;
    for _ in 0..5 {
        let t0 = Instant::now();
        let sum: u64 = ctx.install(|| {
            buf.par_chunks(1 << 16)
                .map(|c| {
                    c.chunks_exact(8).fold([0u64; 8], |mut a, v| {
                        for l in 0..8 {
                            a[l] = a[l].wrapping_add(v[l]);
                        }
                        a
                    })
                })
                .map(|a| a.iter().fold(0u64, |x, y| x.wrapping_add(*y)))
                .reduce(|| 0, u64::wrapping_add)
        });
        std::hint::black_box(sum);
        best = best.max(BYTES as f64 / t0.elapsed().as_secs_f64());
    }
    best
}
