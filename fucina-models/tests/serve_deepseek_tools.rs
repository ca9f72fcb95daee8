//! DeepSeek's tool calling end to end over loopback: a small random DeepSeek-V3 whose
//! vocabulary has R1's chat and tool tokens (as control tokens) is served; a required or
//! named tool call comes back as OpenAI `tool_calls` whose arguments follow the tool's
//! schema (the grammar references the tags by id), streamed and not; a conversation with
//! calls and results is taken; R1's prompt opens the answer's `<think>`, so with thinking on
//! the answer is reasoning from its first token.

mod common;

use fucina::quant::GgmlType;
use fucina_models::llm::synth::{deepseek, write, DeepSeekShape, SynthChat};
use serde_json::{json, Value};
use std::path::PathBuf;

/// A DeepSeek-V3-routed MoE small enough to build in a blink, with R1's chat vocabulary.
fn model() -> PathBuf {
    let shape = DeepSeekShape {
        layers: 2,
        hidden: 64,
        heads: 2,
        q_lora: Some(32),
        kv_lora: 32,
        qk_nope: 16,
        qk_rope: 16,
        v_head: 16,
        ffn: 96,
        dense_lead: 1,
        experts: 8,
        used: 2,
        shared: 1,
        expert_ffn: 32,
        vocab: 1100,
        context: 512,
        v3: true,
    };
    let mut m = deepseek(&shape);
    m.chat = SynthChat::DeepSeekR1;
    let dir = std::env::temp_dir().join(format!("fucina-deepseek-tools-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("r1-tiny.gguf");
    write(&m, GgmlType::F32, 7, &path, |_, _| {}).unwrap();
    path
}

fn post(base: &str, body: &Value) -> (u16, Value) {
    match ureq::post(&format!("{base}/v1/chat/completions")).send_json(body.clone()) {
        Ok(r) => (r.status(), r.into_json().unwrap()),
        Err(ureq::Error::Status(code, r)) => (code, r.into_json().unwrap()),
        Err(e) => panic!("{e}"),
    }
}

fn sse(base: &str, body: Value) -> Vec<Value> {
    let r = ureq::post(&format!("{base}/v1/chat/completions")).send_json(body).unwrap();
    let text = r.into_string().unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .take_while(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[test]
fn deepseek_tool_calls_over_loopback() {
    let path = model();
    let s = common::start(&["--threads", "2", "--max-tokens", "96", path.to_str().unwrap()]);
    let tools = json!([
        { "type": "function", "function": { "name": "get_weather",
          "parameters": { "type": "object", "properties": { "city": { "type": "string", "maxLength": 6 } },
                          "required": ["city"], "additionalProperties": false } } },
        { "type": "function", "function": { "name": "now", "parameters": { "type": "object", "properties": {},
                                                                             "additionalProperties": false } } }
    ]);
    let ask = |choice: Value, seed: u64, stream: bool, parallel: bool| {
        json!({ "messages": [{ "role": "user", "content": "Weather in Rome?" }], "tools": tools,
                "tool_choice": choice, "parallel_tool_calls": parallel, "temperature": 1, "seed": seed,
                "max_tokens": 96, "stream": stream })
    };
    let check_call = |c: &Value, only: Option<&str>| {
        assert_eq!(c["type"], "function", "{c}");
        let name = c["function"]["name"].as_str().unwrap();
        let args: Value = serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap();
        match name {
            "get_weather" => assert!(args["city"].as_str().is_some_and(|c| c.chars().count() <= 6), "{c}"),
            "now" => assert_eq!(args, json!({})),
            other => panic!("unknown tool {other}"),
        }
        if let Some(n) = only {
            assert_eq!(name, n);
        }
    };
    let mut names = std::collections::BTreeSet::new();
    let mut finished = 0;
    for seed in 0..4 {
        for (choice, only) in
            [(json!("required"), None), (json!({ "type": "function", "function": { "name": "now" } }), Some("now"))]
        {
            let (code, r) = post(&s.base, &ask(choice.clone(), seed, false, false));
            assert_eq!(code, 200, "{r}");
            let c = &r["choices"][0];
            // A random model may run out of tokens inside a long string argument: then the
            // block never closes and there is no call. Most answers do finish.
            if c["finish_reason"] == "length" {
                continue;
            }
            finished += 1;
            assert_eq!(c["finish_reason"], "tool_calls", "{r}");
            let calls = c["message"]["tool_calls"].as_array().unwrap();
            assert_eq!(calls.len(), 1, "{r}");
            check_call(&calls[0], only);
            assert!(c["message"]["content"].is_null(), "{r}");
            names.insert(calls[0]["function"]["name"].as_str().unwrap().to_string());
            // Streamed: the same call.
            let streamed: Vec<Value> = sse(&s.base, ask(choice, seed, true, false))
                .iter()
                .filter_map(|ch| ch["choices"][0]["delta"]["tool_calls"].as_array().cloned())
                .flatten()
                .collect();
            assert_eq!(streamed.len(), 1);
            assert_eq!(streamed[0]["function"], calls[0]["function"]);
        }
    }
    assert!(finished >= 6, "only {finished} of 8 forced answers finished");
    assert!(names.contains("get_weather"), "required never chose get_weather: {names:?}");

    // Parallel calls: every call in the block follows its schema.
    for seed in 0..3 {
        let (code, r) = post(&s.base, &ask(json!("required"), seed, false, true));
        assert_eq!(code, 200, "{r}");
        if let Some(calls) = r["choices"][0]["message"]["tool_calls"].as_array() {
            calls.iter().for_each(|c| check_call(c, None));
        }
    }

    // `auto`: the lazy grammar, triggered by the `<｜tool▁calls▁begin｜>` token, compiles
    // for DeepSeek's syntax; a logit bias that forces the trigger makes the model call.
    let (code, r) = post(&s.base, &ask(json!("auto"), 0, false, false));
    assert_eq!(code, 200, "{r}");
    let header = fucina::formats::gguf::GgufFile::open(&path).unwrap().header().clone();
    let tok = fucina_models::llm::Tokenizer::from_gguf(&header).unwrap();
    let open = tok.token_id("<｜tool▁calls▁begin｜>").unwrap();
    let mut forced = ask(json!("auto"), 0, false, false);
    forced["logit_bias"] = json!({ open.to_string(): 100 });
    forced["enable_thinking"] = json!(false);
    let (code, r) = post(&s.base, &forced);
    assert_eq!(code, 200, "{r}");
    if r["choices"][0]["finish_reason"] != "length" {
        assert_eq!(r["choices"][0]["finish_reason"], "tool_calls", "{r}");
        check_call(&r["choices"][0]["message"]["tool_calls"][0], None);
    }

    // A conversation that carries calls and their results is taken.
    let body = json!({ "tools": tools, "max_tokens": 8, "temperature": 0, "messages": [
        { "role": "user", "content": "Weather in Rome?" },
        { "role": "assistant", "content": null, "tool_calls": [
            { "id": "call_1", "type": "function", "function": { "name": "get_weather", "arguments": "{\"city\": \"Rome\"}" } }] },
        { "role": "tool", "tool_call_id": "call_1", "content": "sunny" }] });
    let (code, r) = post(&s.base, &body);
    assert_eq!(code, 200, "{r}");

    // R1's prompt opens `<think>`: with thinking on and reasoning separated, the answer is
    // reasoning from its first token (the random model never closes it), counted as such.
    let body = json!({ "messages": [{ "role": "user", "content": "Hi" }], "max_tokens": 12, "temperature": 0 });
    let (code, r) = post(&s.base, &body);
    assert_eq!(code, 200, "{r}");
    let m = &r["choices"][0]["message"];
    assert!(m["reasoning_content"].as_str().is_some_and(|t| !t.is_empty()), "{r}");
    let reasoning = r["usage"]["completion_tokens_details"]["reasoning_tokens"].as_u64().unwrap();
    let answer = r["usage"]["completion_tokens"].as_u64().unwrap();
    if m["content"].as_str().is_none_or(str::is_empty) {
        assert_eq!(reasoning, answer, "{r}");
    } else {
        assert!(reasoning > 0 && reasoning < answer, "{r}");
    }
    let _ = std::fs::remove_file(&path);
}
