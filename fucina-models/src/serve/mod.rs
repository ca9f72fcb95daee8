//! An OpenAI-compatible HTTP server for the language models: `/v1/chat/completions` and
//! `/v1/completions` (plain JSON, or server-sent events with `stream: true`), `/v1/models`
//! and `/health`. Requests are validated on the server's threads and tokenized on its
//! blocking pool (a long prompt never stalls `/health`), then queued for the model thread
//! ([`worker`]), which serves several at once by continuous batching. Every error is a JSON
//! body in OpenAI's shape with a 4xx/5xx status. Connections, timeouts and shutdown are
//! [`http`]'s.

pub mod api;
pub mod http;
pub mod output;
pub mod responses;
pub mod stored;
pub mod worker;

use crate::llm::chat::{ChatFormat, Prompt};
use crate::llm::grammar::{GrammarCompiler, GrammarConstraint};
use crate::llm::sampling::SamplingParams;
use crate::llm::tokenizer::Tokenizer;
use api::{
    chat_logprobs, check_common, completion_logprobs, error_body, include_usage, logit_bias, logprobs, parse_messages,
    response_format, tools, ChatRequest, Common, CompletionRequest, Stop, ToolRequest, Usage,
};
use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use output::{ChatSplit, Delta, SplitSpec};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use worker::{Event, Job, TokenLogprob, Worker};

/// Where a chat answer's reasoning (`<think>...</think>`) goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReasoningFormat {
    /// In `reasoning_content`, beside `content` (as DeepSeek's API and llama-server do).
    Separate,
    /// Left in `content`, tags and all.
    Inline,
}

/// Largest request body accepted.
pub const MAX_BODY: usize = 1 << 20;

/// What the handlers share.
pub struct AppState {
    /// The model's name in responses.
    pub model_id: String,
    /// Tokenizer (requests are tokenized before they are queued).
    pub tokenizer: Arc<Tokenizer>,
    /// The model thread.
    pub worker: Worker,
    /// KV cache length: prompt plus answer must fit.
    pub context: usize,
    /// Default for Qwen3's thinking switch.
    pub think: bool,
    /// Default for where chat answers put their `<think>` block.
    pub reasoning: ReasoningFormat,
    /// The model's chat prompt format.
    pub format: ChatFormat,
    /// Default and ceiling of `max_tokens`.
    pub max_tokens: usize,
    /// Response ids.
    pub counter: AtomicU64,
    /// Time a client has to send the request body.
    pub body_timeout: std::time::Duration,
    /// Compiles `response_format` grammars against the model's vocabulary (`None`: the
    /// model has no end token, and structured output is refused).
    pub grammar: Option<GrammarCompiler>,
    /// Finished `/v1/responses` conversations, for `previous_response_id`.
    pub stored: stored::ResponseStore,
}

/// The routes.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/v1/models/{id}", get(model))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/v1/responses", post(responses::responses))
        .route("/v1/responses/{id}", get(responses::retrieve).delete(responses::delete))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// An error response.
fn fail(status: StatusCode, message: impl AsRef<str>, code: Option<&str>) -> Response {
    let kind = if status.is_client_error() { "invalid_request_error" } else { "server_error" };
    (status, Json(error_body(message.as_ref(), kind, code))).into_response()
}

async fn not_found(req: Request) -> Response {
    fail(StatusCode::NOT_FOUND, format!("no route for {} {}", req.method(), req.uri().path()), Some("not_found"))
}

async fn method_not_allowed(req: Request) -> Response {
    fail(
        StatusCode::METHOD_NOT_ALLOWED,
        format!("{} is not allowed on {}", req.method(), req.uri().path()),
        Some("method_not_allowed"),
    )
}

/// `ok` while the model thread runs; `503` once it has stopped (requests would only queue).
/// `slots` says how many requests run at once, how many run and wait now, the most one
/// forward pass has served, and the passes so far.
async fn health(State(st): State<Arc<AppState>>) -> Response {
    let restarts = st.worker.recovered_panics();
    let load = st.worker.load();
    let slots = json!({
        "total": st.worker.slots(),
        "busy": load.busy.load(Ordering::Relaxed),
        "queued": load.queued.load(Ordering::Relaxed),
        "widest_step": load.widest_step.load(Ordering::Relaxed),
        "steps": load.steps.load(Ordering::Relaxed),
    });
    if st.worker.is_alive() {
        Json(json!({ "status": "ok", "model_panics_recovered": restarts, "slots": slots })).into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "error", "message": "the model thread has stopped", "model_panics_recovered": restarts, "slots": slots })),
        )
            .into_response()
    }
}

async fn models(State(st): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "object": "list",
        "data": [{ "id": st.model_id, "object": "model", "created": now(), "owned_by": "fucina" }]
    }))
}

/// `GET /v1/models/{id}`: the served model, or 404 for any other id.
async fn model(State(st): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    if id != st.model_id {
        return model_not_found(&id);
    }
    Json(json!({ "id": st.model_id, "object": "model", "created": now(), "owned_by": "fucina" })).into_response()
}

/// OpenAI's answer to an unknown model id.
fn model_not_found(id: &str) -> Response {
    fail(
        StatusCode::NOT_FOUND,
        format!("The model `{id}` does not exist (this server serves one model)"),
        Some("model_not_found"),
    )
}

fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Reads a JSON body of at most [`MAX_BODY`] bytes, sent within the body timeout, into
/// `T`, or the 4xx response.
#[allow(clippy::result_large_err)]
async fn read_json<T: serde::de::DeserializeOwned>(st: &AppState, req: Request) -> Result<T, Response> {
    let read = axum::body::to_bytes(req.into_body(), MAX_BODY);
    let bytes: Bytes = match tokio::time::timeout(st.body_timeout, read).await {
        Err(_) => {
            return Err(fail(
                StatusCode::REQUEST_TIMEOUT,
                format!("the request body did not arrive within {} s", st.body_timeout.as_secs_f64()),
                Some("request_timeout"),
            ))
        }
        Ok(r) => r.map_err(|_| {
            fail(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the request body is larger than {MAX_BODY} bytes (or was cut off)"),
                Some("request_too_large"),
            )
        })?,
    };
    serde_json::from_slice(&bytes)
        .map_err(|e| fail(StatusCode::BAD_REQUEST, format!("invalid request body: {e}"), Some("invalid_json")))
}

/// What a request asks to complete.
enum Input {
    /// `/v1/completions`: the client's raw text, control tokens parsed (it is the model's
    /// whole input, as llama-server treats it).
    Raw(String),
    /// `/v1/chat/completions`: the rendered chat, message text never parsed for control
    /// tokens.
    Chat(Prompt),
}

impl Prepared {
    /// The job for the model thread: the prompt, stop strings and grammar move into it.
    fn take_job(&mut self, events: tokio::sync::mpsc::UnboundedSender<Event>) -> Job {
        Job {
            prompt: std::mem::take(&mut self.prompt),
            params: self.params.clone(),
            max_tokens: self.max_tokens,
            stop: std::mem::take(&mut self.stop),
            grammar: self.grammar.take(),
            logprobs: self.logprobs,
            opened_reasoning: self.split.opened_reasoning,
            events,
        }
    }
}

/// A validated request, ready to queue.
struct Prepared {
    prompt: Vec<u32>,
    params: SamplingParams,
    max_tokens: usize,
    stop: Vec<String>,
    stream: bool,
    /// Streaming: a last chunk with the token counts (`stream_options.include_usage`).
    include_usage: bool,
    /// The compiled `response_format`, if any.
    grammar: Option<GrammarConstraint>,
    /// Log-probabilities with this many alternatives, if asked for.
    logprobs: Option<usize>,
    /// Chat: how the answer splits into reasoning, content and tool calls.
    split: SplitSpec,
}

// A Response is large, and returning it by value on the (rare) error path costs nothing
// that matters next to tokenizing the prompt.
#[allow(clippy::result_large_err)]
/// `tool_req`: a chat request's tools, parsed once by the caller (which rendered them).
async fn prepare(
    st: &Arc<AppState>,
    input: Input,
    c: &Common,
    tool_req: Option<ToolRequest>,
) -> Result<Prepared, Response> {
    let bad = |m: String| fail(StatusCode::BAD_REQUEST, m, Some("invalid_value"));
    if let Some(m) = c.model.as_deref().filter(|m| *m != st.model_id) {
        return Err(model_not_found(m));
    }
    if c.n.is_some_and(|n| n != 1) {
        return Err(bad("only n = 1 is supported".into()));
    }
    if let Err(e) = check_common(c) {
        return Err(fail(StatusCode::BAD_REQUEST, e.message, Some(e.code)));
    }
    let params = SamplingParams {
        temperature: c.temperature.unwrap_or(1.0),
        top_k: c.top_k.unwrap_or(0),
        top_p: c.top_p.unwrap_or(1.0),
        min_p: c.min_p.unwrap_or(0.0),
        repetition_penalty: c.repetition_penalty.unwrap_or(1.0),
        repeat_last_n: 64,
        presence_penalty: c.presence_penalty.unwrap_or(0.0),
        frequency_penalty: c.frequency_penalty.unwrap_or(0.0),
        logit_bias: logit_bias(c, st.tokenizer.vocab_size())
            .map_err(|e| fail(StatusCode::BAD_REQUEST, e.message, Some(e.code)))?,
        // Without a seed every request samples differently, as OpenAI's API does.
        seed: c.seed.unwrap_or_else(crate::llm::sampling::random_seed),
    };
    params.validate().map_err(bad)?;
    let chat = matches!(input, Input::Chat(_));
    let logprobs = logprobs(c, chat).map_err(|e| fail(StatusCode::BAD_REQUEST, e.message, Some(e.code)))?;
    let format = response_format(c).map_err(|e| fail(StatusCode::BAD_REQUEST, e.message, Some(e.code)))?;
    if !chat && tools(c).map_err(|e| fail(StatusCode::BAD_REQUEST, e.message, Some(e.code)))?.is_some() {
        return Err(bad("tools and tool_choice are chat parameters".into()));
    }
    // Tags that are control tokens are referenced by id in a grammar (no text makes them).
    let control = |t: &str| st.tokenizer.token_id(t).filter(|&id| st.tokenizer.is_control(id));
    let forced = tool_req.as_ref().and_then(|t| t.grammar(&control));
    let (wanted, what) = match (format, forced) {
        (Some(_), Some(_)) => {
            return Err(bad("response_format cannot be combined with a required tool call (tool_choice)".into()))
        }
        (Some(g), None) => (Some(g), "response_format"),
        (None, Some(g)) => (Some(g), "tools"),
        (None, None) => (None, ""),
    };
    // `tool_choice: auto`: free text, but a call the model opens (its opening tag, one
    // token: `<tool_call>`, `<｜tool▁calls▁begin｜>`) follows the tools' schemas from there on.
    let trigger = tool_req.as_ref().and_then(|t| st.tokenizer.token_id(t.syntax.open()));
    let (wanted, what, lazy) = match (wanted, tool_req.as_ref(), trigger, &st.grammar) {
        (None, Some(t), Some(trigger), Some(_)) if t.choice == crate::llm::tools::ToolChoice::Auto => {
            let g = t.syntax.call_grammar(&t.defs, None, t.parallel, &control);
            (Some(g), "tools", Some(trigger))
        }
        (w, ..) => (w, what, None),
    };
    let compiler = match (&wanted, &st.grammar) {
        (None, _) => None,
        (Some(_), Some(g)) => Some(g.clone()),
        (Some(_), None) => {
            return Err(fail(
                StatusCode::BAD_REQUEST,
                "response_format / tool_choice: this model has no end token, so a constrained answer could not end",
                Some("unsupported_parameter"),
            ))
        }
    };
    // Tokenizing and compiling a grammar are CPU work (milliseconds to seconds for a long
    // prompt or a large schema): off the async threads.
    let tok = st.tokenizer.clone();
    let (prompt, grammar) = tokio::task::spawn_blocking(move || {
        let grammar = match (compiler, wanted) {
            (Some(c), Some(g)) => Some(
                match lazy {
                    Some(t) => c.compile_lazy(&g, t),
                    None => c.compile(&g),
                }
                .map_err(|e| format!("{what}: {e}"))?,
            ),
            _ => None,
        };
        let prompt = match input {
            Input::Raw(text) => tok.encode_completion(&text),
            Input::Chat(p) => tok.encode_prompt(&p),
        }
        .map_err(|e| format!("cannot tokenize the prompt: {e}"))?;
        Ok::<_, String>((prompt, grammar))
    })
    .await
    .map_err(|e| fail(StatusCode::INTERNAL_SERVER_ERROR, format!("tokenizer task failed: {e}"), None))?
    .map_err(bad)?;
    if prompt.is_empty() {
        return Err(bad("the prompt is empty".into()));
    }
    if prompt.len() >= st.context {
        return Err(fail(
            StatusCode::BAD_REQUEST,
            format!(
                "the prompt has {} tokens; the context length is {} (prompt and answer must fit)",
                prompt.len(),
                st.context
            ),
            Some("context_length_exceeded"),
        ));
    }
    let asked = c.max_completion_tokens.or(c.max_tokens).unwrap_or(st.max_tokens);
    if asked == 0 {
        return Err(bad("max_tokens must be at least 1".into()));
    }
    let max_tokens = asked.min(st.max_tokens).min(st.context - prompt.len());
    let stop = match &c.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) => v.clone(),
    };
    if stop.len() > 4 || stop.iter().any(|s| s.is_empty()) {
        return Err(bad("stop takes up to 4 non-empty strings".into()));
    }
    Ok(Prepared {
        prompt,
        params,
        max_tokens,
        stop,
        stream: c.stream,
        include_usage: include_usage(c),
        grammar,
        logprobs,
        split: SplitSpec { tools: tool_req.map(|t| t.syntax), ..SplitSpec::default() },
    })
}

async fn chat(State(st): State<Arc<AppState>>, req: Request) -> Response {
    let body: ChatRequest = match read_json(&st, req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    match prepare_chat(&st, &body).await {
        Ok(p) => respond(st, p, true).await,
        Err(r) => r,
    }
}

/// A chat request checked, rendered and tokenized (shared by `/v1/chat/completions` and
/// `/v1/responses`).
#[allow(clippy::result_large_err)]
async fn prepare_chat(st: &Arc<AppState>, body: &ChatRequest) -> Result<Prepared, Response> {
    let messages =
        parse_messages(&body.messages).map_err(|e| fail(StatusCode::BAD_REQUEST, e, Some("invalid_value")))?;
    if messages.is_empty() {
        return Err(fail(StatusCode::BAD_REQUEST, "messages is empty", None));
    }
    let mut tool_req = tools(&body.common).map_err(|e| fail(StatusCode::BAD_REQUEST, e.message, Some(e.code)))?;
    if let Some(t) = tool_req.as_mut() {
        // The format's call syntax, where the vocabulary has its tags as tokens.
        let syntax =
            st.format.tool_syntax().filter(|s| s.tags().iter().all(|tag| st.tokenizer.token_id(tag).is_some()));
        let Some(syntax) = syntax else {
            let msg = "tools: this model's chat format has no tool calling here (Qwen3's ChatML and DeepSeek V3/R1 \
                       with their tool tokens have)";
            return Err(fail(StatusCode::BAD_REQUEST, msg, Some("unsupported_parameter")));
        };
        t.syntax = syntax;
    }
    // A constrained answer starts under its grammar at once: no thinking block before it.
    let constrained = matches!(response_format(&body.common), Ok(Some(_)))
        || tool_req.as_ref().is_some_and(|t| t.choice != crate::llm::tools::ToolChoice::Auto);
    let think = body
        .enable_thinking
        .or_else(|| body.chat_template_kwargs.as_ref()?.get("enable_thinking")?.as_bool())
        .unwrap_or(st.think)
        && !constrained;
    let reasoning = match body.reasoning_format.as_deref() {
        None => st.reasoning,
        Some("separate") => ReasoningFormat::Separate,
        Some("inline") => ReasoningFormat::Inline,
        Some(other) => {
            let msg = format!("reasoning_format must be `separate` or `inline`, got `{other}`");
            return Err(fail(StatusCode::BAD_REQUEST, msg, Some("invalid_value")));
        }
    };
    let raw_tools = tool_req.as_ref().map_or(&[][..], |t| &t.raw[..]);
    let prompt = st.format.prompt_with_tools(&messages, raw_tools, think);
    let mut p = prepare(st, Input::Chat(prompt), &body.common, tool_req).await?;
    p.split.separate_reasoning = reasoning == ReasoningFormat::Separate;
    p.split.opened_reasoning = st.format.opens_reasoning(think);
    p.split.tags = st.format.reasoning_tags();
    Ok(p)
}

async fn completions(State(st): State<Arc<AppState>>, req: Request) -> Response {
    let body: CompletionRequest = match read_json(&st, req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let text = match &body.prompt {
        Value::String(s) => s.clone(),
        Value::Array(a) if a.len() == 1 && a[0].is_string() => a[0].as_str().unwrap_or_default().to_string(),
        _ => return fail(StatusCode::BAD_REQUEST, "prompt must be a string (or an array of one string)", None),
    };
    let p = match prepare(&st, Input::Raw(text), &body.common, None).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    respond(st, p, false).await
}

/// Queues the job and answers with the whole completion or a stream of chunks.
async fn respond(st: Arc<AppState>, mut p: Prepared, chat: bool) -> Response {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let job = p.take_job(tx);
    if let Err(e) = st.worker.submit(job) {
        return fail(StatusCode::SERVICE_UNAVAILABLE, e, None);
    }
    let n = st.counter.fetch_add(1, Ordering::Relaxed);
    let id = if chat { format!("chatcmpl-{n}") } else { format!("cmpl-{n}") };
    let (created, model) = (now(), st.model_id.clone());
    let want_logprobs = p.logprobs.is_some();
    if !p.stream {
        let mut text = String::new();
        let mut lps = Vec::new();
        while let Some(ev) = rx.recv().await {
            match ev {
                Event::Text(t) => text.push_str(&t),
                Event::Logprobs(l) => lps.extend(l),
                Event::Error(e) => return fail(StatusCode::INTERNAL_SERVER_ERROR, e, None),
                Event::Done { finish, prompt_tokens, completion_tokens, reasoning_tokens } => {
                    let usage = Usage::new(prompt_tokens, completion_tokens, chat.then_some(reasoning_tokens));
                    let logprobs = match (want_logprobs, chat) {
                        (false, _) => Value::Null,
                        (true, true) => chat_logprobs(&lps),
                        (true, false) => completion_logprobs(&lps, 0),
                    };
                    let choice = if chat {
                        let mut message = ChatSplit::new(p.split, &n.to_string()).message(&text);
                        message.insert("role".into(), json!("assistant"));
                        let finish = if message.contains_key("tool_calls") { "tool_calls" } else { finish };
                        json!({ "index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish })
                    } else {
                        json!({ "index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish })
                    };
                    let object = if chat { "chat.completion" } else { "text_completion" };
                    return Json(json!({
                        "id": id, "object": object, "created": created, "model": model,
                        "choices": [choice], "usage": usage
                    }))
                    .into_response();
                }
            }
        }
        return fail(StatusCode::INTERNAL_SERVER_ERROR, "the model thread dropped the request", None);
    }
    // Streaming: one chunk per piece of text, a last chunk with the finish reason, [DONE].
    let object = if chat { "chat.completion.chunk" } else { "text_completion" };
    let (include_usage, id_usage, model_usage) = (p.include_usage, id.clone(), model.clone());
    // Log-probabilities ride on the chunk whose text their tokens start in; a completion's
    // text offsets continue across chunks.
    let mut offset = 0usize;
    let mut first = true;
    let mut chunk = move |delta: Delta, finish: Option<&str>, lps: &[TokenLogprob]| -> String {
        let logprobs = match (want_logprobs, chat) {
            (false, _) => Value::Null,
            (true, true) => chat_logprobs(lps),
            (true, false) => {
                let v = completion_logprobs(lps, offset);
                offset += lps.iter().map(|t| t.bytes.len()).sum::<usize>();
                v
            }
        };
        let choice = if chat {
            let mut d = delta.fields();
            if std::mem::take(&mut first) {
                d.insert("role".into(), json!("assistant"));
            }
            json!({ "index": 0, "delta": d, "logprobs": logprobs, "finish_reason": finish })
        } else {
            json!({ "index": 0, "text": delta.content, "logprobs": logprobs, "finish_reason": finish })
        };
        json!({ "id": id, "object": object, "created": created, "model": model, "choices": [choice] }).to_string()
    };
    let mut lps: Vec<TokenLogprob> = Vec::new();
    // Chat answers go through the reasoning and tool-call splitters; completions do not.
    let mut split = chat.then(|| ChatSplit::new(p.split, &n.to_string()));
    let mut done = false;
    let mut pending: std::collections::VecDeque<String> = std::collections::VecDeque::new();
    let stream = futures_util::stream::poll_fn(move |cx| {
        use std::task::Poll;
        loop {
            if let Some(data) = pending.pop_front() {
                return Poll::Ready(Some(Ok::<_, std::convert::Infallible>(SseEvent::default().data(data))));
            }
            if done {
                return Poll::Ready(None);
            }
            match rx.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Event::Logprobs(l))) => lps.extend(l),
                Poll::Ready(Some(Event::Text(t))) => {
                    let delta = match split.as_mut() {
                        Some(s) => s.push(&t),
                        None => Delta { content: t, ..Delta::default() },
                    };
                    // Text held back by a splitter (a cut tag, an open call) waits, with its
                    // logprobs.
                    if !delta.is_empty() {
                        pending.push_back(chunk(delta, None, &lps));
                        lps.clear();
                    }
                }
                Poll::Ready(Some(Event::Done { finish, prompt_tokens, completion_tokens, reasoning_tokens })) => {
                    let mut finish = finish;
                    if let Some(s) = split.as_mut() {
                        let delta = s.finish();
                        if !delta.is_empty() {
                            pending.push_back(chunk(delta, None, &lps));
                            lps.clear();
                        }
                        if s.made_calls() {
                            finish = "tool_calls";
                        }
                    }
                    pending.push_back(chunk(Delta::default(), Some(finish), &lps));
                    lps.clear();
                    if include_usage {
                        // As OpenAI sends it: a last chunk with no choices and the counts.
                        let usage = Usage::new(prompt_tokens, completion_tokens, chat.then_some(reasoning_tokens));
                        pending.push_back(
                            json!({ "id": id_usage, "object": object, "created": created, "model": model_usage,
                                    "choices": [], "usage": usage })
                            .to_string(),
                        );
                    }
                    pending.push_back("[DONE]".to_string());
                    done = true;
                }
                Poll::Ready(Some(Event::Error(e))) => {
                    pending.push_back(error_body(&e, "server_error", None).to_string());
                    done = true;
                }
                Poll::Ready(None) => {
                    pending.push_back(
                        error_body("the model thread dropped the request", "server_error", None).to_string(),
                    );
                    done = true;
                }
            }
        }
    });
    Sse::new(stream).into_response()
}

/// Serves the API on `listener` until Ctrl-C or SIGTERM, with the limits of `opts`
/// (connections, header/write timeouts, a bounded graceful shutdown).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    opts: http::HttpOptions,
) -> std::io::Result<()> {
    http::serve_http(listener, router(state), opts, shutdown_signal()).await
}

/// Completes on Ctrl-C (SIGINT) or, on Unix, SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    {
        let term = async {
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term => {}
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await;
}
