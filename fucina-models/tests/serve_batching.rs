//! Continuous batching in the server: eight streaming requests sent at once to a server with
//! eight slots run together (one forward pass serves several of them: `/health` reports the
//! widest pass), and each stream's text is exactly the library's own answer to that request
//! alone — greedy ones token for token, seeded sampled ones draw for draw. Requests that
//! arrive while others decode join the running batch (their prompts prefill in chunks
//! between decode steps), and a chat that grows turn by turn still reuses its slot's
//! prefix.

use fucina::prelude::*;
use fucina_models::llm::chat::{render_chat, Message, Role};
use fucina_models::llm::cli::{default_model, stop_tokens};
use fucina_models::llm::generate::{generate, GenerateOptions};
use fucina_models::llm::KvType;
use fucina_models::llm::{Sampler, SamplingParams, Tokenizer};
use serde_json::{json, Value};

mod common;

const MAX_TOKENS: usize = 40;

/// The library's answer to one user message alone.
fn reference(user: &str, params: SamplingParams) -> String {
    let ctx = ExecContext::with_backend(BackendKind::Native, 2).unwrap();
    let _g = ctx.enter();
    let lm = fucina_models::lm::open(&default_model(), false).unwrap();
    let tok = Tokenizer::from_gguf(&lm.header).unwrap();
    let prompt = tok.encode(&render_chat(&[Message::new(Role::User, user)], true)).unwrap();
    let mut cache = lm.model.new_cache(1024, KvType::F32).unwrap();
    let opts = GenerateOptions {
        max_tokens: MAX_TOKENS,
        stop_tokens: stop_tokens(&lm.header, &tok),
        ..GenerateOptions::default()
    };
    let mut text = String::new();
    generate(&*lm.model, &tok, &mut cache, &prompt, &mut Sampler::new(params), &opts, &mut |s| {
        text.push_str(s);
        true
    })
    .unwrap();
    text
}

/// A streamed chat answer: the concatenated content deltas.
fn stream(base: &str, user: &str, temperature: f32, seed: u64) -> String {
    let body = json!({ "model": "qwen3-tiny-f32", "messages": [{ "role": "user", "content": user }],
                       "max_tokens": MAX_TOKENS, "temperature": temperature, "seed": seed, "stream": true });
    let resp = ureq::post(&format!("{base}/v1/chat/completions")).send_json(body).unwrap();
    common::streamed_content(resp)
}

fn health(base: &str) -> Value {
    ureq::get(&format!("{base}/health")).call().unwrap().into_json().unwrap()
}

#[test]
fn concurrent_streams_share_passes_and_each_equals_its_run_alone() {
    let s = common::start(&["--threads", "2", "--parallel", "8", "--max-tokens", "64"]);
    assert_eq!(health(&s.base)["slots"]["total"], 8);
    // A long prompt among short ones: it prefills in chunks while the others decode.
    let long = format!("Summarize: {}", "the quick brown fox jumps over the lazy dog. ".repeat(8));
    let users: Vec<String> = [
        "Hello",
        "What is rust?",
        "bonjour monde",
        "tensors and axes",
        long.as_str(),
        "Name three colours.",
        "Count to five.",
        "Hello",
    ]
    .iter()
    .map(|u| u.to_string())
    .collect();
    // Even requests greedy, odd ones sampled with their own seed.
    let params = |i: usize| -> (f32, u64) {
        if i.is_multiple_of(2) {
            (0.0, 0)
        } else {
            (0.9, 100 + i as u64)
        }
    };
    let want: Vec<String> = users
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let (temperature, seed) = params(i);
            reference(u, SamplingParams { temperature, seed, ..SamplingParams::default() })
        })
        .collect();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(users.len()));
    let handles: Vec<_> = users
        .iter()
        .enumerate()
        .map(|(i, u)| {
            let (base, u, barrier) = (s.base.clone(), u.clone(), barrier.clone());
            let (temperature, seed) = params(i);
            std::thread::spawn(move || {
                barrier.wait();
                stream(&base, &u, temperature, seed)
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), want[i], "request {i} ({:.20}...)", users[i]);
    }
    // A slot is released just after its stream's last event is sent: the client can read the
    // end before the engine has freed it, so wait (bounded) for every slot to come back.
    let mut h = health(&s.base);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while h["slots"]["busy"] != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        h = health(&s.base);
    }
    let widest = h["slots"]["widest_step"].as_u64().unwrap();
    assert!(widest >= 2, "no pass served two requests: they ran one at a time ({h})");
    assert_eq!(h["slots"]["busy"], 0, "slots still busy 10 s after every stream ended: {h}");

    // A conversation that grows turn by turn answers as the library does, with its slot's
    // prefix reused (the second turn starts with the first turn's tokens).
    let first = stream(&s.base, "Hello", 0.0, 0);
    assert_eq!(first, want[0]);
    let body = json!({ "messages": [{ "role": "user", "content": "Hello" }, { "role": "assistant", "content": first },
                                    { "role": "user", "content": "And then?" }],
                       "max_tokens": 8, "temperature": 0 });
    let r: Value = ureq::post(&format!("{}/v1/chat/completions", s.base)).send_json(body).unwrap().into_json().unwrap();
    assert!(r["choices"][0]["message"]["content"].is_string(), "{r}");
}
