//! Speculative decoding without a draft model: greedy output with drafts verified in
//! batched steps must be the same tokens as plain greedy decoding, on every tiny family
//! (Qwen3 in F32 and Q8_0, Qwen3-MoE, DeepSeek-V2/V3) and both backends; the cache must end
//! holding the prompt and the answer (drafts past the end dropped); and drafts must actually be kept (a negative frequency penalty makes
//! the random models repeat themselves, which the n-gram drafter predicts).

use fucina::prelude::*;
use fucina_models::llm::generate::{generate, GenerateOptions, GenerationStats};
use fucina_models::llm::KvType;
use fucina_models::llm::{Sampler, SamplingParams, Tokenizer};
use std::path::PathBuf;

fn run(file: &str, backend: BackendKind, speculate: usize, penalty: f32) -> (Vec<u32>, usize, GenerationStats) {
    run_with(file, backend, speculate, SamplingParams { frequency_penalty: penalty, ..SamplingParams::default() })
}

fn run_with(
    file: &str,
    backend: BackendKind,
    speculate: usize,
    params: SamplingParams,
) -> (Vec<u32>, usize, GenerationStats) {
    let ctx = ExecContext::with_backend(backend, 2).unwrap();
    let _g = ctx.enter();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets").join(file);
    let lm = fucina_models::lm::open(&path, false).unwrap();
    let tok = Tokenizer::from_gguf(&lm.header).unwrap();
    let prompt = tok
        .encode("Quote it back: the capital of france is paris . the capital of france is paris . the capital")
        .unwrap();
    let mut cache = lm.model.new_cache(256, KvType::F32).unwrap();
    let mut sampler = Sampler::new(params);
    let opts = GenerateOptions { max_tokens: 48, speculate, ..GenerateOptions::default() };
    let (out, stats) = generate(&*lm.model, &tok, &mut cache, &prompt, &mut sampler, &opts, &mut |_| true).unwrap();
    (out, cache.len(), stats)
}

#[test]
fn drafted_greedy_equals_plain_greedy() {
    let mut kept = 0;
    for file in [
        "qwen3-tiny-f32.gguf",
        "qwen3-tiny-q8_0.gguf",
        "qwen3moe-tiny-f32.gguf",
        "deepseek-v2-tiny-f32.gguf",
        "deepseek-v3-tiny-f32.gguf",
    ] {
        for backend in [BackendKind::Native, BackendKind::Scalar] {
            for penalty in [0.0, -2.0] {
                let (plain, plain_len, _) = run(file, backend, 0, penalty);
                let (spec, spec_len, stats) = run(file, backend, 6, penalty);
                assert_eq!(spec, plain, "{file} {backend:?} penalty {penalty}");
                // Both caches hold the prompt and the answer; a kept draft may leave the last
                // answer token in the cache too (plain decoding never feeds it).
                assert!(
                    spec_len == plain_len || spec_len == plain_len + 1,
                    "{file} {backend:?}: {spec_len} vs {plain_len}"
                );
                kept += stats.accepted;
            }
        }
    }
    assert!(kept > 20, "drafts were never kept ({kept}): the test would not see a wrong verification");
}

/// With a temperature, drafts go through the sampler's acceptance rule (whose output
/// distribution is the sampler's own: the unit test in llm::sampling); here it runs end to
/// end, keeps drafts, and a run is reproducible from its seed.
#[test]
fn sampled_speculation_keeps_drafts_and_is_seeded() {
    let params = SamplingParams { temperature: 0.7, frequency_penalty: -2.0, seed: 5, ..SamplingParams::default() };
    let (a, _, stats) = run_with("qwen3-tiny-f32.gguf", BackendKind::Native, 6, params.clone());
    let (b, _, _) = run_with("qwen3-tiny-f32.gguf", BackendKind::Native, 6, params);
    assert_eq!(a, b);
    assert_eq!(a.len(), 48);
    assert!(stats.accepted > 0 && stats.accepted <= stats.drafted, "{stats:?}");
}
