//! The OpenAI wire format: request bodies (unknown fields ignored), responses, stream chunks
//! and errors, for `/v1/chat/completions`, `/v1/completions` and `/v1/models`.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A chat message as sent by clients.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text (a string, or an array of `{type: "text", text}` parts).
    pub content: Value,
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
    /// Model id (accepted and echoed; one model is served).
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
