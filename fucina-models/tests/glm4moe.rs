//! GLM-4.5 (`glm4moe`) against `transformers`' Glm4MoeForCausalLM: a tiny random model with
//! q/k/v biases, per-head q/k norms, RoPE over half of each head, a leading dense layer, then
//! experts with DeepSeek-V3 routing (sigmoid scores, selection bias, two expert groups of
//! which each token may use one, renormalized weights scaled by 2.5) and a shared expert,
//! plus the next-token-prediction layer the converter writes after the decoder's blocks;
//! converted by llama.cpp's own `convert_hf_to_gguf.py` (`tools/gen_glm4moe_tiny.py`).
//! Checked: token ids exactly as HF `tokenizers` gives them (Llama 3's split with
//! `ignore_merges`, llama.cpp's `glm4`); logits of every prefill position and 16 greedy
//! decode steps on both backends, through `lm::open` as the binaries load them.
//!
//! Tolerance: max |fucina - transformers| <= 5e-5 on logits of magnitude ~1-10 (both f32;
//! summation order). Greedy tokens must be identical.

mod common;
use common::goldens;
use fucina::prelude::*;

const TOL: f32 = 5e-5;

#[test]
fn glm4moe_token_ids_match_hf_tokenizers_exactly() {
    goldens::check_tokens(&goldens::load("glm4moe.json"));
}

#[test]
fn tiny_glm4moe_matches_transformers_on_both_backends() {
    let gold = goldens::load("glm4moe.json");
    for (backend, threads) in [(BackendKind::Scalar, 1), (BackendKind::Native, 2)] {
        assert_eq!(goldens::check_logits(&gold, backend, threads, TOL), ["glm4moe"]);
    }
}

/// The file's summary names what was read: experts, shared experts, sigmoid routing, and
/// three decoder layers (the fourth block is the next-token-prediction layer).
#[test]
fn glm4moe_config_reads_the_files_metadata() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/glm4moe-tiny-f32.gguf");
    let lm = fucina_models::lm::open(&path, false).unwrap();
    assert!(
        lm.summary.contains("3 layers") && lm.summary.contains("2 of 8 experts + 1 shared (Sigmoid routing)"),
        "{}",
        lm.summary
    );
    let f = fucina_models::llm::ModelFile::open(&path, &["glm4moe"]).unwrap();
    let c = fucina_models::qwen3::Qwen3Config::from_file(&f).unwrap();
    assert_eq!((c.layers, c.nextn, c.head_dim, c.rope_dims), (3, 1, 24, 12));
    assert!(c.qk_norm && c.qkv_bias && !c.is_moe(0) && c.is_moe(1) && c.is_moe(2));
    let m = c.moe.unwrap();
    assert_eq!((m.experts, m.expert_ffn, m.shared, m.dense_lead), (8, 32, 1, 1));
    assert_eq!((m.routing.groups, m.routing.groups_used, m.routing.scale, m.routing.norm_topk), (2, 1, 2.5, true));
}

/// `ignore_merges` (GLM-4.5's `glm4` and Llama 3's `llama-bpe` pre-tokenizers, as llama.cpp
/// and HF `tokenizers` have it): a pre-token that is itself a vocabulary entry is that entry,
/// where the merges alone would stop at other pieces. `chatglm-bpe` (GLM-4) merges.
#[test]
fn a_whole_pre_token_in_the_vocabulary_skips_the_merges_where_the_pre_tokenizer_says() {
    use fucina::formats::gguf::{Array, GgufHeader, Value};
    use fucina_models::llm::Tokenizer;
    let s = |x: &str| Value::String(x.as_bytes().to_vec());
    let tokens = ["a", "b", "c", "ab", "bc", "abc"];
    let header = |pre: &str| GgufHeader {
        version: 3,
        metadata: vec![
            ("tokenizer.ggml.model".into(), s("gpt2")),
            ("tokenizer.ggml.pre".into(), s(pre)),
            (
                "tokenizer.ggml.tokens".into(),
                Value::Array(Array::from_values(8, tokens.iter().map(|t| s(t)).collect()).unwrap()),
            ),
            ("tokenizer.ggml.token_type".into(), Value::Array(Array::I32(vec![1; tokens.len()]))),
            // Only `b c` merges: by the merges, "abc" is "a" + "bc".
            ("tokenizer.ggml.merges".into(), Value::Array(Array::from_values(8, vec![s("b c")]).unwrap())),
        ],
        tensors: vec![],
        alignment: 32,
        data_offset: 0,
    };
    for (pre, want) in [("glm4", vec![5]), ("llama-bpe", vec![5]), ("chatglm-bpe", vec![0, 4]), ("qwen2", vec![0, 4])] {
        let tok = Tokenizer::from_gguf(&header(pre)).unwrap();
        assert_eq!(tok.encode("abc").unwrap(), want, "{pre}");
        assert_eq!(tok.encode("bc").unwrap(), [4], "{pre}");
    }
}
