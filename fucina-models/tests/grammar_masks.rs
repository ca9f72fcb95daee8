//! Constrained decoding against the reference: the `llguidance` PyPI package's token masks
//! on the tiny Qwen3's vocabulary (built there from the HF tokenizer, here from the GGUF),
//! replayed step by step through fucina's grammar compiler. Every allowed set must be the
//! same, exactly (tolerance: none); tools/gen_grammar_masks.py writes the goldens.

use fucina_models::llm::cli::default_model;
use fucina_models::llm::grammar::{Grammar, GrammarCompiler};
use fucina_models::llm::sampling::LogitProcessor;
use fucina_models::llm::Tokenizer;
use serde_json::Value;

fn hex_mask(ids: &[u32], vocab: usize) -> String {
    let mut b = vec![0u8; vocab.div_ceil(8)];
    for &t in ids {
        b[t as usize / 8] |= 1 << (t % 8);
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn token_masks_match_llguidance_python() {
    let golden: Value =
        serde_json::from_str(include_str!("goldens/grammar_masks.json")).expect("grammar_masks.json parses");
    let lm = fucina_models::lm::open(&default_model(), false).unwrap();
    let tok = std::sync::Arc::new(Tokenizer::from_gguf(&lm.header).unwrap());
    let vocab = tok.vocab_size();
    assert_eq!(golden["vocab"].as_u64(), Some(vocab as u64));
    let end = golden["end_token"].as_u64().unwrap() as u32;
    assert_eq!(tok.token_id("<|im_end|>"), Some(end));
    let compiler = GrammarCompiler::new(tok.clone(), vocab, end).unwrap();
    let (mut steps, mut ended) = (0, 0);
    for case in golden["cases"].as_array().unwrap() {
        let spec = &case["spec"];
        let grammar = match case["kind"].as_str().unwrap() {
            "json_schema" => Grammar::JsonSchema(spec.clone()),
            "regex" => Grammar::Regex(spec.as_str().unwrap().to_string()),
            "lark" => Grammar::Lark(spec.as_str().unwrap().to_string()),
            k => panic!("unknown kind {k}"),
        };
        for (w, walk) in case["walks"].as_array().unwrap().iter().enumerate() {
            let mut c = compiler.compile(&grammar).unwrap();
            for (i, step) in walk.as_array().unwrap().iter().enumerate() {
                let got = hex_mask(&c.allowed().unwrap(), vocab);
                assert_eq!(got, step["allowed"].as_str().unwrap(), "{spec}: walk {w}, step {i}");
                steps += 1;
                match step["token"].as_u64() {
                    Some(t) => c.accept(t as u32).unwrap(),
                    None => ended += 1,
                }
            }
        }
    }
    // The goldens cover many steps and walks that reach the end of their grammar.
    assert!(steps > 300 && ended >= 5, "{steps} steps, {ended} complete walks");
}

/// Speculative drafts are cut with `valid_prefix`: on every golden walk it passes the walk's
/// own tokens whole, stops exactly at a token the reference's mask forbids, and leaves the
/// constraint where it was (its next mask is still the walk's first).
#[test]
fn valid_prefix_cuts_drafts_where_the_reference_mask_forbids() {
    let golden: Value =
        serde_json::from_str(include_str!("goldens/grammar_masks.json")).expect("grammar_masks.json parses");
    let lm = fucina_models::lm::open(&default_model(), false).unwrap();
    let tok = std::sync::Arc::new(Tokenizer::from_gguf(&lm.header).unwrap());
    let vocab = tok.vocab_size();
    let end = golden["end_token"].as_u64().unwrap() as u32;
    let compiler = GrammarCompiler::new(tok.clone(), vocab, end).unwrap();
    let mut cut = 0;
    for case in golden["cases"].as_array().unwrap() {
        let spec = &case["spec"];
        let grammar = match case["kind"].as_str().unwrap() {
            "json_schema" => Grammar::JsonSchema(spec.clone()),
            "regex" => Grammar::Regex(spec.as_str().unwrap().to_string()),
            _ => Grammar::Lark(spec.as_str().unwrap().to_string()),
        };
        for walk in case["walks"].as_array().unwrap() {
            let steps = walk.as_array().unwrap();
            let tokens: Vec<u32> = steps.iter().filter_map(|s| s["token"].as_u64()).map(|t| t as u32).collect();
            let mut c = compiler.compile(&grammar).unwrap();
            assert_eq!(c.valid_prefix(&tokens).unwrap(), tokens.len(), "{spec}: the walk itself");
            for (i, step) in steps.iter().enumerate().take(tokens.len()).step_by(3) {
                let allowed = step["allowed"].as_str().unwrap();
                let is_allowed = |t: u32| {
                    let byte =
                        u8::from_str_radix(&allowed[(t as usize / 8) * 2..(t as usize / 8) * 2 + 2], 16).unwrap();
                    byte >> (t % 8) & 1 == 1
                };
                let Some(bad) = (0..vocab as u32).find(|&t| !is_allowed(t)) else { continue };
                let mut draft = tokens[..i].to_vec();
                draft.push(bad);
                draft.extend_from_slice(&tokens[i..]);
                assert_eq!(c.valid_prefix(&draft).unwrap(), i, "{spec}: forbidden token {bad} at {i}");
                cut += 1;
            }
            let first = steps[0]["allowed"].as_str().unwrap();
            assert_eq!(hex_mask(&c.allowed().unwrap(), vocab), first, "{spec}: valid_prefix moved the state");
        }
    }
    assert!(cut > 50, "only {cut} cuts checked");
}
