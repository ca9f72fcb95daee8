//! The OpenAI wire format: request bodies (fields outside the API ignored; API parameters
//! this server cannot honour refused by name), responses, stream chunks and errors, for
//! `/v1/chat/completions`, `/v1/completions` and `/v1/models`.

use super::worker::TokenLogprob;
use crate::llm::chat::{py_json, Message, Role, ToolCall};
use crate::llm::grammar::Grammar;
use crate::llm::sampling::MAX_LOGIT_BIAS;
use crate::llm::tools::{ToolChoice, ToolDef, ToolSyntax};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A chat message as sent by clients.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    /// `system` (or `developer`, its newer name), `user`, `assistant` or `tool`.
    pub role: String,
    /// The text (a string, or an array of `{type: "text", text}` parts; `null` for an
    /// assistant message that only calls tools).
    #[serde(default)]
    pub content: Value,
    /// An assistant message's calls: `[{id, type: "function", function: {name, arguments}}]`.
    pub tool_calls: Option<Value>,
    /// A tool message: the call it answers.
    pub tool_call_id: Option<String>,
}

/// Most tool calls in one assistant message, and most tools in a request.
pub const MAX_TOOLS: usize = 128;

/// The conversation as the chat template takes it, or a message naming the bad entry.
pub fn parse_messages(msgs: &[ChatMessage]) -> Result<Vec<Message>, String> {
    let mut out = Vec::with_capacity(msgs.len());
    for (i, m) in msgs.iter().enumerate() {
        let role = Role::parse(&m.role).ok_or_else(|| format!("messages[{i}]: unknown role `{}`", m.role))?;
        let text = content_text(&m.content).ok_or_else(|| format!("messages[{i}]: content must be text"))?;
        let mut msg = Message::new(role, text);
        if let Some(calls) = m.tool_calls.as_ref().filter(|v| !v.is_null()) {
            if role != Role::Assistant {
                return Err(format!("messages[{i}]: only assistant messages have tool_calls"));
            }
            let calls = calls.as_array().ok_or_else(|| format!("messages[{i}].tool_calls must be an array"))?;
            if calls.len() > MAX_TOOLS {
                return Err(format!("messages[{i}] has {} tool calls; at most {MAX_TOOLS}", calls.len()));
            }
            for (k, c) in calls.iter().enumerate() {
                let f = c.get("function").unwrap_or(c);
                let name = f
                    .get("name")
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("messages[{i}].tool_calls[{k}].function.name must be a string"))?;
                let arguments = match f.get("arguments") {
                    Some(Value::String(s)) => s.clone(),
                    Some(v @ Value::Object(_)) => py_json(v),
                    None | Some(Value::Null) => "{}".to_string(),
                    Some(_) => {
                        return Err(format!(
                            "messages[{i}].tool_calls[{k}].function.arguments must be a JSON string or object"
                        ))
                    }
                };
                msg.tool_calls.push(ToolCall { name: name.to_string(), arguments });
            }
        }
        out.push(msg);
    }
    Ok(out)
}

/// `stop`: one string or several.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One stop string.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// Sampling and length settings shared by both endpoints.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Common {
    /// Model id: the served model's id (any other is a 404, as OpenAI answers).
    pub model: Option<String>,
    /// Most tokens to generate.
    pub max_tokens: Option<usize>,
    /// Newer name of `max_tokens` (chat).
    pub max_completion_tokens: Option<usize>,
    /// Sampling temperature (default 1 as in the OpenAI API; 0 is greedy).
    pub temperature: Option<f32>,
    /// Nucleus mass.
    pub top_p: Option<f32>,
    /// Keep the k most likely tokens (extension, as in vLLM/llama.cpp's server).
    pub top_k: Option<usize>,
    /// Min-p filter (extension).
    pub min_p: Option<f32>,
    /// Repetition penalty (extension).
    pub repetition_penalty: Option<f32>,
    /// RNG seed.
    pub seed: Option<u64>,
    /// Stream server-sent events.
    #[serde(default)]
    pub stream: bool,
    /// Stop strings.
    pub stop: Option<Stop>,
    /// Number of choices; only 1 is supported.
    pub n: Option<usize>,
    /// Streaming options: `include_usage` adds a last chunk with the token counts.
    pub stream_options: Option<Value>,
    /// Penalty once per token already in the window (-2..2).
    pub presence_penalty: Option<f32>,
    /// Penalty per occurrence in the window (-2..2).
    pub frequency_penalty: Option<f32>,
    /// `{"token id": bias}` with biases in -100..100.
    pub logit_bias: Option<Value>,
    /// Chat: function tools, `[{type: "function", function: {name, description, parameters}}]`.
    pub tools: Option<Value>,
    /// Chat: `none`, `auto` (the default with tools), `required`, or
    /// `{type: "function", function: {name}}`.
    pub tool_choice: Option<Value>,
    /// Chat: whether a forced answer may hold several calls (default true).
    pub parallel_tool_calls: Option<bool>,
    /// Log-probabilities: a bool on chat, the number of alternatives (0..=5) on completions.
    pub logprobs: Option<Value>,
    /// Chat: the number of most likely alternatives per token (0..=20; needs `logprobs`).
    pub top_logprobs: Option<Value>,
    /// Structured output: `{"type": "text"}` (the default), `{"type": "json_object"}` or
    /// `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`.
    pub response_format: Option<Value>,
    /// Parameters of the OpenAI API this server cannot honour yet. They are read only to be
    /// refused with a 400 that names them ([`check_common`]), never silently ignored.
    #[serde(flatten)]
    pub unsupported: Unsupported,
}

/// The OpenAI request parameters this server does not implement (the legacy function
/// calling and the completions-only extras): present with an effect, each is a
/// 400 naming it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Unsupported {
    /// The legacy form of `tools`.
    pub functions: Option<Value>,
    /// The legacy form of `tool_choice`.
    pub function_call: Option<Value>,
    /// Completions: echo the prompt.
    pub echo: Option<bool>,
    /// Completions: server-side best of n.
    pub best_of: Option<usize>,
    /// Completions: text after the insertion point.
    pub suffix: Option<Value>,
}

/// Why a request's parameters were refused: the message names the parameter; `code` is the
/// OpenAI error code (`invalid_value` for a value out of range, `unsupported_parameter` for
/// a parameter this server cannot honour).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamError {
    /// What is wrong, naming the parameter.
    pub message: String,
    /// The error code.
    pub code: &'static str,
}

/// Checks the ranges the OpenAI API documents and refuses what this server cannot do.
pub fn check_common(c: &Common) -> Result<(), ParamError> {
    let invalid = |message: String| Err(ParamError { message, code: "invalid_value" });
    let range = |name: &str, v: Option<f32>, lo: f32, hi: f32| match v {
        Some(x) if !(x >= lo && x <= hi) => invalid(format!("{name} must be between {lo} and {hi}, got {x}")),
        _ => Ok(()),
    };
    range("temperature", c.temperature, 0.0, 2.0)?;
    range("top_p", c.top_p, 0.0, 1.0)?;
    let u = &c.unsupported;
    range("presence_penalty", c.presence_penalty, -2.0, 2.0)?;
    range("frequency_penalty", c.frequency_penalty, -2.0, 2.0)?;
    if let Some(opts) = &c.stream_options {
        let Some(map) = opts.as_object() else {
            return invalid("stream_options must be an object".into());
        };
        if !c.stream {
            return invalid("stream_options is only allowed with stream: true".into());
        }
        for (k, v) in map {
            if k != "include_usage" {
                return invalid(format!("stream_options.{k} is not supported by this server"));
            }
            if !v.is_boolean() {
                return invalid("stream_options.include_usage must be a boolean".into());
            }
        }
    }
    let refuse = |name: &str| {
        Err(ParamError { message: format!("{name} is not supported by this server"), code: "unsupported_parameter" })
    };
    if u.functions.is_some() || u.function_call.is_some() {
        return refuse("functions / function_call (the legacy form of tools; send tools and tool_choice)");
    }
    if u.echo == Some(true) {
        return refuse("echo");
    }
    if u.best_of.is_some_and(|b| b != 1) {
        return refuse("best_of");
    }
    if u.suffix.as_ref().is_some_and(|v| !v.is_null()) {
        return refuse("suffix");
    }
    Ok(())
}

/// The request's `logit_bias` as `(token, bias)` pairs, checked: an object whose keys are
/// token ids below `vocab` and whose values are numbers in -100..100, at most
/// [`MAX_LOGIT_BIAS`] entries.
pub fn logit_bias(c: &Common, vocab: usize) -> Result<Vec<(u32, f32)>, ParamError> {
    let invalid = |message: String| ParamError { message, code: "invalid_value" };
    let Some(v) = c.logit_bias.as_ref().filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let map = v.as_object().ok_or_else(|| invalid("logit_bias must be an object of token id -> bias".into()))?;
    if map.len() > MAX_LOGIT_BIAS {
        return Err(invalid(format!("logit_bias has {} entries; at most {MAX_LOGIT_BIAS}", map.len())));
    }
    let mut out = Vec::with_capacity(map.len());
    for (k, b) in map {
        let id = k
            .parse::<u32>()
            .ok()
            .filter(|&t| (t as usize) < vocab)
            .ok_or_else(|| invalid(format!("logit_bias key `{k}` is not a token id of this model (0..{vocab})")))?;
        let bias = b
            .as_f64()
            .filter(|b| (-100.0..=100.0).contains(b))
            .ok_or_else(|| invalid(format!("logit_bias[{k}] must be a number in [-100, 100], got {b}")))?;
        out.push((id, bias as f32));
    }
    Ok(out)
}

/// A request's tools, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRequest {
    /// The tools as the client sent them (what the chat template renders).
    pub raw: Vec<Value>,
    /// Their names and argument schemas.
    pub defs: Vec<ToolDef>,
    /// What the answer must call.
    pub choice: ToolChoice,
    /// Whether a forced answer may hold several calls.
    pub parallel: bool,
    /// How the model writes calls (its chat format's; Qwen3's hermes blocks until set).
    pub syntax: ToolSyntax,
}

impl ToolRequest {
    /// The grammar that forces the calls `choice` requires (`None` for `auto`); `control`
    /// gives the ids of the syntax's tags that are control tokens.
    pub fn grammar(&self, control: &dyn Fn(&str) -> Option<u32>) -> Option<Grammar> {
        match &self.choice {
            ToolChoice::Auto => None,
            ToolChoice::Required => Some(self.syntax.call_grammar(&self.defs, None, self.parallel, control)),
            ToolChoice::Named(n) => Some(self.syntax.call_grammar(&self.defs, Some(n), self.parallel, control)),
        }
    }
}

/// The request's tools: `None` without tools or with `tool_choice: "none"` (the tools are
/// then not shown to the model); otherwise each must be a function with a unique non-empty
/// name and an object schema (default `{"type": "object"}`), at most [`MAX_TOOLS`], and a
/// named `tool_choice` must name one of them.
pub fn tools(c: &Common) -> Result<Option<ToolRequest>, ParamError> {
    let invalid = |message: String| ParamError { message, code: "invalid_value" };
    let list = match c.tools.as_ref().filter(|v| !v.is_null()) {
        None => Vec::new(),
        Some(Value::Array(a)) => a.clone(),
        Some(_) => return Err(invalid("tools must be an array of function tools".into())),
    };
    if list.len() > MAX_TOOLS {
        return Err(invalid(format!("tools has {} entries; at most {MAX_TOOLS}", list.len())));
    }
    let mut defs: Vec<ToolDef> = Vec::with_capacity(list.len());
    for (i, t) in list.iter().enumerate() {
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(invalid(format!("tools[{i}].type must be `function`")));
        }
        let f = t.get("function").and_then(Value::as_object);
        let name = f.and_then(|f| f.get("name")).and_then(Value::as_str).filter(|n| !n.is_empty());
        let Some(name) = name else {
            return Err(invalid(format!("tools[{i}].function.name must be a non-empty string")));
        };
        if defs.iter().any(|d| d.name == name) {
            return Err(invalid(format!("tools[{i}]: the name `{name}` is used twice")));
        }
        let parameters = match f.and_then(|f| f.get("parameters")) {
            None | Some(Value::Null) => json!({ "type": "object" }),
            Some(p @ Value::Object(_)) => p.clone(),
            Some(_) => return Err(invalid(format!("tools[{i}].function.parameters must be a JSON schema object"))),
        };
        defs.push(ToolDef { name: name.to_string(), parameters });
    }
    let choice = match c.tool_choice.as_ref().filter(|v| !v.is_null()) {
        None => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => return Ok(None),
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(invalid(format!("tool_choice `{other}` is not one of none, auto, required")));
            }
        },
        Some(v) => {
            let name = v.get("function").and_then(|f| f.get("name")).and_then(Value::as_str);
            match name {
                Some(n) if defs.iter().any(|d| d.name == n) => ToolChoice::Named(n.to_string()),
                Some(n) => return Err(invalid(format!("tool_choice names `{n}`, which is not in tools"))),
                None => {
                    return Err(invalid("tool_choice must be a string or {type: function, function: {name}}".into()))
                }
            }
        }
    };
    if defs.is_empty() {
        if choice != ToolChoice::Auto {
            return Err(invalid("tool_choice needs tools".into()));
        }
        return Ok(None);
    }
    Ok(Some(ToolRequest {
        raw: list,
        defs,
        choice,
        parallel: c.parallel_tool_calls.unwrap_or(true),
        syntax: ToolSyntax::Hermes,
    }))
}

/// What `logprobs` / `top_logprobs` ask for: `None` (off) or `Some(n)`: each token's
/// log-probability and the `n` most likely alternatives. Chat takes `logprobs: bool` and
/// `top_logprobs` 0..=20 (which needs `logprobs: true`); completions take `logprobs` as the
/// count, 0..=5, as OpenAI's API does.
pub fn logprobs(c: &Common, chat: bool) -> Result<Option<usize>, ParamError> {
    let invalid = |message: String| ParamError { message, code: "invalid_value" };
    let lp = c.logprobs.as_ref().filter(|v| !v.is_null());
    let top = c.top_logprobs.as_ref().filter(|v| !v.is_null());
    if !chat {
        if top.is_some() {
            return Err(invalid("top_logprobs is a chat parameter; completions take logprobs: <count>".into()));
        }
        return match lp {
            None | Some(Value::Bool(false)) => Ok(None),
            Some(v) => match v.as_u64().filter(|&n| n <= 5) {
                Some(n) => Ok(Some(n as usize)),
                None => Err(invalid(format!("logprobs must be an integer between 0 and 5, got {v}"))),
            },
        };
    }
    let on = match lp {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(invalid(format!("logprobs must be a boolean, got {v}"))),
    };
    let n = match top {
        None => 0,
        Some(v) => v
            .as_u64()
            .filter(|&n| n <= 20)
            .ok_or_else(|| invalid(format!("top_logprobs must be an integer between 0 and 20, got {v}")))?
            as usize,
    };
    if n > 0 && !on {
        return Err(invalid("top_logprobs needs logprobs: true".into()));
    }
    Ok(on.then_some(n))
}

/// A chat choice's `logprobs`: `{"content": [{token, logprob, bytes, top_logprobs}]}`.
pub fn chat_logprobs(lps: &[TokenLogprob]) -> Value {
    let one = |bytes: &[u8], logprob: f32| json!({ "token": String::from_utf8_lossy(bytes), "logprob": logprob, "bytes": bytes });
    let content: Vec<Value> = lps
        .iter()
        .map(|t| {
            let mut v = one(&t.bytes, t.logprob);
            v["top_logprobs"] = t.top.iter().map(|(b, l)| one(b, *l)).collect();
            v
        })
        .collect();
    json!({ "content": content, "refusal": Value::Null })
}

/// A completion choice's legacy `logprobs`: parallel `tokens`, `token_logprobs`,
/// `top_logprobs` (token -> logprob maps) and `text_offset` (byte offsets in the answer,
/// counted from `offset`).
pub fn completion_logprobs(lps: &[TokenLogprob], offset: usize) -> Value {
    let mut at = offset;
    let mut text_offset = Vec::with_capacity(lps.len());
    for t in lps {
        text_offset.push(at);
        at += t.bytes.len();
    }
    json!({
        "tokens": lps.iter().map(|t| String::from_utf8_lossy(&t.bytes).into_owned()).collect::<Vec<_>>(),
        "token_logprobs": lps.iter().map(|t| t.logprob).collect::<Vec<_>>(),
        "top_logprobs": lps.iter().map(|t| {
            t.top.iter().map(|(b, l)| (String::from_utf8_lossy(b).into_owned(), json!(l))).collect::<serde_json::Map<_, _>>()
        }).collect::<Vec<_>>(),
        "text_offset": text_offset,
    })
}

/// The grammar `response_format` asks for: `None` for plain text, a JSON schema for
/// `json_object` (any object) and `json_schema` (its `schema`; absent: any JSON value).
pub fn response_format(c: &Common) -> Result<Option<Grammar>, ParamError> {
    let invalid = |message: String| ParamError { message, code: "invalid_value" };
    let Some(f) = c.response_format.as_ref().filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    match f.get("type").and_then(Value::as_str) {
        Some("text") => Ok(None),
        Some("json_object") => Ok(Some(Grammar::json_object())),
        Some("json_schema") => {
            let spec = f
                .get("json_schema")
                .and_then(Value::as_object)
                .ok_or_else(|| invalid("response_format.json_schema must be an object".into()))?;
            if !spec.get("name").is_some_and(Value::is_string) {
                return Err(invalid("response_format.json_schema.name must be a string".into()));
            }
            match spec.get("schema") {
                None | Some(Value::Null) => Ok(Some(Grammar::JsonSchema(json!({})))),
                Some(s @ (Value::Object(_) | Value::Bool(true))) => Ok(Some(Grammar::JsonSchema(s.clone()))),
                Some(_) => Err(invalid("response_format.json_schema.schema must be a JSON schema object".into())),
            }
        }
        Some(other) => {
            Err(invalid(format!("response_format.type `{other}` is not one of text, json_object, json_schema")))
        }
        None => Err(invalid("response_format must be an object with a type".into())),
    }
}

/// Whether the request asks for a last streamed chunk with the token counts.
pub fn include_usage(c: &Common) -> bool {
    c.stream_options.as_ref().and_then(|o| o.get("include_usage")).and_then(Value::as_bool).unwrap_or(false)
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<ChatMessage>,
    /// Settings.
    #[serde(flatten)]
    pub common: Common,
    /// Qwen3's thinking switch (extension, as vLLM's `chat_template_kwargs`).
    pub chat_template_kwargs: Option<Value>,
    /// Shorthand for `chat_template_kwargs.enable_thinking`.
    pub enable_thinking: Option<bool>,
    /// Where the `<think>` block goes: `separate` (`reasoning_content`) or `inline` (in
    /// `content`); default: the server's `--reasoning-format` (extension, as llama-server's).
    pub reasoning_format: Option<String>,
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    /// The text to continue (a string, or an array holding one string).
    pub prompt: Value,
    /// Settings.
    #[serde(flatten)]
    pub common: Common,
}

/// Token counts of one request.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Usage {
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Tokens generated.
    pub completion_tokens: usize,
    /// Their sum.
    pub total_tokens: usize,
    /// Chat and Responses: `{"reasoning_tokens": n}`, the generated tokens of the `<think>`
    /// block (Responses reports it as `output_tokens_details`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<CompletionDetails>,
}

/// The break-down of a chat answer's tokens, as OpenAI reports it.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct CompletionDetails {
    /// Tokens of the answer's `<think>` block (tags included).
    pub reasoning_tokens: usize,
}

impl Usage {
    /// The counts of one request; `reasoning` (the think block's tokens) is reported for chat
    /// and Responses, not for completions.
    pub fn new(prompt_tokens: usize, completion_tokens: usize, reasoning: Option<usize>) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            completion_tokens_details: reasoning.map(|reasoning_tokens| CompletionDetails { reasoning_tokens }),
        }
    }
}

/// An OpenAI-style error body: `{"error": {message, type, param, code}}`.
pub fn error_body(message: &str, kind: &str, code: Option<&str>) -> Value {
    json!({ "error": { "message": message, "type": kind, "param": Value::Null, "code": code } })
}

/// The text of a message's `content` (a string or text parts); `None` if it is neither.
pub fn content_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let mut out = String::new();
            for p in parts {
                match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                    (Some("text"), Some(t)) => out.push_str(t),
                    _ => return None,
                }
            }
            Some(out)
        }
        Value::Null => Some(String::new()),
        _ => None,
    }
}
