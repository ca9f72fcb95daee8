//! `serve [model.gguf] --port 8080`: an OpenAI-compatible HTTP server for a language model.

use clap::Parser;
use fucina::prelude::*;
use fucina_models::llm::cli::{default_model, stop_tokens};
use fucina_models::llm::grammar::GrammarCompiler;
use fucina_models::llm::KvType;
use fucina_models::llm::Tokenizer;
use fucina_models::serve::{
    http::HttpOptions,
    serve,
    worker::{Worker, WorkerOptions},
    AppState, ReasoningFormat,
};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Serve a GGUF language model over HTTP with the OpenAI API: POST /v1/chat/completions and
/// /v1/completions (with `stream: true` for server-sent events), GET /v1/models and /health.
/// Requests queue for one model thread. Connections are limited and timed (headers, body,
/// blocked writes, idle keep-alive); Ctrl-C or SIGTERM stops accepting, lets requests in
/// flight finish within --shutdown-grace seconds, and exits. Without a model path it serves the tiny random Qwen3
/// shipped with the crate.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// GGUF model file (default: the tiny model committed with the crate).
    model: Option<PathBuf>,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    /// Port (0 picks a free one; the address is printed).
    #[arg(long, default_value_t = 8080)]
    port: u16,
    /// Worker threads of the model (default: all cores; at most 1024).
    #[arg(short, long)]
    threads: Option<usize>,
    /// KV cache length in tokens (default: min(context length, 4096); at most the model's).
    #[arg(long)]
    ctx: Option<usize>,
    /// Requests served at once (1..=64), by continuous batching: each step is one pass over
    /// all of them, which reads each weight once. Each slot has its own KV cache of `--ctx`
    /// positions, taken when the slot first serves; slots whose cache does not fit in memory
    /// are not used.
    #[arg(long, default_value_t = 4, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u16).range(1..=64), usize::from))]
    parallel: usize,
    /// How the KV caches store keys and values: f32, f16, or q8_0 (Q8_0 blocks, about a
    /// quarter of f32's memory; head widths must be multiples of 32).
    #[arg(long, default_value = "f32")]
    kv: KvType,
    /// Keep the KV cache in f16 (the same as `--kv f16`).
    #[arg(long)]
    kv_f16: bool,
    /// Read the model into memory instead of mapping it.
    #[arg(long)]
    no_mmap: bool,
    /// Answer without Qwen3's thinking block unless a request asks for it.
    #[arg(long)]
    no_think: bool,
    /// Speculative decoding: draft up to N tokens per step (GLM-4.5: its own
    /// next-token-prediction layer; other models: the conversation's n-grams), verified in
    /// one batched step (greedy: the same tokens; sampled: the same distribution).
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u16).range(0..=64), usize::from))]
    speculate: usize,
    /// Where chat answers put the `<think>` block: `separate` (the `reasoning_content` field)
    /// or `inline` (in `content`); a request's `reasoning_format` overrides it.
    #[arg(long, value_enum, default_value = "separate")]
    reasoning_format: ReasoningFormat,
    /// Default and ceiling of a request's max_tokens (1..=1048576).
    #[arg(long, default_value_t = 512, value_parser = clap::builder::TypedValueParser::map(clap::value_parser!(u32).range(1..=1 << 20), |v| v as usize))]
    max_tokens: usize,
    /// MoE models: the most MiB of routed experts kept resident (default: no limit).
    #[arg(long)]
    expert_cache_mb: Option<usize>,
    /// Name of the model in responses (default: the file name).
    #[arg(long)]
    model_id: Option<String>,
    /// Connections served at once (1..=65536); more are answered 503 and closed.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    max_connections: u32,
    /// Seconds a client has to send a request's headers; also how long an idle keep-alive
    /// connection is kept (1..=3600).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    header_timeout: u64,
    /// Seconds a client has to send a request's body (1..=3600).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    body_timeout: u64,
    /// Seconds a write to a client may stay blocked before the connection is dropped (1..=3600).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    write_timeout: u64,
    /// Seconds requests in flight get to finish after Ctrl-C or SIGTERM (0..=600).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(0..=600))]
    shutdown_grace: u64,
}

fn main() {
    let a = Args::parse();
    let go = || -> std::result::Result<(), String> {
        let path = a.model.clone().unwrap_or_else(default_model);
        let threads = a.threads.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
        let ctx = ExecContext::with_backend(BackendKind::Native, threads.max(1)).map_err(|e| e.to_string())?;
        let lm = {
            let _g = ctx.enter();
            fucina_models::lm::open_with(&path, a.no_mmap, a.expert_cache_mb.map(|mb| mb << 20))
                .map_err(|e| e.to_string())?
        };
        let tokenizer = Arc::new(Tokenizer::from_gguf(&lm.header).map_err(|e| e.to_string())?);
        if tokenizer.vocab_size() != lm.model.vocab_size() {
            return Err(format!(
                "the tokenizer has {} tokens, the model {}: the file is inconsistent",
                tokenizer.vocab_size(),
                lm.model.vocab_size()
            ));
        }
        let context = a.ctx.unwrap_or(lm.model.context_length().min(4096));
        if context == 0 || context > lm.model.context_length() {
            return Err(format!("--ctx {context} exceeds the model's context length of {}", lm.model.context_length()));
        }
        let kv = if a.kv_f16 { KvType::F16 } else { a.kv };
        let stops = stop_tokens(&lm.header, &tokenizer);
        let format = fucina_models::llm::chat::ChatFormat::detect(
            |t| tokenizer.token_id(t).is_some(),
            &lm.arch,
            lm.header.get("tokenizer.chat_template").and_then(|v| v.as_str()),
        );
        // Structured output needs an end token to finish a complete answer with.
        let grammar = match stops.first() {
            Some(&end) => Some(
                GrammarCompiler::new(tokenizer.clone(), lm.model.vocab_size(), end)
                    .map_err(|e| format!("cannot build the grammar vocabulary: {e}"))?,
            ),
            None => None,
        };
        let opts =
            WorkerOptions { capacity: context, kv, stop_tokens: stops, speculate: a.speculate, slots: a.parallel };
        let worker = Worker::spawn(lm.model.clone(), tokenizer.clone(), ctx, opts).map_err(|e| e.to_string())?;
        let model_id = a.model_id.clone().unwrap_or_else(|| {
            path.file_stem().map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned())
        });
        let state = Arc::new(AppState {
            model_id,
            tokenizer,
            worker,
            context,
            think: !a.no_think,
            reasoning: a.reasoning_format,
            format,
            max_tokens: a.max_tokens.max(1),
            counter: Default::default(),
            body_timeout: Duration::from_secs(a.body_timeout),
            grammar,
            stored: Default::default(),
        });
        let http = HttpOptions {
            max_connections: a.max_connections as usize,
            header_timeout: Duration::from_secs(a.header_timeout),
            write_timeout: Duration::from_secs(a.write_timeout),
            shutdown_grace: Duration::from_secs(a.shutdown_grace),
        };
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let served = rt.block_on(async {
            let listener = tokio::net::TcpListener::bind((a.host.as_str(), a.port))
                .await
                .map_err(|e| format!("cannot listen on {}:{}: {e}", a.host, a.port))?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            eprintln!(
                "{}: {}, {threads} threads, context {context}, {} requests at once",
                path.display(),
                lm.summary,
                a.parallel
            );
            eprintln!("listening on http://{addr}");
            serve(listener, state, http).await.map_err(|e| e.to_string())
        });
        // Tokenizer tasks still running on the blocking pool are not waited for.
        rt.shutdown_timeout(Duration::from_millis(200));
        eprintln!("shut down");
        served
    };
    if let Err(e) = go() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
