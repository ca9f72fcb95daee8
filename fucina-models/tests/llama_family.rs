//! The Llama-family decoder on `llama` and `qwen2` files against `transformers`: tiny
//! LlamaForCausalLM (grouped-query attention, untied output, Llama 3 RoPE scaling written as
//! `rope_freqs`, q/k rows permuted for interleaved RoPE), a Llama 2 on a SentencePiece
//! vocabulary with linear RoPE scaling, a MistralForCausalLM on it with sliding-window
//! attention over 5 positions (`llama.attention.sliding_window`; prompts and decoding run
//! past it), and Qwen2ForCausalLM (q/k/v biases, tied output),
//! converted by llama.cpp's own `convert_hf_to_gguf.py` (`tools/gen_llama_family_tiny.py`).
//! Checked: token ids exactly as HF `tokenizers` (Llama 3's `llama-bpe` and Qwen2's
//! pre-tokenizers) and `sentencepiece` give them; logits of every prefill position and 16
//! greedy decode steps on both backends, through `lm::open` as the binaries load them.
//!
//! Tolerance: max |fucina - transformers| <= 5e-5 on logits of magnitude ~1-10 (both f32;
//! summation order). Greedy tokens must be identical.

mod common;
use common::goldens;
use fucina::prelude::*;

const TOL: f32 = 5e-5;

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

#[test]
fn token_ids_match_hf_tokenizers_exactly() {
    goldens::check_tokens(&goldens::load("llama_family.json"));
}

#[test]
fn tiny_llama_and_qwen2_match_transformers_on_both_backends() {
    let gold = goldens::load("llama_family.json");
    for (backend, threads) in [(BackendKind::Scalar, 1), (BackendKind::Native, 2)] {
        assert_eq!(goldens::check_logits(&gold, backend, threads, TOL), ["llama", "llama-spm", "mistral", "qwen2"]);
    }
}

/// A raw completion prompt starts with BOS where the file says to add one, once; a file
/// without `add_bos_token` gets llama.cpp's default for its vocabulary (Llama 3's
/// pre-tokenizer and SentencePiece: yes; Qwen2's, GLM's: no).
#[test]
fn completion_prompts_get_bos_when_the_file_asks() {
    use fucina::formats::gguf::Value;
    use fucina_models::llm::Tokenizer;
    let header = |m: &str| fucina::formats::gguf::GgufFile::open(root().join(m)).unwrap().header().clone();
    let starts_with_bos = |h: &fucina::formats::gguf::GgufHeader| {
        let bos = h.get("tokenizer.ggml.bos_token_id").and_then(|v| v.as_u64()).unwrap() as u32;
        Tokenizer::from_gguf(h).unwrap().encode_completion("hello").unwrap()[0] == bos
    };
    for (m, default) in [
        ("assets/llama-tiny-f32.gguf", true),
        ("assets/llama-spm-tiny-f32.gguf", true),
        ("assets/qwen2-tiny-f32.gguf", false),
        ("assets/glm4moe-tiny-f32.gguf", false),
    ] {
        let mut h = header(m);
        assert!(h.get("tokenizer.ggml.add_bos_token").is_none(), "{m}");
        assert_eq!(starts_with_bos(&h), default, "{m}: llama.cpp's default");
        h.metadata.push(("tokenizer.ggml.add_bos_token".into(), Value::Bool(!default)));
        assert_eq!(starts_with_bos(&h), !default, "{m}: the file's own flag");
    }
    let mut h = header("assets/llama-tiny-f32.gguf");
    let bos = h.get("tokenizer.ggml.bos_token_id").and_then(|v| v.as_u64()).unwrap() as u32;
    h.metadata.push(("tokenizer.ggml.add_bos_token".into(), Value::Bool(false)));
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
