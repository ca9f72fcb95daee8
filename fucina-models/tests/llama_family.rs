//! The Llama-family decoder on `llama` and `qwen2` files against `transformers`: tiny
//! LlamaForCausalLM (grouped-query attention, untied output, Llama 3 RoPE scaling written as
//! `rope_freqs`, q/k rows permuted for interleaved RoPE), a Llama 2 on a SentencePiece
//! vocabulary with linear RoPE scaling, and Qwen2ForCausalLM (q/k/v biases, tied output),
//! converted by llama.cpp's own `convert_hf_to_gguf.py` (`tools/gen_llama_family_tiny.py`).
//! Checked: token ids exactly as HF `tokenizers` (Llama 3's `llama-bpe` and Qwen2's
//! pre-tokenizers) and `sentencepiece` give them; logits of every prefill position and 16
//! greedy decode steps on both backends, through `lm::open` as the binaries load them.
//!
//! Tolerance: max |fucina - transformers| <= 5e-5 on logits of magnitude ~1-10 (both f32;
//! summation order). Greedy tokens must be identical.

mod common;
use common::{argmax, logit_rows as rows, max_diff};
use fucina::prelude::*;
use fucina_models::llm::LogitRows;
use fucina_models::llm::{KvType, Tokenizer};

const TOL: f32 = 5e-5;

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn golden() -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(root().join("tests/goldens/llama_family.json")).unwrap()).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

#[test]
fn token_ids_match_hf_tokenizers_exactly() {
    let gold = golden();
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

fn check(backend: BackendKind, threads: usize) {
    let ctx = ExecContext::with_backend(backend, threads).unwrap();
    let _g = ctx.enter();
    let gold = golden();
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
            for (p, want) in rows(&case["prefill"]).iter().enumerate() {
                let d = max_diff(&prefill[p * vocab..(p + 1) * vocab], want);
                assert!(d <= TOL, "{name} {backend:?}: prefill position {p}: max diff {d}");
            }
            let greedy = self::ids(&case["greedy"]);
            let mut next = argmax(&prefill[(ids.len() - 1) * vocab..]);
            for (step, want) in rows(&case["decode"]).iter().enumerate() {
                assert_eq!(next, greedy[step], "{name} {backend:?}: greedy token {step}");
                let got = lm.model.forward(&[next], &mut cache, LogitRows::Last).unwrap().to_f32_vec();
                let d = max_diff(&got, want);
                assert!(d <= TOL, "{name} {backend:?}: decode step {step}: max diff {d}");
                next = argmax(&got);
            }
        }
    }
    seen.sort();
    assert_eq!(seen, ["llama", "llama-spm", "qwen2"]);
}

#[test]
fn tiny_llama_and_qwen2_match_transformers_on_both_backends() {
    check(BackendKind::Scalar, 1);
    check(BackendKind::Native, 2);
}

/// A raw completion prompt starts with BOS where the file says to add one, once.
#[test]
fn completion_prompts_get_bos_when_the_file_asks() {
    use fucina::formats::gguf::Value;
    let f = fucina::formats::gguf::GgufFile::open(root().join("assets/llama-tiny-f32.gguf")).unwrap();
    let mut h = f.header().clone();
    let bos = h.get("tokenizer.ggml.bos_token_id").and_then(|v| v.as_u64()).unwrap() as u32;
    let plain = Tokenizer::from_gguf(&h).unwrap();
    assert_eq!(plain.encode_completion("hello").unwrap(), plain.encode("hello").unwrap());
    h.metadata.retain(|(k, _)| k != "tokenizer.ggml.add_bos_token");
    h.metadata.push(("tokenizer.ggml.add_bos_token".into(), Value::Bool(true)));
    let tok = Tokenizer::from_gguf(&h).unwrap();
    let ids = tok.encode_completion("hello").unwrap();
    assert_eq!(ids[0], bos);
    assert_eq!(&ids[1..], &tok.encode("hello").unwrap()[..]);
    assert_eq!(tok.encode_completion("<|begin_of_text|>hello").unwrap(), ids, "BOS typed in the text is not doubled");
}
