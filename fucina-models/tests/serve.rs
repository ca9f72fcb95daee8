//! The OpenAI-compatible server, tested over loopback with a real HTTP client (`ureq`):
//! the answers match the library's own generation, streams carry the same text, concurrent
//! requests do not disturb each other's KV cache, and bad requests get 4xx JSON errors.

use fucina::prelude::*;
use fucina_models::llm::chat::{render_chat, Message, Role};
use fucina_models::llm::cli::{default_model, stop_tokens};
use fucina_models::llm::generate::{generate_observed, GenerateOptions};
use fucina_models::llm::KvType;
use fucina_models::llm::{Sampler, SamplingParams, Tokenizer};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};

mod common;

fn start() -> common::Server {
    common::start(&["--threads", "2", "--max-tokens", "24"])
}

/// The default (tiny) model's tokenizer.
fn tiny_tokenizer() -> Tokenizer {
    Tokenizer::from_gguf(&fucina_models::lm::open(&default_model(), false).unwrap().header).unwrap()
}

/// The tiny model's `<think>` and `</think>` token ids.
fn think_tokens() -> (u32, u32) {
    let tok = tiny_tokenizer();
    (tok.token_id("<think>").unwrap(), tok.token_id("</think>").unwrap())
}

/// The library's own greedy answer to one user message (the reference for the server).
fn reference(user: &str, max_tokens: usize) -> String {
    reference_with(user, max_tokens, SamplingParams::default())
}

/// The library's own answer to one user message with these sampling settings.
fn reference_with(user: &str, max_tokens: usize, params: SamplingParams) -> String {
    common::library_answer(&default_model(), &[Message::new(Role::User, user)], max_tokens, params)
}

fn post(base: &str, path: &str, body: &Value) -> (u16, Value) {
    match ureq::post(&format!("{base}{path}")).send_json(body.clone()) {
        Ok(r) => (r.status(), r.into_json().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap()),
        Err(e) => panic!("{path}: {e}"),
    }
}

fn chat_body(user: &str, stream: bool) -> Value {
    json!({ "model": "qwen3-tiny-f32", "messages": [{ "role": "user", "content": user }], "max_tokens": 12,
            "temperature": 0, "stream": stream })
}

#[test]
fn openai_api_over_loopback() {
    let s = start();
    let health: Value = ureq::get(&format!("{}/health", s.base)).call().unwrap().into_json().unwrap();
    assert_eq!(health["status"], "ok");
    let models: Value = ureq::get(&format!("{}/v1/models", s.base)).call().unwrap().into_json().unwrap();
    assert_eq!(models["data"][0]["id"], "qwen3-tiny-f32");

    // A greedy chat answer equals the library's.
    let (code, r) = post(&s.base, "/v1/chat/completions", &chat_body("What is the capital of France?", false));
    assert_eq!(code, 200, "{r}");
    let answer = r["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    assert_eq!(answer, reference("What is the capital of France?", 12));
    assert_eq!(r["object"], "chat.completion");
    assert_eq!(
        r["usage"]["completion_tokens"].as_u64().unwrap() + r["usage"]["prompt_tokens"].as_u64().unwrap(),
        r["usage"]["total_tokens"].as_u64().unwrap()
    );

    // The stream carries the same text, then a finish chunk and [DONE].
    let resp = ureq::post(&format!("{}/v1/chat/completions", s.base))
        .send_json(chat_body("What is the capital of France?", true))
        .unwrap();
    assert!(resp.header("content-type").unwrap_or("").starts_with("text/event-stream"));
    let mut streamed = String::new();
    let mut finish = None;
    let mut saw_done = false;
    for line in BufReader::new(resp.into_reader()).lines() {
        let line = line.unwrap();
        let Some(data) = line.strip_prefix("data: ") else { continue };
        if data == "[DONE]" {
            saw_done = true;
            break;
        }
        let c: Value = serde_json::from_str(data).unwrap();
        assert_eq!(c["object"], "chat.completion.chunk");
        if let Some(t) = c["choices"][0]["delta"]["content"].as_str() {
            streamed.push_str(t);
        }
        if let Some(f) = c["choices"][0]["finish_reason"].as_str() {
            finish = Some(f.to_string());
        }
    }
    assert!(saw_done);
    assert_eq!(streamed, answer);
    assert!(matches!(finish.as_deref(), Some("stop" | "length")));

    // Completions, plain.
    let (code, r) =
        post(&s.base, "/v1/completions", &json!({ "prompt": "Hello world", "max_tokens": 5, "temperature": 0 }));
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["object"], "text_completion");
    assert_eq!(r["usage"]["completion_tokens"].as_u64(), Some(5));

    // Stop strings end the answer before them.
    if answer.chars().count() > 3 {
        let stop: String = answer.chars().skip(2).take(2).collect();
        let mut body = chat_body("What is the capital of France?", false);
        body["stop"] = json!([stop.clone()]);
        let (_, r) = post(&s.base, "/v1/chat/completions", &body);
        let text = r["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(answer.starts_with(text) && !text.contains(&stop), "{text:?} / {stop:?}");
        assert_eq!(r["choices"][0]["finish_reason"], "stop");
    }

    // Concurrent requests queue; each gets exactly its sequential answer.
    let prompts = ["Hello", "What is rust?", "bonjour monde", "tensors and axes", "Hello"];
    let sequential: Vec<String> = prompts
        .iter()
        .map(|p| {
            post(&s.base, "/v1/chat/completions", &chat_body(p, false)).1["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    let handles: Vec<_> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (base, p) = (s.base.clone(), p.to_string());
            std::thread::spawn(move || {
                let body = chat_body(&p, i % 2 == 0);
                if i % 2 == 0 {
                    // Streamed: concatenate the deltas.
                    let resp = ureq::post(&format!("{base}/v1/chat/completions")).send_json(body).unwrap();
                    common::streamed_content(resp)
                } else {
                    post(&base, "/v1/chat/completions", &body).1["choices"][0]["message"]["content"]
                        .as_str()
                        .unwrap()
                        .to_string()
                }
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), sequential[i], "request {i} ({:?})", prompts[i]);
    }

    // Bad requests: 4xx with an OpenAI-style JSON error.
    let expect_error = |code: u16, want: u16, r: &Value, what: &str| {
        assert_eq!(code, want, "{what}: {r}");
        assert!(r["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {r}");
    };
    let raw = ureq::post(&format!("{}/v1/chat/completions", s.base))
        .set("content-type", "application/json")
        .send_string("{\"messages\": [");
    match raw {
        Err(ureq::Error::Status(code, r)) => expect_error(code, 400, &r.into_json().unwrap(), "malformed JSON"),
        other => panic!("malformed JSON: {other:?}"),
    }
    let big = "x".repeat(2 << 20);
    match ureq::post(&format!("{}/v1/completions", s.base)).send_json(json!({ "prompt": big })) {
        Err(ureq::Error::Status(code, r)) => expect_error(code, 413, &r.into_json().unwrap(), "oversized body"),
        Err(ureq::Error::Transport(_)) => {} // the server may close the connection mid-upload
        other => panic!("oversized body: {other:?}"),
    }
    let long = "hello ".repeat(3000);
    let (code, r) = post(&s.base, "/v1/completions", &json!({ "prompt": long }));
    expect_error(code, 400, &r, "prompt longer than the context");
    assert_eq!(r["error"]["code"], "context_length_exceeded");
    let (code, r) = post(
        &s.base,
        "/v1/chat/completions",
        &json!({ "messages": [{ "role": "user", "content": "hi" }], "temperature": -1 }),
    );
    expect_error(code, 400, &r, "negative temperature");
    let (code, r) =
        post(&s.base, "/v1/chat/completions", &json!({ "messages": [{ "role": "wizard", "content": "hi" }] }));
    expect_error(code, 400, &r, "unknown role");
    let (code, r) = post(&s.base, "/v1/chat/completions", &json!({ "messages": [] }));
    expect_error(code, 400, &r, "no messages");
    let (code, r) = post(&s.base, "/v1/nothing", &json!({}));
    expect_error(code, 404, &r, "unknown route");
    // The server still answers after all that.
    let (code, _) = post(&s.base, "/v1/chat/completions", &chat_body("Hello", false));
    assert_eq!(code, 200);
}

/// The parts of the OpenAI API beyond plain sampling: the model id is checked (404 as OpenAI
/// answers), `developer` is the system role, documented ranges are enforced, and every
/// parameter this server cannot honour is a 400 that names it, never silently ignored;
/// `stream_options.include_usage` adds the usage chunk.
#[test]
fn openai_parameters_are_honoured_or_refused() {
    let s = start();
    let get = |path: &str| match ureq::get(&format!("{}{path}", s.base)).call() {
        Ok(r) => (r.status(), r.into_json::<Value>().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap()),
        Err(e) => panic!("{path}: {e}"),
    };
    let (code, m) = get("/v1/models/qwen3-tiny-f32");
    assert_eq!((code, m["id"].as_str()), (200, Some("qwen3-tiny-f32")), "{m}");
    let (code, m) = get("/v1/models/gpt-4o");
    assert_eq!((code, m["error"]["code"].as_str()), (404, Some("model_not_found")), "{m}");
    let mut body = chat_body("Hello", false);
    body["model"] = json!("gpt-4o");
    let (code, r) = post(&s.base, "/v1/chat/completions", &body);
    assert_eq!((code, r["error"]["code"].as_str()), (404, Some("model_not_found")), "{r}");
    // No model named at all is the served one.
    let (code, r) = post(&s.base, "/v1/completions", &json!({ "prompt": "Hello", "max_tokens": 2 }));
    assert_eq!(code, 200, "{r}");

    // `developer` is the system role: the same greedy answer.
    let with_role = |role: &str| {
        let body = json!({ "messages": [{ "role": role, "content": "Answer in one word." },
                                         { "role": "user", "content": "Capital of France?" }],
                           "max_tokens": 8, "temperature": 0 });
        let (code, r) = post(&s.base, "/v1/chat/completions", &body);
        assert_eq!(code, 200, "{role}: {r}");
        r["choices"][0]["message"]["content"].as_str().unwrap().to_string()
    };
    assert_eq!(with_role("developer"), with_role("system"));

    // Documented ranges.
    for (key, value, name) in [("temperature", json!(5), "temperature"), ("top_p", json!(1.5), "top_p")] {
        let mut body = chat_body("Hello", false);
        body[key] = value;
        let (code, r) = post(&s.base, "/v1/chat/completions", &body);
        assert_eq!(code, 400, "{key}: {r}");
        assert!(r["error"]["message"].as_str().unwrap().contains(name), "{key}: {r}");
    }

    // What the server cannot do yet is refused by name, on both endpoints.
    let refused = [("functions", json!([{ "name": "f", "parameters": {} }])), ("function_call", json!("auto"))];
    for (key, value) in &refused {
        let mut body = chat_body("Hello", false);
        body[*key] = value.clone();
        let (code, r) = post(&s.base, "/v1/chat/completions", &body);
        assert_eq!((code, r["error"]["code"].as_str()), (400, Some("unsupported_parameter")), "{key}: {r}");
        assert!(r["error"]["message"].as_str().unwrap().contains(key), "{key}: {r}");
    }
    for (key, value) in [("echo", json!(true)), ("best_of", json!(2)), ("suffix", json!("!"))] {
        let (code, r) = post(&s.base, "/v1/completions", &json!({ "prompt": "Hello", key: value }));
        assert_eq!((code, r["error"]["code"].as_str()), (400, Some("unsupported_parameter")), "{key}: {r}");
    }
    // Their neutral values are accepted and change nothing.
    let plain = post(&s.base, "/v1/chat/completions", &chat_body("Hello", false)).1;
    let mut body = chat_body("Hello", false);
    for (key, value) in [
        ("response_format", json!({ "type": "text" })),
        ("tools", json!([])),
        ("tool_choice", json!("none")),
        ("logprobs", json!(false)),
        ("presence_penalty", json!(0)),
        ("frequency_penalty", json!(0)),
        ("logit_bias", json!({})),
    ] {
        body[key] = value;
    }
    let (code, r) = post(&s.base, "/v1/chat/completions", &body);
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["choices"][0]["message"]["content"], plain["choices"][0]["message"]["content"]);

    // logit_bias: +100 forces a token at every step, -100 bans the greedy first one.
    let lm = fucina_models::lm::open(&default_model(), false).unwrap();
    let tok = Tokenizer::from_gguf(&lm.header).unwrap();
    let paris = tok.encode(" Paris").unwrap()[0];
    let forced = |bias: Value| {
        let body = json!({ "prompt": "Hello", "max_tokens": 4, "temperature": 0, "logit_bias": bias });
        let (code, r) = post(&s.base, "/v1/completions", &body);
        assert_eq!(code, 200, "{r}");
        r["choices"][0]["text"].as_str().unwrap().to_string()
    };
    assert_eq!(forced(json!({ paris.to_string(): 100 })), tok.decode(&[paris; 4]).unwrap());
    let plain_ids = tok.encode(&forced(json!({}))).unwrap();
    let banned = forced(json!({ plain_ids[0].to_string(): -100 }));
    assert_ne!(tok.encode(&banned).unwrap().first(), plain_ids.first(), "{banned:?}");
    let vocab = tok.vocab_size();
    for bad in [json!({ "abc": 1 }), json!({ vocab.to_string(): 1 }), json!({ "5": 500 }), json!([1, 2])] {
        let (code, r) = post(&s.base, "/v1/completions", &json!({ "prompt": "Hello", "logit_bias": bad }));
        assert_eq!((code, r["error"]["code"].as_str()), (400, Some("invalid_value")), "{bad}: {r}");
    }

    // Presence and frequency penalties: the library's answer with the same settings, which
    // differs from the unpenalized one on this prompt, whose greedy answer repeats tokens
    // (so ignoring them would fail here).
    for (key, value) in [("frequency_penalty", 1.0f32), ("presence_penalty", -2.0)] {
        let mut body = chat_body("Hello", false);
        body[key] = json!(value);
        let (code, r) = post(&s.base, "/v1/chat/completions", &body);
        assert_eq!(code, 200, "{r}");
        let got = r["choices"][0]["message"]["content"].as_str().unwrap().to_string();
        let mut params = SamplingParams::default();
        if key == "frequency_penalty" {
            params.frequency_penalty = value;
        } else {
            params.presence_penalty = value;
        }
        assert_eq!(got, reference_with("Hello", 12, params), "{key}");
        assert_ne!(got, reference("Hello", 12), "{key} changed nothing on this prompt");
    }
    for (key, value) in [("presence_penalty", 2.5), ("frequency_penalty", -3.0)] {
        let mut body = chat_body("Hello", false);
        body[key] = json!(value);
        let (code, r) = post(&s.base, "/v1/chat/completions", &body);
        assert_eq!((code, r["error"]["code"].as_str()), (400, Some("invalid_value")), "{key}: {r}");
    }

    // stream_options.include_usage: a last chunk with no choices and the token counts.
    let mut body = chat_body("Hello", true);
    body["stream_options"] = json!({ "include_usage": true });
    let (mut pieces, mut usage) = (0u64, None);
    for c in sse(&s.base, "/v1/chat/completions", body) {
        assert!(usage.is_none(), "a chunk after the usage chunk: {c}");
        if c["choices"].as_array().is_some_and(|a| a.is_empty()) {
            usage = Some(c["usage"].clone());
        } else if c["choices"][0]["delta"]["content"].is_string() {
            pieces += 1;
        }
    }
    let usage = usage.expect("no usage chunk");
    let (p, g) = (usage["prompt_tokens"].as_u64().unwrap(), usage["completion_tokens"].as_u64().unwrap());
    assert!(p > 0 && g >= pieces.min(1) && g <= 12, "{usage}");
    assert_eq!(usage["total_tokens"].as_u64(), Some(p + g));
    let mut body = chat_body("Hello", false);
    body["stream_options"] = json!({ "include_usage": true });
    let (code, r) = post(&s.base, "/v1/chat/completions", &body);
    assert_eq!(code, 400, "stream_options without stream: {r}");
}

/// The `data:` payloads of a server-sent stream, parsed, up to `[DONE]`.
fn sse(base: &str, path: &str, body: Value) -> Vec<Value> {
    let resp = ureq::post(&format!("{base}{path}")).send_json(body).unwrap();
    let mut out = Vec::new();
    for line in BufReader::new(resp.into_reader()).lines() {
        let line = line.unwrap();
        let Some(data) = line.strip_prefix("data: ") else { continue };
        if data == "[DONE]" {
            break;
        }
        out.push(serde_json::from_str(data).unwrap());
    }
    out
}

/// Reads a stream's text and finish reason.
fn streamed(base: &str, path: &str, body: Value) -> (String, String) {
    let (mut text, mut finish) = (String::new(), String::new());
    for c in sse(base, path, body) {
        if let Some(t) = c["choices"][0]["delta"]["content"].as_str() {
            text.push_str(t);
        }
        if let Some(f) = c["choices"][0]["finish_reason"].as_str() {
            finish = f.to_string();
        }
    }
    (text, finish)
}

/// Checks `v` against the test schema by hand: exactly the keys `ok` (bool), `n` (integer
/// 0..=99) and `color` (one of three strings).
fn follows_schema(v: &Value) -> bool {
    let Some(o) = v.as_object() else { return false };
    o.len() == 3
        && o.get("ok").is_some_and(Value::is_boolean)
        && o.get("n").and_then(Value::as_u64).is_some_and(|n| n <= 99)
        && o.get("color").and_then(Value::as_str).is_some_and(|c| ["red", "green", "blue"].contains(&c))
}

/// `response_format`: with a random model sampled at temperature 1, every answer is JSON
/// that follows the schema (without the grammar this model writes noise, so the check can
/// fail), streamed or not, with finish_reason `stop`; `json_object` gives an object; a cut
/// answer says `length`; a bad schema or type is a 400 naming it.
#[test]
fn structured_output_follows_the_schema() {
    let s = common::start(&["--threads", "2", "--max-tokens", "96"]);
    let schema = json!({
        "type": "object",
        "properties": {
            "ok": { "type": "boolean" },
            "n": { "type": "integer", "minimum": 0, "maximum": 99 },
            "color": { "enum": ["red", "green", "blue"] }
        },
        "required": ["ok", "n", "color"],
        "additionalProperties": false
    });
    let format =
        json!({ "type": "json_schema", "json_schema": { "name": "answer", "schema": schema, "strict": true } });
    for seed in 0..4 {
        let body = json!({ "messages": [{ "role": "user", "content": "Describe yourself." }], "temperature": 1,
                           "seed": seed, "max_tokens": 96, "response_format": format });
        let (code, r) = post(&s.base, "/v1/chat/completions", &body);
        assert_eq!(code, 200, "{r}");
        let text = r["choices"][0]["message"]["content"].as_str().unwrap();
        let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("seed {seed}: {text:?}: {e}"));
        assert!(follows_schema(&v), "seed {seed}: {text}");
        assert_eq!(r["choices"][0]["finish_reason"], "stop", "seed {seed}: {r}");
        let mut body = body.clone();
        body["stream"] = json!(true);
        let (streamed_text, finish) = streamed(&s.base, "/v1/chat/completions", body);
        assert_eq!((streamed_text.as_str(), finish.as_str()), (text, "stop"), "seed {seed}");
    }
    // Unconstrained, the same request is not JSON (so the checks above can fail).
    let body = json!({ "messages": [{ "role": "user", "content": "Describe yourself." }], "temperature": 1,
                       "seed": 0, "max_tokens": 24 });
    let (_, r) = post(&s.base, "/v1/chat/completions", &body);
    let text = r["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(serde_json::from_str::<Value>(text).map_or(true, |v| !follows_schema(&v)), "{text}");

    // json_object: any object; raw completions take it too.
    for (path, body) in [
        (
            "/v1/chat/completions",
            json!({ "messages": [{ "role": "user", "content": "Hi" }], "temperature": 0.7,
                                         "seed": 3, "response_format": { "type": "json_object" } }),
        ),
        (
            "/v1/completions",
            json!({ "prompt": "Hello", "temperature": 0.7, "seed": 3,
                                    "response_format": { "type": "json_object" } }),
        ),
    ] {
        let (code, r) = post(&s.base, path, &body);
        assert_eq!(code, 200, "{r}");
        let c = &r["choices"][0];
        let text = c["message"]["content"].as_str().or(c["text"].as_str()).unwrap();
        if c["finish_reason"] == "stop" {
            assert!(serde_json::from_str::<Value>(text).is_ok_and(|v| v.is_object()), "{path}: {text}");
        } else {
            assert!(text.starts_with('{'), "{path}: {text}");
        }
    }

    // A budget too small for the object: cut off, finish_reason length.
    let body = json!({ "messages": [{ "role": "user", "content": "Hi" }], "max_tokens": 3, "response_format": format });
    let (code, r) = post(&s.base, "/v1/chat/completions", &body);
    assert_eq!((code, r["choices"][0]["finish_reason"].as_str()), (200, Some("length")), "{r}");
    assert!(r["choices"][0]["message"]["content"].as_str().unwrap().starts_with("{\""), "{r}");

    // Bad formats are 400s naming response_format.
    for bad in [
        json!({ "type": "xml" }),
        json!({ "type": "json_schema" }),
        json!({ "type": "json_schema", "json_schema": { "name": "x", "schema": { "type": 7 } } }),
        json!({ "type": "json_schema", "json_schema": { "name": "x", "schema": [1] } }),
        // Compiles, but allows no text at all: refused up front, not a 500 mid-answer.
        json!({ "type": "json_schema", "json_schema": { "name": "x",
                "schema": { "$ref": "#/$defs/a", "$defs": { "a": { "$ref": "#/$defs/a" } } } } }),
        json!("json"),
    ] {
        let body = json!({ "messages": [{ "role": "user", "content": "Hi" }], "response_format": bad });
        let (code, r) = post(&s.base, "/v1/chat/completions", &body);
        assert_eq!((code, r["error"]["code"].as_str()), (400, Some("invalid_value")), "{bad}: {r}");
        assert!(r["error"]["message"].as_str().unwrap().contains("response_format"), "{bad}: {r}");
    }
}

/// The reference for logprobs: the library's greedy tokens for `prompt`, each with the
/// log-softmax of its logits row computed here in f64 (the chosen token's and the top 3).
/// One token of the reference: its bytes, its log-probability, the top 3 (bytes, logprob).
type RefToken = (Vec<u8>, f64, Vec<(Vec<u8>, f64)>);

fn reference_logprobs(prompt: &[u32], max_tokens: usize) -> Vec<RefToken> {
    let ctx = ExecContext::with_backend(BackendKind::Native, 2).unwrap();
    let _g = ctx.enter();
    let lm = fucina_models::lm::open(&default_model(), false).unwrap();
    let tok = Tokenizer::from_gguf(&lm.header).unwrap();
    let mut cache = lm.model.new_cache(256, KvType::F32).unwrap();
    let mut sampler = Sampler::new(SamplingParams::default());
    let opts = GenerateOptions { max_tokens, stop_tokens: stop_tokens(&lm.header, &tok), ..GenerateOptions::default() };
    let mut out = Vec::new();
    generate_observed(&*lm.model, &tok, &mut cache, prompt, &mut sampler, &opts, &mut |_| true, &mut |id, logits| {
        let lse = logits.iter().map(|&x| (x as f64).exp()).sum::<f64>().ln();
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        let bytes = |t: usize| tok.decode_bytes(&[t as u32]).unwrap();
        let top = order[..3].iter().map(|&t| (bytes(t), logits[t] as f64 - lse)).collect();
        out.push((bytes(id as usize), logits[id as usize] as f64 - lse, top));
    })
    .unwrap();
    out
}

/// `logprobs` / `top_logprobs`: each token's log-probability is the model's log-softmax
/// (within 1e-4, against a reference computed in this test), the alternatives are the most
/// likely tokens in order, streams carry the same values, and out-of-range values are 400s.
#[test]
fn logprobs_are_the_models_log_softmax() {
    let s = start();
    let lm = fucina_models::lm::open(&default_model(), false).unwrap();
    let tok = Tokenizer::from_gguf(&lm.header).unwrap();
    let user = "What is the capital of France?";
    let chat_prompt = tok.encode(&render_chat(&[Message::new(Role::User, user)], true)).unwrap();
    let want = reference_logprobs(&chat_prompt, 8);
    let check = |content: &[Value]| {
        assert_eq!(content.len(), want.len(), "{content:?}");
        for (i, (c, (bytes, lp, top))) in content.iter().zip(&want).enumerate() {
            let got_bytes: Vec<u8> = c["bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect();
            assert_eq!(&got_bytes, bytes, "token {i}");
            assert!((c["logprob"].as_f64().unwrap() - lp).abs() < 1e-4, "token {i}: {} vs {lp}", c["logprob"]);
            let alts = c["top_logprobs"].as_array().unwrap();
            assert_eq!(alts.len(), 3);
            for (a, (b, l)) in alts.iter().zip(top) {
                assert_eq!(a["token"].as_str().unwrap(), String::from_utf8_lossy(b), "token {i}");
                assert!((a["logprob"].as_f64().unwrap() - l).abs() < 1e-4, "token {i}");
            }
        }
    };
    let body = json!({ "messages": [{ "role": "user", "content": user }], "max_tokens": 8, "temperature": 0,
                       "logprobs": true, "top_logprobs": 3 });
    let (code, r) = post(&s.base, "/v1/chat/completions", &body);
    assert_eq!(code, 200, "{r}");
    check(r["choices"][0]["logprobs"]["content"].as_array().unwrap());
    // Streamed: the same entries, spread over the chunks.
    let mut body_s = body.clone();
    body_s["stream"] = json!(true);
    let mut content = Vec::new();
    for c in sse(&s.base, "/v1/chat/completions", body_s) {
        if let Some(a) = c["choices"][0]["logprobs"]["content"].as_array() {
            content.extend(a.iter().cloned());
        }
    }
    check(&content);
    // Without logprobs the field is null.
    let (_, r) = post(&s.base, "/v1/chat/completions", &chat_body(user, false));
    assert!(r["choices"][0]["logprobs"].is_null(), "{r}");

    // Completions: the legacy shape, `logprobs` as the number of alternatives.
    let body = json!({ "prompt": "Hello world", "max_tokens": 5, "temperature": 0, "logprobs": 2 });
    let (code, r) = post(&s.base, "/v1/completions", &body);
    assert_eq!(code, 200, "{r}");
    let want = reference_logprobs(&tok.encode("Hello world").unwrap(), 5);
    let lp = &r["choices"][0]["logprobs"];
    let tokens: Vec<&str> = lp["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(tokens.concat(), r["choices"][0]["text"].as_str().unwrap());
    for (i, (bytes, l, top)) in want.iter().enumerate() {
        assert_eq!(tokens[i], String::from_utf8_lossy(bytes));
        assert!((lp["token_logprobs"][i].as_f64().unwrap() - l).abs() < 1e-4, "token {i}");
        let alts = lp["top_logprobs"][i].as_object().unwrap();
        assert_eq!(alts.len(), 2);
        let best = String::from_utf8_lossy(&top[0].0).into_owned();
        assert!((alts[&best].as_f64().unwrap() - top[0].1).abs() < 1e-4, "token {i}");
    }
    let offsets: Vec<u64> = lp["text_offset"].as_array().unwrap().iter().map(|o| o.as_u64().unwrap()).collect();
    assert_eq!(offsets[0], 0);
    assert!(offsets.windows(2).all(|w| w[0] < w[1]), "{offsets:?}");

    for (path, bad) in [
        ("/v1/chat/completions", json!({ "messages": [{ "role": "user", "content": "Hi" }], "logprobs": 3 })),
        (
            "/v1/chat/completions",
            json!({ "messages": [{ "role": "user", "content": "Hi" }], "logprobs": true, "top_logprobs": 21 }),
        ),
        ("/v1/chat/completions", json!({ "messages": [{ "role": "user", "content": "Hi" }], "top_logprobs": 2 })),
        ("/v1/completions", json!({ "prompt": "Hi", "logprobs": 6 })),
        ("/v1/completions", json!({ "prompt": "Hi", "logprobs": -1 })),
    ] {
        let (code, r) = post(&s.base, path, &bad);
        assert_eq!((code, r["error"]["code"].as_str()), (400, Some("invalid_value")), "{bad}: {r}");
        assert!(r["error"]["message"].as_str().unwrap().contains("logprobs"), "{bad}: {r}");
    }
}

/// `reasoning_content`: a chat answer's `<think>` block is split off (the server's default)
/// or left inline on request, streamed or not. The tiny model is pushed into writing think
/// tags with a logit bias and a frequency penalty; the split must equal the library's
/// splitter on the inline text, and the streamed pieces must add up to the same two fields.
#[test]
fn reasoning_content_is_split_from_the_answer() {
    use fucina_models::llm::reasoning::split_reasoning;
    let s = start();
    let (open, close) = think_tokens();
    let body = |format: &str, stream: bool| {
        json!({ "messages": [{ "role": "user", "content": "Hi" }], "max_tokens": 16, "temperature": 0,
                "frequency_penalty": 2, "logit_bias": { open.to_string(): 12, close.to_string(): 9 },
                "reasoning_format": format, "stream": stream })
    };
    let (code, r) = post(&s.base, "/v1/chat/completions", &body("inline", false));
    assert_eq!(code, 200, "{r}");
    let inline = r["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    assert!(r["choices"][0]["message"]["reasoning_content"].is_null(), "{r}");
    let (reasoning, reply) = split_reasoning(&inline, false);
    let reasoning = reasoning.expect("the biased answer opens with <think>");
    assert!(!reasoning.is_empty() && !reply.is_empty(), "{inline:?}");
    let (code, r) = post(&s.base, "/v1/chat/completions", &body("separate", false));
    assert_eq!(code, 200, "{r}");
    let m = &r["choices"][0]["message"];
    assert_eq!((m["reasoning_content"].as_str(), m["content"].as_str()), (Some(&*reasoning), Some(&*reply)), "{r}");
    // The think block's tokens (its two tags at least) are counted in the usage, the reply's not.
    let thought = r["usage"]["completion_tokens_details"]["reasoning_tokens"].as_u64().unwrap();
    assert!(thought >= 2 && thought < r["usage"]["completion_tokens"].as_u64().unwrap(), "{r}");
    // The default is `separate`.
    let mut default = body("separate", false);
    default.as_object_mut().unwrap().remove("reasoning_format");
    assert_eq!(post(&s.base, "/v1/chat/completions", &default).1["choices"][0]["message"], *m);
    // Streamed: the deltas add up to the same fields.
    let (mut r_s, mut c_s) = (String::new(), String::new());
    for c in sse(&s.base, "/v1/chat/completions", body("separate", true)) {
        r_s += c["choices"][0]["delta"]["reasoning_content"].as_str().unwrap_or("");
        c_s += c["choices"][0]["delta"]["content"].as_str().unwrap_or("");
    }
    assert_eq!((r_s, c_s), (reasoning, reply));
    let mut bad = body("separate", false);
    bad["reasoning_format"] = json!("hidden");
    let (code, r) = post(&s.base, "/v1/chat/completions", &bad);
    assert_eq!((code, r["error"]["code"].as_str()), (400, Some("invalid_value")), "{r}");
}

/// Tools: with `tool_choice` required or named, the answer is tool calls (forced by a
/// grammar over the tools' schemas) that OpenAI's shape carries in `tool_calls`, with
/// finish_reason `tool_calls`, streamed or not; a conversation with calls and results is
/// taken; `none` hides the tools; bad tool settings are 400s.
#[test]
fn tool_calls_follow_the_tools() {
    let s = common::start(&["--threads", "2", "--max-tokens", "128"]);
    let tools = json!([
        { "type": "function", "function": { "name": "get_weather", "description": "Weather in a city.",
          "parameters": { "type": "object", "properties": { "city": { "type": "string", "maxLength": 8 } },
                          "required": ["city"], "additionalProperties": false } } },
        { "type": "function", "function": { "name": "now", "parameters": { "type": "object", "properties": {},
                                                                             "additionalProperties": false } } }
    ]);
    let ask = |choice: Value, seed: u64, stream: bool| {
        json!({ "messages": [{ "role": "user", "content": "Weather in Rome?" }], "tools": tools,
                "tool_choice": choice, "parallel_tool_calls": false, "temperature": 1, "seed": seed,
                "max_tokens": 128, "stream": stream })
    };
    let check_call = |c: &Value, only: Option<&str>| {
        assert_eq!(c["type"], "function", "{c}");
        assert!(c["id"].as_str().is_some_and(|id| id.starts_with("call_")), "{c}");
        let name = c["function"]["name"].as_str().unwrap();
        let args: Value = serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap();
        match name {
            "get_weather" => assert!(args["city"].as_str().is_some_and(|c| c.chars().count() <= 8), "{c}"),
            "now" => assert_eq!(args, json!({})),
            other => panic!("unknown tool {other}"),
        }
        if let Some(n) = only {
            assert_eq!(name, n);
        }
    };
    let mut names = std::collections::BTreeSet::new();
    for seed in 0..4 {
        for (choice, only) in
            [(json!("required"), None), (json!({ "type": "function", "function": { "name": "now" } }), Some("now"))]
        {
            let (code, r) = post(&s.base, "/v1/chat/completions", &ask(choice.clone(), seed, false));
            assert_eq!(code, 200, "{r}");
            let c = &r["choices"][0];
            assert_eq!(c["finish_reason"], "tool_calls", "{r}");
            let calls = c["message"]["tool_calls"].as_array().unwrap();
            assert_eq!(calls.len(), 1, "{r}");
            check_call(&calls[0], only);
            names.insert(calls[0]["function"]["name"].as_str().unwrap().to_string());
            // Streamed: the same call in a tool_calls delta.
            let (mut streamed, mut finish) = (Vec::new(), String::new());
            for ch in sse(&s.base, "/v1/chat/completions", ask(choice, seed, true)) {
                if let Some(a) = ch["choices"][0]["delta"]["tool_calls"].as_array() {
                    streamed.extend(a.iter().cloned());
                }
                if let Some(f) = ch["choices"][0]["finish_reason"].as_str() {
                    finish = f.to_string();
                }
            }
            assert_eq!(finish, "tool_calls");
            assert_eq!(streamed.len(), 1);
            assert_eq!(streamed[0]["function"], calls[0]["function"]);
            assert_eq!(streamed[0]["index"], 0);
        }
    }
    assert!(names.contains("get_weather"), "required never chose get_weather: {names:?}");

    // A conversation that carries calls and their results is taken.
    let body = json!({ "tools": tools, "max_tokens": 8, "temperature": 0, "messages": [
        { "role": "user", "content": "Weather in Rome?" },
        { "role": "assistant", "content": null, "tool_calls": [
            { "id": "call_1", "type": "function", "function": { "name": "get_weather", "arguments": "{\"city\": \"Rome\"}" } }] },
        { "role": "tool", "tool_call_id": "call_1", "content": "sunny" }] });
    let (code, r) = post(&s.base, "/v1/chat/completions", &body);
    assert_eq!(code, 200, "{r}");
    // tool_choice none: the tools are not shown, the answer is the plain one.
    let plain = json!({ "messages": [{ "role": "user", "content": "Hi" }], "max_tokens": 8, "temperature": 0 });
    let mut none = plain.clone();
    none["tools"] = tools.clone();
    none["tool_choice"] = json!("none");
    let (a, b) = (post(&s.base, "/v1/chat/completions", &plain).1, post(&s.base, "/v1/chat/completions", &none).1);
    assert_eq!(a["choices"][0]["message"], b["choices"][0]["message"]);
    // With tools shown (auto), the prompt differs, and so does the greedy answer here.
    let mut auto = plain.clone();
    auto["tools"] = tools.clone();
    let c = post(&s.base, "/v1/chat/completions", &auto).1;
    assert!(c["usage"]["prompt_tokens"].as_u64() > a["usage"]["prompt_tokens"].as_u64(), "{c}");

    for (path, bad) in [
        (
            "/v1/chat/completions",
            json!({ "tools": tools, "tool_choice": { "type": "function", "function": { "name": "x" } } }),
        ),
        ("/v1/chat/completions", json!({ "tools": { "a": 1 } })),
        ("/v1/chat/completions", json!({ "tool_choice": "required" })),
        ("/v1/chat/completions", json!({ "tools": [{ "type": "function", "function": { "name": "" } }] })),
        (
            "/v1/chat/completions",
            json!({ "tools": tools, "tool_choice": "required", "response_format": { "type": "json_object" } }),
        ),
        ("/v1/completions", json!({ "prompt": "Hi", "tools": tools })),
    ] {
        let mut body = bad.clone();
        if path.ends_with("chat/completions") {
            body["messages"] = json!([{ "role": "user", "content": "Hi" }]);
        }
        let (code, r) = post(&s.base, path, &body);
        assert_eq!((code, r["error"]["code"].as_str()), (400, Some("invalid_value")), "{bad}: {r}");
    }
}

/// `tool_choice: auto` (the default with tools): the answer is free until the model opens a
/// call with its `<tool_call>` token; from there on the tools' grammar holds, as llama.cpp's
/// lazy grammars do. On a synthetic Qwen3 whose vocabulary has `<tool_call>` as one token
/// (as Qwen3's has), a bias that makes the model open a call at once (and would make it
/// write `<tool_call>` forever if nothing constrained what follows) yields one valid call;
/// without the bias the answer is free text (no call forced).
#[test]
fn auto_tool_calls_follow_the_schema_once_opened() {
    use fucina_models::llm::synth::{self, Qwen3Shape};
    let dir = std::env::temp_dir().join(format!("fucina-auto-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tiny = tiny_tokenizer();
    let shape = Qwen3Shape {
        layers: 1,
        hidden: 64,
        ffn: 128,
        heads: 2,
        kv_heads: 1,
        head_dim: 32,
        vocab: tiny.vocab_size() + 4,
        context: 512,
        moe: None,
        tied: false,
    };
    let path = dir.join("auto-tools.gguf");
    synth::write(&synth::qwen3(&shape), fucina::quant::GgmlType::F32, 3, &path, |_, _| {}).unwrap();
    let open = Tokenizer::from_gguf(&fucina_models::lm::open(&path, false).unwrap().header)
        .unwrap()
        .token_id("<tool_call>")
        .expect("<tool_call> is one token");
    let s = common::start(&[path.to_str().unwrap(), "--threads", "2", "--max-tokens", "128"]);
    let tools = json!([{ "type": "function", "function": { "name": "get_weather",
        "parameters": { "type": "object", "properties": { "city": { "type": "string", "maxLength": 8 } },
                        "required": ["city"], "additionalProperties": false } } }]);
    for seed in 0..3 {
        let body = json!({ "messages": [{ "role": "user", "content": "Weather in Rome?" }], "tools": tools,
                           "temperature": 1, "seed": seed, "max_tokens": 128,
                           "logit_bias": { open.to_string(): 100 } });
        let (code, r) = post(&s.base, "/v1/chat/completions", &body);
        assert_eq!(code, 200, "{r}");
        let c = &r["choices"][0];
        assert_eq!(c["finish_reason"], "tool_calls", "{r}");
        let calls = c["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{r}");
        assert_eq!(calls[0]["function"]["name"], "get_weather");
        let args: Value = serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
        assert!(args["city"].as_str().is_some_and(|c| c.chars().count() <= 8), "{r}");
    }
    let free = json!({ "messages": [{ "role": "user", "content": "Weather in Rome?" }], "tools": tools,
                       "temperature": 0, "max_tokens": 16 });
    let (code, r) = post(&s.base, "/v1/chat/completions", &free);
    assert_eq!(code, 200, "{r}");
    assert_ne!(r["choices"][0]["finish_reason"], "tool_calls", "{r}");
    drop(s);
    std::fs::remove_dir_all(&dir).ok();
}

/// `/v1/responses`: the chat pipeline in the Responses shape: the same greedy answer as chat
/// in an `output_text` part, typed stream events that add up to it, required function
/// calls as `function_call` items, and what it cannot do refused by name.
#[test]
fn responses_endpoint_answers_as_chat_does() {
    let s = common::start(&["--threads", "2", "--max-tokens", "96"]);
    let chat = json!({ "messages": [{ "role": "system", "content": "Be brief." }, { "role": "user", "content": "Hi" }],
                       "max_tokens": 10, "temperature": 0 });
    let (_, c) = post(&s.base, "/v1/chat/completions", &chat);
    let want = c["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    let body = json!({ "input": "Hi", "instructions": "Be brief.", "max_output_tokens": 10, "temperature": 0 });
    let (code, r) = post(&s.base, "/v1/responses", &body);
    assert_eq!(code, 200, "{r}");
    assert_eq!(r["object"], "response");
    let msg = r["output"].as_array().unwrap().iter().find(|o| o["type"] == "message").unwrap();
    assert_eq!(msg["content"][0]["type"], "output_text");
    assert_eq!(msg["content"][0]["text"].as_str().unwrap(), want);
    assert_eq!(r["usage"]["output_tokens"], c["usage"]["completion_tokens"]);
    let thinks = r["output"].as_array().unwrap().iter().any(|o| o["type"] == "reasoning");
    assert_eq!(r["usage"]["output_tokens_details"]["reasoning_tokens"] == 0, !thinks, "{r}");
    let finish = c["choices"][0]["finish_reason"].as_str().unwrap();
    assert_eq!(r["status"], if finish == "length" { "incomplete" } else { "completed" });

    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let (mut kinds, mut text, mut seqs) = (Vec::new(), String::new(), Vec::new());
    for e in sse(&s.base, "/v1/responses", sb) {
        kinds.push(e["type"].as_str().unwrap().to_string());
        seqs.push(e["sequence_number"].as_u64().unwrap());
        if e["type"] == "response.output_text.delta" {
            text += e["delta"].as_str().unwrap();
        }
    }
    assert_eq!(text, want);
    assert_eq!(&kinds[..2], ["response.created", "response.in_progress"]);
    assert!(
        matches!(kinds.last().map(String::as_str), Some("response.completed" | "response.incomplete")),
        "{kinds:?}"
    );
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());

    // Bookkeeping keys change nothing in the answer.
    let mut kept = body.clone();
    for (k, v) in [
        ("metadata", json!({ "run": "1" })),
        ("user", json!("u")),
        ("store", json!(false)),
        ("truncation", json!("disabled")),
        ("include", json!([])),
    ] {
        kept[k] = v;
    }
    let (code, r2) = post(&s.base, "/v1/responses", &kept);
    assert_eq!(code, 200, "{r2}");
    let msg2 = r2["output"].as_array().unwrap().iter().find(|o| o["type"] == "message").unwrap();
    assert_eq!(msg2["content"][0]["text"].as_str(), Some(&*want));

    let tools = json!([{ "type": "function", "name": "now", "parameters": { "type": "object", "properties": {},
                                                                           "additionalProperties": false } }]);
    let body = json!({ "input": "Time?", "tools": tools, "tool_choice": "required", "parallel_tool_calls": false,
                       "max_output_tokens": 96 });
    let (code, r) = post(&s.base, "/v1/responses", &body);
    assert_eq!(code, 200, "{r}");
    let calls: Vec<&Value> = r["output"].as_array().unwrap().iter().filter(|o| o["type"] == "function_call").collect();
    assert_eq!(calls.len(), 1, "{r}");
    assert_eq!((calls[0]["name"].as_str(), calls[0]["arguments"].as_str()), (Some("now"), Some("{}")));

    for (bad, code_want) in [
        (json!({ "input": "Hi", "previous_response_id": "resp_none" }), "previous_response_not_found"),
        (json!({ "input": "Hi", "conversation": "conv_1" }), "unsupported_parameter"),
        (json!({ "input": "Hi", "store": "yes" }), "unsupported_parameter"),
        (json!({ "input": [{ "type": "input_image", "image_url": "x" }] }), "unsupported_parameter"),
        (json!({ "input": "Hi", "tools": [{ "type": "web_search" }] }), "unsupported_parameter"),
        (json!({ "input": 5 }), "invalid_value"),
        (json!({ "input": "Hi", "truncation": "auto" }), "unsupported_parameter"),
        (json!({ "input": "Hi", "include": ["reasoning.encrypted_content"] }), "unsupported_parameter"),
        (json!({ "input": "Hi", "prompt": { "id": "pmpt_1" } }), "unsupported_parameter"),
        (json!({ "input": "Hi", "top_logprobs": 3 }), "unsupported_parameter"),
        (json!({ "input": "Hi", "max_tool_calls": 2 }), "unsupported_parameter"),
    ] {
        let (code, r) = post(&s.base, "/v1/responses", &bad);
        assert_eq!((code, r["error"]["code"].as_str()), (400, Some(code_want)), "{bad}: {r}");
        // The message names the refused key.
        let key = bad.as_object().unwrap().keys().find(|k| *k != "input").map_or("input", |k| k.as_str());
        assert!(r["error"]["message"].as_str().unwrap().contains(key), "{bad}: {r}");
    }
}

/// `/v1/responses` with reasoning: the `<think>` block is a `reasoning` item before the
/// message, the same text as chat's `reasoning_content`; streamed, it arrives as
/// `response.reasoning_text.delta` events (one per decoded piece) inside its own item (added,
/// part added, deltas, done, part done, item done) that add up to that text, before the first
/// output text.
#[test]
fn responses_stream_reasoning_as_its_own_item() {
    let s = start();
    let (open, close) = think_tokens();
    let bias = json!({ open.to_string(): 12, close.to_string(): 9 });
    let chat = json!({ "messages": [{ "role": "user", "content": "Hi" }], "max_tokens": 16, "temperature": 0,
                       "frequency_penalty": 2, "logit_bias": bias });
    let (code, c) = post(&s.base, "/v1/chat/completions", &chat);
    assert_eq!(code, 200, "{c}");
    let want_r = c["choices"][0]["message"]["reasoning_content"].as_str().expect("reasoning").to_string();
    let want_c = c["choices"][0]["message"]["content"].as_str().unwrap().to_string();
    assert!(!want_r.is_empty() && !want_c.is_empty(), "{c}");
    let body = json!({ "input": "Hi", "max_output_tokens": 16, "temperature": 0, "frequency_penalty": 2,
                       "logit_bias": bias });
    let (code, r) = post(&s.base, "/v1/responses", &body);
    assert_eq!(code, 200, "{r}");
    let out = r["output"].as_array().unwrap();
    assert_eq!((out[0]["type"].as_str(), out[1]["type"].as_str()), (Some("reasoning"), Some("message")), "{r}");
    assert_eq!(out[0]["content"][0]["text"].as_str(), Some(&*want_r));
    assert_eq!(out[1]["content"][0]["text"].as_str(), Some(&*want_c));
    // The think block's tokens (its two tags at least) are counted, the reply's are not.
    let thought = r["usage"]["output_tokens_details"]["reasoning_tokens"].as_u64().unwrap();
    assert!(thought >= 2 && thought < r["usage"]["output_tokens"].as_u64().unwrap(), "{r}");

    let mut sb = body.clone();
    sb["stream"] = json!(true);
    let (mut kinds, mut thought, mut text, mut last) = (Vec::new(), String::new(), String::new(), Value::Null);
    let mut ids = Vec::new();
    for e in sse(&s.base, "/v1/responses", sb) {
        let kind = e["type"].as_str().unwrap().to_string();
        match kind.as_str() {
            "response.reasoning_text.delta" => {
                assert_eq!(e["output_index"].as_u64(), Some(0));
                ids.push(e["item_id"].clone());
                thought += e["delta"].as_str().unwrap();
            }
            "response.reasoning_text.done" => assert_eq!(e["text"].as_str(), Some(&*want_r)),
            "response.output_text.delta" => text += e["delta"].as_str().unwrap(),
            "response.completed" | "response.incomplete" => last = e["response"]["output"].clone(),
            _ => {}
        }
        kinds.push(kind);
    }
    assert_eq!((&thought, &text), (&want_r, &want_c));
    // The final response carries the same items (ids differ: another response).
    let texts = |o: &Value| {
        o.as_array().unwrap().iter().map(|i| (i["type"].clone(), i["content"][0]["text"].clone())).collect::<Vec<_>>()
    };
    assert_eq!(texts(&last), texts(&r["output"]));
    assert!(ids.iter().all(|i| *i == last[0]["id"]), "{ids:?} vs {}", last[0]["id"]);
    let first = |k: &str| kinds.iter().position(|x| x == k).unwrap_or_else(|| panic!("no {k} in {kinds:?}"));
    let deltas = kinds.iter().filter(|k| *k == "response.reasoning_text.delta").count();
    assert!(deltas >= 1, "{kinds:?}");
    assert!(first("response.output_item.added") < first("response.reasoning_text.delta"));
    assert!(first("response.reasoning_text.done") < first("response.output_text.delta"), "{kinds:?}");
}

/// `previous_response_id`: a stored response's conversation (its input and answer, not its
/// instructions) comes before the new input, so the answer is chat's answer to the whole
/// conversation; streamed responses are stored too; `store: false` keeps nothing.
#[test]
fn previous_response_id_continues_the_conversation() {
    let s = start();
    let first = json!({ "input": "Hi", "instructions": "Be brief.", "max_output_tokens": 8, "temperature": 0 });
    let (code, r1) = post(&s.base, "/v1/responses", &first);
    assert_eq!(code, 200, "{r1}");
    let said = r1["output"].as_array().unwrap().iter().find(|o| o["type"] == "message").unwrap()["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    let next = |prev: &Value, stream: bool| {
        json!({ "input": "And then?", "instructions": "Be brief.", "max_output_tokens": 8, "temperature": 0,
                "previous_response_id": prev, "stream": stream })
    };
    let (code, r2) = post(&s.base, "/v1/responses", &next(&r1["id"], false));
    assert_eq!(code, 200, "{r2}");
    let chat = json!({ "max_tokens": 8, "temperature": 0, "messages": [
        { "role": "system", "content": "Be brief." }, { "role": "user", "content": "Hi" },
        { "role": "assistant", "content": said }, { "role": "user", "content": "And then?" }] });
    let (_, c) = post(&s.base, "/v1/chat/completions", &chat);
    let text = |r: &Value| {
        r["output"].as_array().unwrap().iter().find(|o| o["type"] == "message").unwrap()["content"][0]["text"].clone()
    };
    assert_eq!(text(&r2), c["choices"][0]["message"]["content"], "{r2} vs {c}");
    assert_eq!(r2["usage"]["input_tokens"], c["usage"]["prompt_tokens"]);
    // A streamed response is kept as well: chaining onto it works.
    let mut id = Value::Null;
    for e in sse(&s.base, "/v1/responses", next(&r2["id"], true)) {
        if e["type"] == "response.completed" || e["type"] == "response.incomplete" {
            id = e["response"]["id"].clone();
        }
    }
    let (code, r4) = post(&s.base, "/v1/responses", &next(&id, false));
    assert_eq!(code, 200, "{r4}");
    assert!(r4["usage"]["input_tokens"].as_u64() > r2["usage"]["input_tokens"].as_u64(), "{r4}");
    // store: false: nothing to continue from.
    let mut unstored = first.clone();
    unstored["store"] = json!(false);
    let (_, r5) = post(&s.base, "/v1/responses", &unstored);
    let (code, r6) = post(&s.base, "/v1/responses", &next(&r5["id"], false));
    assert_eq!((code, r6["error"]["code"].as_str()), (400, Some("previous_response_not_found")), "{r6}");

    // GET /v1/responses/{id}: the object the POST returned; DELETE forgets it.
    let url = |id: &Value| format!("{}/v1/responses/{}", s.base, id.as_str().unwrap());
    let got: Value = ureq::get(&url(&r1["id"])).call().unwrap().into_json().unwrap();
    assert_eq!(got, r1);
    let streamed: Value = ureq::get(&url(&id)).call().unwrap().into_json().unwrap();
    assert_eq!((streamed["id"].clone(), streamed["object"].as_str()), (id.clone(), Some("response")));
    let gone = |r: std::result::Result<ureq::Response, ureq::Error>| match r {
        Err(ureq::Error::Status(code, r)) => (code, r.into_json::<Value>().unwrap()["error"]["code"].clone()),
        other => panic!("{other:?}"),
    };
    assert_eq!(gone(ureq::get(&url(&r5["id"])).call()), (404, json!("not_found")), "store: false is not kept");
    let deleted: Value = ureq::delete(&url(&r1["id"])).call().unwrap().into_json().unwrap();
    assert_eq!(deleted, json!({ "id": r1["id"], "object": "response", "deleted": true }));
    assert_eq!(gone(ureq::get(&url(&r1["id"])).call()), (404, json!("not_found")));
    assert_eq!(gone(ureq::delete(&url(&r1["id"])).call()), (404, json!("not_found")));
    let (code, r7) = post(&s.base, "/v1/responses", &next(&r1["id"], false));
    assert_eq!((code, r7["error"]["code"].as_str()), (400, Some("previous_response_not_found")), "{r7}");
}

/// `serve --speculate`: greedy answers (chat and completions) are the same text as without
/// drafts, and seeded sampled requests are reproducible, with and without drafts, also when
/// the second one reuses the first one's cached prompt.
#[test]
fn speculative_server_answers_as_the_plain_one() {
    let plain = common::start(&["--threads", "2", "--max-tokens", "48"]);
    let spec = common::start(&["--threads", "2", "--max-tokens", "48", "--speculate", "6"]);
    let bodies = [
        (
            "/v1/chat/completions",
            json!({ "messages": [{ "role": "user", "content": "Quote: the capital of france is paris . the capital of france is paris ." }],
                                         "max_tokens": 48, "temperature": 0, "frequency_penalty": -2 }),
        ),
        (
            "/v1/completions",
            json!({ "prompt": "the capital of france is paris . the capital of france is", "max_tokens": 48,
                                    "temperature": 0, "frequency_penalty": -2 }),
        ),
        ("/v1/completions", json!({ "prompt": "Hello world", "max_tokens": 48, "temperature": 0 })),
    ];
    for (path, body) in &bodies {
        let (a, b) = (post(&plain.base, path, body).1, post(&spec.base, path, body).1);
        assert_eq!(a["choices"][0], b["choices"][0], "{path}");
        assert_eq!(a["usage"], b["usage"], "{path}");
    }
    let body = json!({ "prompt": "the capital of france is paris . the capital of", "max_tokens": 32,
                       "temperature": 0.8, "seed": 3, "frequency_penalty": -2 });
    let (a, b) = (post(&spec.base, "/v1/completions", &body).1, post(&spec.base, "/v1/completions", &body).1);
    assert_eq!(a["choices"][0]["text"], b["choices"][0]["text"], "seeded sampling with drafts is reproducible");
    // The second request reuses the cached prompt; the penalties must still see all of it
    // (they once saw only the re-fed last token, and the repeat answered differently).
    let (a, b) = (post(&plain.base, "/v1/completions", &body).1, post(&plain.base, "/v1/completions", &body).1);
    assert_eq!(
        a["choices"][0]["text"], b["choices"][0]["text"],
        "a repeated request reuses the cache and answers alike"
    );
}
