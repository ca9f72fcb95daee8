//! Shared by the integration tests: the `serve` binary started on a free loopback port,
//! logit comparisons, and the checks of a decoder family's goldens ([`goldens`]).
#![allow(dead_code)] // each test binary uses its own part

pub mod goldens;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// A running `serve`, killed when dropped.
pub struct Server {
    /// The process.
    pub child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The library's own answer to `messages` (rendered in the chat format the file's vocabulary
/// implies, with thinking on, as the server renders them) on the model at `path`, from a
/// fresh cache of 256 positions on 2 native threads: the reference a server's answer must
/// equal.
pub fn library_answer(
    path: &std::path::Path,
    messages: &[fucina_models::llm::chat::Message],
    max_tokens: usize,
    params: fucina_models::llm::SamplingParams,
) -> String {
    use fucina::prelude::*;
    use fucina_models::llm::generate::{generate, GenerateOptions};
    use fucina_models::llm::{KvType, Sampler, Tokenizer};
    let ctx = ExecContext::with_backend(BackendKind::Native, 2).unwrap();
    let _g = ctx.enter();
    let lm = fucina_models::lm::open(path, false).unwrap();
    let tok = Tokenizer::from_gguf(&lm.header).unwrap();
    // The chat format the file's vocabulary implies, as the server picks it; thinking on (its
    // default).
    let template = lm.header.get("tokenizer.chat_template").and_then(|v| v.as_str());
    let format = fucina_models::llm::chat::ChatFormat::detect(|t| tok.token_id(t).is_some(), &lm.arch, template);
    let prompt = tok.encode_prompt(&format.prompt(messages, true)).unwrap();
    let mut cache = lm.model.new_cache(256, KvType::F32).unwrap();
    let mut sampler = Sampler::new(params);
    let stop_tokens = fucina_models::llm::cli::stop_tokens(&lm.header, &tok);
    let opts = GenerateOptions { max_tokens, stop_tokens, ..GenerateOptions::default() };
    let mut text = String::new();
    generate(&*lm.model, &tok, &mut cache, &prompt, &mut sampler, &opts, &mut |s| {
        text.push_str(s);
        true
    })
    .unwrap();
    text
}

/// The server on the model at `path` (one slot, greedy, at most `max_tokens`, reasoning
/// inline, plus `extra` flags) answers as the library does from a fresh cache: a first
/// request (some text), the same request again, and a longer conversation on the first one's
/// prefix (the slot's kept prefix serves it). Returns the first answer.
pub fn server_answers_as_the_library(path: &std::path::Path, max_tokens: usize, extra: &[&str]) -> String {
    use fucina_models::llm::chat::{Message, Role};
    use fucina_models::llm::SamplingParams;
    use serde_json::{json, Value};
    let reference = |messages: &[Message]| library_answer(path, messages, max_tokens, SamplingParams::default());
    let limit = max_tokens.to_string();
    let mut args = vec![path.to_str().unwrap(), "--threads", "2", "--parallel", "1", "--max-tokens", &limit];
    args.extend_from_slice(&["--reasoning-format", "inline"]);
    args.extend_from_slice(extra);
    let server = start(&args);
    // The server names the model by its file's stem.
    let model = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
    let ask = |messages: &[(&str, &str)]| -> String {
        let msgs: Vec<Value> = messages.iter().map(|(r, c)| json!({"role": r, "content": c})).collect();
        let body = json!({"model": model, "messages": msgs, "temperature": 0});
        let r: Value =
            ureq::post(&format!("{}/v1/chat/completions", server.base)).send_json(body).unwrap().into_json().unwrap();
        r["choices"][0]["message"]["content"].as_str().unwrap().to_string()
    };
    let first = ask(&[("user", "hello there")]);
    assert!(!first.trim().is_empty(), "an answer of some text");
    assert_eq!(first, reference(&[Message::new(Role::User, "hello there")]));
    assert_eq!(ask(&[("user", "hello there")]), first, "the same request again");
    let longer = [("user", "hello there"), ("assistant", first.as_str()), ("user", "and again")];
    let want = reference(&[
        Message::new(Role::User, "hello there"),
        Message::new(Role::Assistant, first.as_str()),
        Message::new(Role::User, "and again"),
    ]);
    assert_eq!(ask(&longer), want, "a conversation on the first request's prefix");
    first
}

/// Starts `serve --port 0` with `args` and waits for its address.
pub fn start(args: &[&str]) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_serve"))
        .args(["--port", "0"])
        .args(args)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the server");
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let base = loop {
        let line = lines.next().expect("server output").unwrap();
        if let Some(url) = line.strip_prefix("listening on ") {
            break url.trim().to_string();
        }
    };
    // Keep draining stderr so the server never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let addr = base.trim_start_matches("http://").to_string();
    Server { child, base, addr }
}

/// A streamed chat completion's text: the `delta.content` of every server-sent event until
/// `[DONE]`.
pub fn streamed_content(resp: ureq::Response) -> String {
    let mut out = String::new();
    for line in BufReader::new(resp.into_reader()).lines() {
        let line = line.unwrap();
        match line.strip_prefix("data: ") {
            Some("[DONE]") => break,
            Some(d) => {
                let c: serde_json::Value = serde_json::from_str(d).unwrap();
                out.push_str(c["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
            }
            None => {}
        }
    }
    out
}

/// How close logits `a` are to `b`: cosine similarity, and the largest difference over the
/// largest magnitude of `b`.
pub fn closeness(a: &[f32], b: &[f32]) -> (f64, f32) {
    let dot: f64 = a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum();
    let na: f64 = a.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let nb: f64 = b.iter().map(|x| (*x as f64).powi(2)).sum::<f64>().sqrt();
    let amax = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let dmax = a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
    (dot / (na * nb), dmax / amax)
}

/// A golden's logits rows (`[[f64]]` JSON) as f32.
pub fn logit_rows(v: &serde_json::Value) -> Vec<Vec<f32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect())
        .collect()
}

/// The index of the largest value (the first on ties).
pub fn argmax(v: &[f32]) -> u32 {
    v.iter().enumerate().fold((0, f32::NEG_INFINITY), |b, (i, &x)| if x > b.1 { (i, x) } else { b }).0 as u32
}

/// The largest absolute difference of two equally long slices.
pub fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
