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

fn glm() -> fucina_models::qwen3::Qwen3 {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/glm4moe-tiny-f32.gguf");
    let f = fucina_models::llm::ModelFile::open(&path, &["glm4moe"]).unwrap();
    fucina_models::qwen3::Qwen3::load(&f).unwrap()
}

/// The next-token-prediction layer against the reference (`nextn_reference` in the
/// generator: transformers' own Glm4MoeDecoderLayer with the layer's weights, on the main
/// model's final hidden states and the next tokens' embeddings): every row of both prompts,
/// on both backends, within the decoder's tolerance.
#[test]
fn the_next_token_layer_matches_its_reference() {
    let gold = goldens::load("glm4moe.json");
    let cases = gold["models"]["glm4moe"]["nextn"].as_array().unwrap();
    assert_eq!(cases.len(), 2);
    for (backend, threads) in [(BackendKind::Scalar, 1), (BackendKind::Native, 2)] {
        let ctx = ExecContext::with_backend(backend, threads).unwrap();
        let _g = ctx.enter();
        let model = glm();
        for case in cases {
            let ids = goldens::ids(&case["ids"]);
            let got = model.nextn_logits(&ids).unwrap().to_f32_vec();
            let want: Vec<f32> = case["logits"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32))
                .collect();
            assert_eq!(got.len(), want.len());
            let d = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(d <= TOL, "{backend:?}: next-token logits max diff {d}");
        }
    }
}

/// Speculative decoding with the model's own drafts gives the tokens of plain greedy
/// decoding (the main model verifies every draft), drafts are made, and the drafter's cache
/// keeps one entry per position whose next token is known.
#[test]
fn drafts_from_the_next_token_layer_are_lossless() {
    use fucina_models::llm::generate::{generate, CausalLm, GenerateOptions};
    use fucina_models::llm::{KvType, Sampler, SamplingParams, Tokenizer};
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/glm4moe-tiny-f32.gguf");
    let header = fucina::formats::gguf::GgufFile::open(&path).unwrap().header().clone();
    let tok = Tokenizer::from_gguf(&header).unwrap();
    let model = glm();
    let prompt = tok.encode("[gMASK]<sop>What is the capital of France? 12345 numbers").unwrap();
    let run = |speculate: usize| {
        let mut cache = model.new_cache(128, KvType::F32).unwrap();
        let opts = GenerateOptions { max_tokens: 40, speculate, ..GenerateOptions::default() };
        let mut sampler = Sampler::new(SamplingParams::default());
        let (ids, stats) = generate(&model, &tok, &mut cache, &prompt, &mut sampler, &opts, &mut |_| true).unwrap();
        (ids, stats, cache)
    };
    let (plain, _, _) = run(0);
    let (drafted, stats, mut cache) = run(3);
    assert_eq!(drafted, plain, "drafts must not change greedy output");
    assert!(stats.drafted > 0, "the next-token layer drafted nothing");
    assert!(cache.has_draft());
    let len = cache.len();
    let positions = cache.draft_mut().unwrap().positions.clone();
    assert_eq!(positions, (0..len - 1).collect::<Vec<_>>(), "one drafter entry per position but the last");
    // The drafter's state after many drafts, rejections and truncations is the state of one
    // pass over the same sequence: the same next drafts.
    let history: Vec<u32> = prompt.iter().chain(&drafted).copied().collect();
    let mut fresh = model.new_cache(128, KvType::F32).unwrap();
    assert!(model.enable_drafts(&mut fresh).unwrap());
    model.forward(&history[..len], &mut fresh, fucina_models::llm::LogitRows::None).unwrap();
    let (a, b) = (cache.draft_mut().unwrap(), fresh.draft_mut().unwrap());
    assert_eq!(a.positions, b.positions);
    for (x, y) in [
        (a.cache.keys(0, 0).unwrap(), b.cache.keys(0, 0).unwrap()),
        (a.cache.values(0, 0).unwrap(), b.cache.values(0, 0).unwrap()),
    ] {
        let d = x.to_f32_vec().iter().zip(y.to_f32_vec()).map(|(p, q)| (p - q).abs()).fold(0.0, f32::max);
        assert!(d <= 1e-4, "the drafter's keys and values differ from one pass's by {d}");
    }
    let want = model.draft(&mut fresh, &history[..len + 1], 3).unwrap();
    assert_eq!(model.draft(&mut cache, &history[..len + 1], 3).unwrap(), want);
    assert_eq!(want.len(), 3);
}

/// The server with `--speculate` on GLM-4.5: each slot's cache carries the drafter's state
/// (also across a kept prefix, where the drafter misses the position the prefix ends at), and
/// every answer is still the library's own greedy answer from a fresh cache.
#[test]
fn the_server_drafts_with_the_next_token_layer_losslessly() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/glm4moe-tiny-f32.gguf");
    common::server_answers_as_the_library(&path, 16, &["--speculate", "3"]);
}

/// `#[derive(Module)]` visits the quantized matrices too (`Module::frozen_weights`): the
/// decoder and its next-token layer list every matrix of the file once, each expert of a
/// stacked tensor on its own, by field path; the f32 norms and biases stay parameters.
#[test]
fn derive_module_lists_every_matrix_of_the_file() {
    use fucina::nn::Module;
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/glm4moe-tiny-f32.gguf");
    let file = fucina::formats::gguf::GgufFile::open(&path).unwrap();
    let mut want: Vec<(usize, usize)> = Vec::new();
    for t in &file.header().tensors {
        match t.shape().as_slice() {
            [r, c] => want.push((*r, *c)),
            [n, r, c] => want.extend(std::iter::repeat_n((*r, *c), *n)),
            _ => {}
        }
    }
    let model = glm();
    let frozen = model.frozen_weights();
    let mut got: Vec<(usize, usize)> = frozen.iter().map(|(_, _, r, c)| (*r, *c)).collect();
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want);
    let names: Vec<&str> = frozen.iter().map(|(n, _, _, _)| n.as_str()).collect();
    for n in ["embed", "blocks.0.mixer.q", "blocks.1.ffn.experts.7.down", "blocks.2.ffn.shared.gate", "nextn.eh_proj"] {
        assert!(names.contains(&n), "{n} missing from {names:?}");
    }
    assert!(frozen.iter().all(|(_, f, _, _)| f == "F32"));
    assert!(model.param_names().iter().any(|n| n == "blocks.0.mixer.bias.q"));
}
