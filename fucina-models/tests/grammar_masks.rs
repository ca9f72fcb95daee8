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
