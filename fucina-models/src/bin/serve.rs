//! `serve [model.gguf] --port 8080`: an OpenAI-compatible HTTP server for a language model.

use clap::Parser;
use fucina::prelude::*;
use fucina_models::llm::cli::{default_model, stop_tokens};
use fucina_models::llm::Tokenizer;
use fucina_models::serve::{serve, worker::Worker, AppState};
use std::path::PathBuf;
use std::sync::Arc;

/// Serve a GGUF language model over HTTP with the OpenAI API: POST /v1/chat/completions and
/// /v1/completions (with `stream: true` for server-sent events), GET /v1/models and /health.
/// Requests queue for one model thread. Without a model path it serves the tiny random Qwen3
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
    /// Worker threads of the model.
    #[arg(short, long)]
    threads: Option<usize>,
    /// KV cache length in tokens (default: min(context length, 4096)).
    #[arg(long)]
    ctx: Option<usize>,
    /// Keep the KV cache in f16.
    #[arg(long)]
    kv_f16: bool,
    /// Read the model into memory instead of mapping it.
    #[arg(long)]
    no_mmap: bool,
    /// Answer without Qwen3's thinking block unless a request asks for it.
    #[arg(long)]
    no_think: bool,
    /// Default and ceiling of a request's max_tokens.
    #[arg(long, default_value_t = 512)]
    max_tokens: usize,
    /// MoE models: the most MiB of routed experts kept resident (default: no limit).
    #[arg(long)]
    expert_cache_mb: Option<usize>,
    /// Name of the model in responses (default: the file name).
    #[arg(long)]
    model_id: Option<String>,
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
        let context = a.ctx.unwrap_or(lm.model.context_length().min(4096));
        if context > lm.model.context_length() {
            return Err(format!("--ctx {context} exceeds the model's context length of {}", lm.model.context_length()));
        }
        let kv = if a.kv_f16 { DType::F16 } else { DType::F32 };
        let stops = stop_tokens(&lm.header, &tokenizer);
        let format = fucina_models::llm::chat::ChatFormat::detect(|t| tokenizer.token_id(t).is_some(), &lm.arch);
        let worker =
            Worker::spawn(lm.model.clone(), tokenizer.clone(), ctx, context, kv, stops).map_err(|e| e.to_string())?;
        let model_id = a.model_id.clone().unwrap_or_else(|| {
            path.file_stem().map_or_else(|| "model".to_string(), |s| s.to_string_lossy().into_owned())
        });
        let state = Arc::new(AppState {
            model_id,
            tokenizer,
            worker,
            context,
            think: !a.no_think,
            format,
            max_tokens: a.max_tokens.max(1),
            counter: Default::default(),
        });
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async {
            let listener = tokio::net::TcpListener::bind((a.host.as_str(), a.port))
                .await
                .map_err(|e| format!("cannot listen on {}:{}: {e}", a.host, a.port))?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            eprintln!("{}: {}, {threads} threads, context {context}", path.display(), lm.summary);
            eprintln!("listening on http://{addr}");
            serve(listener, state).await.map_err(|e| e.to_string())
        })
    };
    if let Err(e) = go() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
