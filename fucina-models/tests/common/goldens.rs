//! The checks of a decoder family's goldens (`tools/gen_llama_family_tiny.py`,
//! `tools/gen_glm4moe_tiny.py`): `{"models": {name: {"model", "arch", "tokenizer": [{text,
//! ids}], "cases": [{ids, prefill, greedy, decode}]}}}`.

use super::{argmax, logit_rows, max_diff};
use fucina::prelude::*;
use fucina_models::llm::{KvType, LogitRows, Tokenizer};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The golden file `tests/goldens/<name>`.
pub fn load(name: &str) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(root().join("tests/goldens").join(name)).unwrap()).unwrap()
}

/// A JSON array of token ids.
pub fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// Every model's tokenizer gives exactly the golden ids for every string (at least 20).
pub fn check_tokens(gold: &serde_json::Value) {
    for (name, m) in gold["models"].as_object().unwrap() {
        let f = fucina::formats::gguf::GgufFile::open(root().join(m["model"].as_str().unwrap())).unwrap();
        let tok = Tokenizer::from_gguf(f.header()).unwrap();
        let cases = m["tokenizer"].as_array().unwrap();
        assert!(cases.len() >= 20);
        for c in cases {
            let text = c["text"].as_str().unwrap();
            assert_eq!(tok.encode(text).unwrap(), ids(&c["ids"]), "{name}: ids for {text:?}");
        }
    }
}

/// Every model, opened through `lm::open` as the binaries open it, on `backend` with
/// `threads`: logits of every prefill position and of each greedy decode step within `tol`
/// (max abs), greedy tokens identical. Returns the model names checked, sorted.
pub fn check_logits(gold: &serde_json::Value, backend: BackendKind, threads: usize, tol: f32) -> Vec<String> {
    let ctx = ExecContext::with_backend(backend, threads).unwrap();
    let _g = ctx.enter();
    let mut seen = Vec::new();
    for (name, m) in gold["models"].as_object().unwrap() {
        let lm = fucina_models::lm::open(&root().join(m["model"].as_str().unwrap()), false).unwrap();
        assert_eq!(lm.arch, m["arch"].as_str().unwrap());
        seen.push(name.clone());
        let vocab = lm.model.vocab_size();
        for case in m["cases"].as_array().unwrap() {
            let ids = ids(&case["ids"]);
            let mut cache = lm.model.new_cache(64, KvType::F32).unwrap();
            let prefill = lm.model.forward(&ids, &mut cache, LogitRows::All).unwrap().to_f32_vec();
            for (p, want) in logit_rows(&case["prefill"]).iter().enumerate() {
                let d = max_diff(&prefill[p * vocab..(p + 1) * vocab], want);
                assert!(d <= tol, "{name} {backend:?}: prefill position {p}: max diff {d}");
            }
            let greedy = self::ids(&case["greedy"]);
            let mut next = argmax(&prefill[(ids.len() - 1) * vocab..]);
            for (step, want) in logit_rows(&case["decode"]).iter().enumerate() {
                assert_eq!(next, greedy[step], "{name} {backend:?}: greedy token {step}");
                let got = lm.model.forward(&[next], &mut cache, LogitRows::Last).unwrap().to_f32_vec();
                let d = max_diff(&got, want);
                assert!(d <= tol, "{name} {backend:?}: decode step {step}: max diff {d}");
                next = argmax(&got);
            }
        }
    }
    seen.sort();
    seen
}
