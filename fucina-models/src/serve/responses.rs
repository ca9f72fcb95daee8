//! `POST /v1/responses`, OpenAI's Responses API, on the chat pipeline: `input` (a string or
//! message / `function_call` / `function_call_output` items) and `instructions` become chat
//! messages, `text.format` becomes `response_format`, the flat function tools become chat
//! tools; the answer comes back as `output` items (`reasoning`, `message` with
//! `output_text`, `function_call`), whole or as the API's typed stream events. A finished
//! response is kept ([`super::stored`]) so that `previous_response_id` can continue it.

use super::api::{ChatRequest, Usage};
use super::output::{ChatSplit, Delta, SplitSpec};
use super::stored::MAX_STORED;
use super::worker::Event;
use super::{fail, now, prepare_chat, read_json, AppState};
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Map, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The text of an input message's `content`: a string or `input_text` / `output_text`
/// parts.
fn input_text(v: &Value, at: &str) -> Result<String, String> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => parts
            .iter()
            .enumerate()
            .map(|(k, p)| match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                (Some("input_text" | "output_text" | "text"), Some(t)) => Ok(t.to_string()),
                (t, _) => Err(format!("{at}.content[{k}]: part type {t:?} is not supported (text parts are)")),
            })
            .collect(),
        _ => Err(format!("{at}.content must be a string or an array of text parts")),
    }
}

/// Keys passed to the chat request as they are: OpenAI's, then the sampler extensions the
/// chat endpoint takes too (as llama.cpp's server does): penalties and logit_bias.
const PASSED: [&str; 11] = [
    "model",
    "temperature",
    "top_p",
    "stream",
    "parallel_tool_calls",
    "seed",
    "top_k",
    "min_p",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
];

/// The other request keys this endpoint acts on.
const HONOURED: [&str; 8] =
    ["input", "instructions", "max_output_tokens", "reasoning", "text", "tool_choice", "tools", "previous_response_id"];

/// Keys that change nothing an answer holds: bookkeeping for the caller or for OpenAI's
/// platform. Any key in neither list (nor `store`, a boolean) is a 400 naming it.
const NO_EFFECT: [&str; 5] = ["metadata", "user", "safety_identifier", "prompt_cache_key", "service_tier"];

/// The Responses request as a chat request (JSON in the chat endpoint's shape), or a 400
/// message and code.
fn to_chat(r: &Map<String, Value>, previous: Vec<Value>) -> Result<(Value, Vec<Value>), (String, &'static str)> {
    let invalid = |m: String| (m, "invalid_value");
    if r.get("conversation").is_some_and(|v| !v.is_null()) {
        let m = "conversation is not supported (previous_response_id is)".to_string();
        return Err((m, "unsupported_parameter"));
    }
    if r.get("background").and_then(Value::as_bool) == Some(true) {
        return Err(("background is not supported".into(), "unsupported_parameter"));
    }
    for (key, v) in r {
        let k = key.as_str();
        if v.is_null() || PASSED.contains(&k) || HONOURED.contains(&k) || NO_EFFECT.contains(&k) {
            continue;
        }
        let ok = match key.as_str() {
            // `truncation: auto` would drop input, which this server does not do (an
            // over-long input is a 400).
            "store" => v.is_boolean(),
            "truncation" => v == "disabled",
            // Logprobs are served by the chat endpoint, not in `output_text` here.
            "top_logprobs" => v.as_u64() == Some(0),
            "include" => v.as_array().is_some_and(Vec::is_empty),
            "stream_options" => v.as_object().is_some_and(|m| m.keys().all(|k| k == "include_obfuscation")),
            _ => false,
        };
        if !ok {
            let got = if v.is_object() || v.is_array() { String::new() } else { format!(" = {v}") };
            return Err((format!("{key}{got} is not supported by this server"), "unsupported_parameter"));
        }
    }
    // The conversation so far (what a stored response keeps), then this request's input.
    let mut messages: Vec<Value> = previous;
    match r.get("input") {
        Some(Value::String(s)) => messages.push(json!({ "role": "user", "content": s })),
        Some(Value::Array(items)) => {
            for (k, item) in items.iter().enumerate() {
                let at = format!("input[{k}]");
                match item.get("type").and_then(Value::as_str).unwrap_or("message") {
                    "message" => {
                        let role = item.get("role").and_then(Value::as_str).unwrap_or("user");
                        let text = input_text(item.get("content").unwrap_or(&Value::Null), &at).map_err(invalid)?;
                        messages.push(json!({ "role": role, "content": text }));
                    }
                    "function_call" => {
                        let call = json!({ "id": item.get("call_id"), "type": "function",
                                           "function": { "name": item.get("name"), "arguments": item.get("arguments") } });
                        // Calls that follow an assistant message (or each other) join it.
                        match messages.last_mut() {
                            Some(m) if m["role"] == "assistant" => {
                                if !m["tool_calls"].is_array() {
                                    m["tool_calls"] = json!([]);
                                }
                                if let Some(a) = m["tool_calls"].as_array_mut() {
                                    a.push(call);
                                }
                            }
                            _ => messages
                                .push(json!({ "role": "assistant", "content": Value::Null, "tool_calls": [call] })),
                        }
                    }
                    "function_call_output" => {
                        let output = match item.get("output") {
                            Some(Value::String(s)) => s.clone(),
                            Some(v) => input_text(v, &at).map_err(invalid)?,
                            None => return Err(invalid(format!("{at}.output is missing"))),
                        };
                        messages
                            .push(json!({ "role": "tool", "tool_call_id": item.get("call_id"), "content": output }));
                    }
                    // Reasoning from an earlier turn: the chat template drops it anyway.
                    "reasoning" => {}
                    other => {
                        return Err((format!("{at}: item type `{other}` is not supported"), "unsupported_parameter"))
                    }
                }
            }
        }
        _ => return Err(invalid("input must be a string or an array of items".into())),
    }
    let history = messages.clone();
    if let Some(i) = r.get("instructions").filter(|v| !v.is_null()) {
        let text = i.as_str().ok_or_else(|| invalid("instructions must be a string".into()))?;
        messages.insert(0, json!({ "role": "system", "content": text }));
    }
    let mut chat = json!({ "messages": messages });
    let c = chat.as_object_mut().ok_or_else(|| invalid("internal: chat request".into()))?;
    for key in PASSED {
        if let Some(v) = r.get(key) {
            c.insert(key.into(), v.clone());
        }
    }
    if let Some(v) = r.get("max_output_tokens") {
        c.insert("max_tokens".into(), v.clone());
    }
    if let Some(t) = r.get("tools").filter(|v| !v.is_null()) {
        let list = t.as_array().ok_or_else(|| invalid("tools must be an array".into()))?;
        let mut out = Vec::with_capacity(list.len());
        for (k, tool) in list.iter().enumerate() {
            match tool.get("type").and_then(Value::as_str) {
                Some("function") => out.push(json!({ "type": "function", "function": {
                    "name": tool.get("name"), "description": tool.get("description"),
                    "parameters": tool.get("parameters") } })),
                other => {
                    let m = format!("tools[{k}]: tool type {other:?} is not supported (function tools are)");
                    return Err((m, "unsupported_parameter"));
                }
            }
        }
        c.insert("tools".into(), Value::Array(out));
    }
    if let Some(tc) = r.get("tool_choice").filter(|v| !v.is_null()) {
        let tc = match tc {
            Value::String(_) => tc.clone(),
            v if v.get("type").and_then(Value::as_str) == Some("function") => {
                json!({ "type": "function", "function": { "name": v.get("name") } })
            }
            v => return Err(invalid(format!("tool_choice {v} is not supported"))),
        };
        c.insert("tool_choice".into(), tc);
    }
    if let Some(f) = r.get("text").and_then(|t| t.get("format")).filter(|v| !v.is_null()) {
        let rf = match f.get("type").and_then(Value::as_str) {
            Some("json_schema") => json!({ "type": "json_schema", "json_schema": {
                "name": f.get("name").cloned().unwrap_or(json!("response")), "schema": f.get("schema"),
                "strict": f.get("strict") } }),
            _ => f.clone(),
        };
        c.insert("response_format".into(), rf);
    }
    // reasoning.effort `none`/`minimal`: answer without thinking.
    if let Some(e) = r.get("reasoning").and_then(|x| x.get("effort")).and_then(Value::as_str) {
        if matches!(e, "none" | "minimal") {
            c.insert("enable_thinking".into(), json!(false));
        }
    }
    c.insert("reasoning_format".into(), json!("separate"));
    Ok((chat, history))
}

/// The `output` items of a finished answer.
fn output_items(msg: &Map<String, Value>, id: &str) -> Vec<Value> {
    let mut out = Vec::new();
    if let Some(r) = msg.get("reasoning_content").and_then(Value::as_str) {
        out.push(reasoning_item(id, Some(r)));
    }
    let calls = msg.get("tool_calls").and_then(Value::as_array).cloned().unwrap_or_default();
    let text = msg.get("content").and_then(Value::as_str).unwrap_or("");
    if !text.is_empty() || calls.is_empty() {
        out.push(message_item(id, text, "completed"));
    }
    for c in &calls {
        out.push(call_item(c));
    }
    out
}

/// The answer as the assistant message a later turn's history holds.
fn assistant_message(content: &str, calls: Vec<Value>) -> Value {
    if calls.is_empty() {
        json!({ "role": "assistant", "content": content })
    } else {
        json!({ "role": "assistant", "content": (!content.is_empty()).then_some(content), "tool_calls": calls })
    }
}

/// A reasoning item: in progress (no text yet) or completed with its text.
fn reasoning_item(id: &str, text: Option<&str>) -> Value {
    let (status, content) = match text {
        None => ("in_progress", json!([])),
        Some(t) => ("completed", json!([{ "type": "reasoning_text", "text": t }])),
    };
    json!({ "type": "reasoning", "id": format!("rs_{id}"), "summary": [], "content": content, "status": status })
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    let content = if status == "in_progress" {
        json!([])
    } else {
        json!([{ "type": "output_text", "text": text, "annotations": [] }])
    };
    json!({ "type": "message", "id": format!("msg_{id}"), "status": status, "role": "assistant", "content": content })
}

fn call_item(c: &Value) -> Value {
    let id = c["id"].as_str().unwrap_or_default();
    json!({ "type": "function_call", "id": format!("fc_{id}"), "call_id": id, "name": c["function"]["name"],
            "arguments": c["function"]["arguments"], "status": "completed" })
}

/// The response object.
fn response_object(
    id: &str,
    model: &str,
    created: u64,
    status: &str,
    output: Vec<Value>,
    usage: Option<Usage>,
) -> Value {
    let incomplete = (status == "incomplete").then(|| json!({ "reason": "max_output_tokens" }));
    json!({
        "id": format!("resp_{id}"), "object": "response", "created_at": created, "status": status,
        "model": model, "output": output, "error": Value::Null, "incomplete_details": incomplete,
        "usage": usage.map(|u| json!({
            "input_tokens": u.prompt_tokens, "output_tokens": u.completion_tokens, "total_tokens": u.total_tokens,
            "input_tokens_details": { "cached_tokens": 0 },
            "output_tokens_details": {
                "reasoning_tokens": u.completion_tokens_details.map_or(0, |d| d.reasoning_tokens) } })),
    })
}

/// `GET /v1/responses/{id}`: a stored response's object, or a 404 `not_found`.
pub async fn retrieve(State(st): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    match st.stored.response(&id) {
        Some(r) => Json(r).into_response(),
        None => not_kept(&id),
    }
}

/// `DELETE /v1/responses/{id}`: forgets a stored response (`{"id", "object", "deleted"}`),
/// or a 404 `not_found`.
pub async fn delete(State(st): State<Arc<AppState>>, Path(id): Path<String>) -> Response {
    if st.stored.remove(&id) {
        Json(json!({ "id": id, "object": "response", "deleted": true })).into_response()
    } else {
        not_kept(&id)
    }
}

fn not_kept(id: &str) -> Response {
    let m = format!(
        "no response with id `{id}` is kept here (unknown, stored with store: false, deleted, or one of \
         the oldest past the last {MAX_STORED})"
    );
    fail(StatusCode::NOT_FOUND, m, Some("not_found"))
}

/// `POST /v1/responses`.
pub async fn responses(State(st): State<Arc<AppState>>, req: Request) -> Response {
    let body: Map<String, Value> = match read_json(&st, req).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let previous = match body.get("previous_response_id").filter(|v| !v.is_null()) {
        None => Vec::new(),
        Some(v) => match v.as_str().and_then(|id| st.stored.get(id)) {
            Some(m) => m,
            None => {
                let m = format!(
                    "previous_response_id {v} is not a response this server keeps (unknown, stored with \
                     store: false, or one of the oldest past the last {MAX_STORED})"
                );
                return fail(StatusCode::BAD_REQUEST, m, Some("previous_response_not_found"));
            }
        },
    };
    let (chat_json, mut history) = match to_chat(&body, previous) {
        Ok(c) => c,
        Err((m, code)) => return fail(StatusCode::BAD_REQUEST, m, Some(code)),
    };
    let store = body.get("store").and_then(Value::as_bool) != Some(false);
    let chat: ChatRequest = match serde_json::from_value(chat_json) {
        Ok(c) => c,
        Err(e) => return fail(StatusCode::BAD_REQUEST, format!("invalid request body: {e}"), Some("invalid_value")),
    };
    let mut p = match prepare_chat(&st, &chat).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let stream = p.stream;
    // The Responses API always returns reasoning as its own item.
    let split = SplitSpec { separate_reasoning: true, ..p.split };
    let tools = split.tools.is_some();
    p.logprobs = None;
    let job = p.take_job(tx);
    if let Err(e) = st.worker.submit(job) {
        return fail(StatusCode::SERVICE_UNAVAILABLE, e, None);
    }
    let id = st.counter.fetch_add(1, Ordering::Relaxed).to_string();
    let (created, model) = (now(), st.model_id.clone());
    if !stream {
        let mut text = String::new();
        while let Some(ev) = rx.recv().await {
            match ev {
                Event::Text(t) => text.push_str(&t),
                Event::Logprobs(_) => {}
                Event::Error(e) => return fail(StatusCode::INTERNAL_SERVER_ERROR, e, None),
                Event::Done { finish, prompt_tokens, completion_tokens, reasoning_tokens } => {
                    let msg = ChatSplit::new(split, &id).message(&text);
                    let status = if finish == "length" { "incomplete" } else { "completed" };
                    let usage = Usage::new(prompt_tokens, completion_tokens, Some(reasoning_tokens));
                    let r = response_object(&id, &model, created, status, output_items(&msg, &id), Some(usage));
                    if store {
                        history.push(assistant_message(
                            msg.get("content").and_then(Value::as_str).unwrap_or(""),
                            msg.get("tool_calls").and_then(Value::as_array).cloned().unwrap_or_default(),
                        ));
                        st.stored.put(format!("resp_{id}"), history, r.clone());
                    }
                    return Json(r).into_response();
                }
            }
        }
        return fail(StatusCode::INTERNAL_SERVER_ERROR, "the model thread dropped the request", None);
    }
    // Streaming: the API's typed events, each with a sequence number.
    let mut seq = 0u64;
    let mut event = move |kind: &str, mut v: Value| -> SseEvent {
        v["type"] = json!(kind);
        v["sequence_number"] = json!(seq);
        seq += 1;
        SseEvent::default().event(kind).data(v.to_string())
    };
    let mut pending: std::collections::VecDeque<SseEvent> = std::collections::VecDeque::new();
    let skeleton = response_object(&id, &model, created, "in_progress", Vec::new(), None);
    pending.push_back(event("response.created", json!({ "response": skeleton })));
    pending.push_back(event("response.in_progress", json!({ "response": skeleton })));
    let mut split = ChatSplit::new(split, &id);
    // Output items so far; the message item is open while text streams into it.
    let (mut items, mut reasoning, mut text) = (Vec::<Value>::new(), String::new(), String::new());
    let (mut open_message, mut open_reasoning): (Option<usize>, Option<usize>) = (None, None);
    let mut done = false;
    let (mid, rid) = (format!("msg_{id}"), format!("rs_{id}"));
    let mut chat_calls: Vec<Value> = Vec::new();
    let stream = futures_util::stream::poll_fn(move |cx| {
        use std::task::Poll;
        loop {
            if let Some(e) = pending.pop_front() {
                return Poll::Ready(Some(Ok::<_, std::convert::Infallible>(e)));
            }
            if done {
                return Poll::Ready(None);
            }
            let (delta, end) = match rx.poll_recv(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Event::Logprobs(_))) => continue,
                Poll::Ready(Some(Event::Text(t))) => (split.push(&t), None),
                Poll::Ready(Some(Event::Done { finish, prompt_tokens, completion_tokens, reasoning_tokens })) => (
                    split.finish(),
                    Some((finish, Usage::new(prompt_tokens, completion_tokens, Some(reasoning_tokens)))),
                ),
                Poll::Ready(Some(Event::Error(e))) => {
                    pending.push_back(event("error", json!({ "code": "server_error", "message": e, "param": null })));
                    done = true;
                    continue;
                }
                Poll::Ready(None) => {
                    let e = "the model thread dropped the request";
                    pending.push_back(event("error", json!({ "code": "server_error", "message": e, "param": null })));
                    done = true;
                    continue;
                }
            };
            let Delta { reasoning: r, content, calls } = delta;
            // The reasoning item opens with its first piece and streams as reasoning_text
            // deltas; the reply (or a call, or the end) closes it.
            if !r.is_empty() {
                let i = *open_reasoning.get_or_insert_with(|| {
                    let i = items.len();
                    items.push(Value::Null);
                    let item = reasoning_item(&id, None);
                    pending.push_back(event("response.output_item.added", json!({ "output_index": i, "item": item })));
                    pending.push_back(event(
                        "response.content_part.added",
                        json!({ "item_id": rid, "output_index": i, "content_index": 0,
                                "part": { "type": "reasoning_text", "text": "" } }),
                    ));
                    i
                });
                reasoning.push_str(&r);
                pending.push_back(event(
                    "response.reasoning_text.delta",
                    json!({ "item_id": rid, "output_index": i, "content_index": 0, "delta": r }),
                ));
            }
            let reasoning_over = !content.is_empty() || !calls.is_empty() || end.is_some();
            if let Some(i) = open_reasoning.filter(|_| reasoning_over) {
                open_reasoning = None;
                let thought = std::mem::take(&mut reasoning);
                pending.push_back(event(
                    "response.reasoning_text.done",
                    json!({ "item_id": rid, "output_index": i, "content_index": 0, "text": thought }),
                ));
                pending.push_back(event(
                    "response.content_part.done",
                    json!({ "item_id": rid, "output_index": i, "content_index": 0,
                            "part": { "type": "reasoning_text", "text": thought } }),
                ));
                let item = reasoning_item(&id, Some(&thought));
                pending.push_back(event("response.output_item.done", json!({ "output_index": i, "item": item })));
                items[i] = item;
            }
            // With tools the message text is trimmed, as the whole answer's is.
            let content = if tools && text.is_empty() { content.trim_start().to_string() } else { content };
            if !content.is_empty() {
                let i = *open_message.get_or_insert_with(|| {
                    let i = items.len();
                    items.push(Value::Null);
                    pending.push_back(event(
                        "response.output_item.added",
                        json!({ "output_index": i, "item": message_item(&id, "", "in_progress") }),
                    ));
                    pending.push_back(event(
                        "response.content_part.added",
                        json!({ "item_id": mid, "output_index": i, "content_index": 0,
                                "part": { "type": "output_text", "text": "", "annotations": [] } }),
                    ));
                    i
                });
                text.push_str(&content);
                pending.push_back(event(
                    "response.output_text.delta",
                    json!({ "item_id": mid, "output_index": i, "content_index": 0, "delta": content }),
                ));
            }
            // A call, or the end, closes the message item.
            if !calls.is_empty() || end.is_some() {
                let no_calls = calls.is_empty() && items.iter().all(|i| i["type"] != "function_call");
                if end.is_some() && open_message.is_none() && no_calls {
                    // An empty answer is still one (empty) message.
                    open_message = Some(items.len());
                    items.push(Value::Null);
                }
                if let Some(i) = open_message.take() {
                    let final_text = if tools { text.trim_end().to_string() } else { text.clone() };
                    pending.push_back(event(
                        "response.output_text.done",
                        json!({ "item_id": mid, "output_index": i, "content_index": 0, "text": final_text }),
                    ));
                    let part = json!({ "type": "output_text", "text": final_text, "annotations": [] });
                    pending.push_back(event(
                        "response.content_part.done",
                        json!({ "item_id": mid, "output_index": i, "content_index": 0, "part": part }),
                    ));
                    let item = message_item(&id, &final_text, "completed");
                    pending.push_back(event("response.output_item.done", json!({ "output_index": i, "item": item })));
                    items[i] = item;
                }
            }
            for (_, cid, c) in calls {
                let call = json!({ "id": cid, "type": "function",
                                   "function": { "name": c.name, "arguments": c.arguments } });
                chat_calls.push(call.clone());
                let item = call_item(&call);
                let i = items.len();
                let fid = item["id"].clone();
                let mut added = item.clone();
                added["arguments"] = json!("");
                added["status"] = json!("in_progress");
                pending.push_back(event("response.output_item.added", json!({ "output_index": i, "item": added })));
                pending.push_back(event(
                    "response.function_call_arguments.delta",
                    json!({ "item_id": fid, "output_index": i, "delta": c.arguments }),
                ));
                pending.push_back(event(
                    "response.function_call_arguments.done",
                    json!({ "item_id": fid, "output_index": i, "arguments": c.arguments, "name": c.name }),
                ));
                pending.push_back(event("response.output_item.done", json!({ "output_index": i, "item": item })));
                items.push(item);
            }
            if let Some((finish, usage)) = end {
                let status = if finish == "length" { "incomplete" } else { "completed" };
                let kind = if status == "completed" { "response.completed" } else { "response.incomplete" };
                let r = response_object(&id, &model, created, status, items.clone(), Some(usage));
                if store {
                    let said = if tools { text.trim().to_string() } else { text.clone() };
                    let mut h = std::mem::take(&mut history);
                    h.push(assistant_message(&said, std::mem::take(&mut chat_calls)));
                    st.stored.put(format!("resp_{id}"), h, r.clone());
                }
                pending.push_back(event(kind, json!({ "response": r })));
                done = true;
            }
        }
    });
    Sse::new(stream).into_response()
}
