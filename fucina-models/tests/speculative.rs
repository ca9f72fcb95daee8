//! Speculative decoding without a draft model: greedy output with drafts verified in
//! batched steps must be the same tokens as plain greedy decoding, on every tiny family
//! (Qwen3 in F32 and Q8_0, Qwen3-MoE, DeepSeek-V2/V3) and both backends; the cache must end
//! holding the prompt and the answer (drafts past the end dropped); and drafts must actually be kept (a negative frequency penalty makes
//! the random models repeat themselves, which the n-gram drafter predicts). Under a grammar
//! the drafts are cut where it would refuse them and verified through its mask: the output
//! is the same as plain constrained decoding.

use fucina::prelude::*;
use fucina_models::llm::generate::{generate, GenerateOptions, GenerationStats};
use fucina_models::llm::grammar::{Grammar, GrammarCompiler};
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
    run_constrained(file, backend, speculate, params, None)
}

fn run_constrained(
    file: &str,
    backend: BackendKind,
    speculate: usize,
    params: SamplingParams,
    grammar: Option<&Grammar>,
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
    let mut stop_tokens = Vec::new();
    if let Some(g) = grammar {
        let end = tok.token_id("<|im_end|>").unwrap();
        let compiler = GrammarCompiler::new(
            std::sync::Arc::new(Tokenizer::from_gguf(&lm.header).unwrap()),
            lm.model.vocab_size(),
            end,
        )
        .unwrap();
        sampler.set_processor(Some(Box::new(compiler.compile(g).unwrap())));
        stop_tokens.push(end);
    }
    let opts = GenerateOptions { max_tokens: 48, speculate, stop_tokens, ..GenerateOptions::default() };
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

/// Speculation under a grammar: the drafts (the prompt's own n-grams, some of which the
/// grammar forbids: capitals, the colon) are cut where the grammar would refuse them, kept
/// rows advance the grammar once, and a grammar completed inside a draft ends the answer
/// there. Greedy output equals plain constrained decoding token for token, on both
/// backends, and drafts are kept (else the test would not see a wrong verification).
#[test]
fn drafted_greedy_under_a_grammar_equals_plain_constrained_greedy() {
    let mut kept = 0;
    for grammar in [
        Grammar::Regex("[a-z .]{1,400}".into()),
        // Completes after 40 characters: inside a draft, at times.
        Grammar::Regex("[a-z .]{40}".into()),
        Grammar::Lark("start: (\" the capital of france is paris .\" | \" the\" | /[a-z]+/)+".into()),
    ] {
        for backend in [BackendKind::Native, BackendKind::Scalar] {
            let params = SamplingParams { frequency_penalty: -2.0, ..SamplingParams::default() };
            let (plain, _, plain_stats) =
                run_constrained("qwen3-tiny-f32.gguf", backend, 0, params.clone(), Some(&grammar));
            let (spec, _, stats) = run_constrained("qwen3-tiny-f32.gguf", backend, 6, params, Some(&grammar));
            assert_eq!(spec, plain, "{grammar:?} {backend:?}");
            assert_eq!(stats.stop, plain_stats.stop, "{grammar:?} {backend:?}");
            assert!(stats.accepted <= stats.drafted);
            kept += stats.accepted;
        }
    }
    assert!(kept > 10, "drafts were never kept under a grammar ({kept})");
}
