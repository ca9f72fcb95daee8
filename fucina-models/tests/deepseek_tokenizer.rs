//! The `deepseek-v3` pre-tokenizer (three isolated splits in sequence, no normalizer):
//! token ids equal to HF `tokenizers` with the same pipeline on a corpus of tricky strings
//! (vocabulary and goldens from `tools/gen_deepseek_tiny.py`).

use fucina::formats::gguf::{Array, GgufHeader, Value};
use fucina_models::llm::Tokenizer;

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

#[test]
fn deepseek_v3_pre_tokenizer_matches_hf() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/deepseek_v3_tokenizer.json");
    let g: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let tokens = strings(&g["tokens"]);
    let specials = strings(&g["specials"]);
    let s = |x: &str| Value::String(x.as_bytes().to_vec());
    let header = GgufHeader {
        version: 3,
        metadata: vec![
            ("tokenizer.ggml.model".into(), s("gpt2")),
            ("tokenizer.ggml.pre".into(), s("deepseek-v3")),
            (
                "tokenizer.ggml.tokens".into(),
                Value::Array(Array::from_values(8, tokens.iter().map(|t| s(t)).collect()).unwrap()),
            ),
            (
                "tokenizer.ggml.token_type".into(),
                Value::Array(Array::I32(tokens.iter().map(|t| if specials.contains(t) { 3 } else { 1 }).collect())),
            ),
            (
                "tokenizer.ggml.merges".into(),
                Value::Array(Array::from_values(8, strings(&g["merges"]).iter().map(|m| s(m)).collect()).unwrap()),
            ),
        ],
        tensors: vec![],
        alignment: 32,
        data_offset: 0,
    };
    let tok = Tokenizer::from_gguf(&header).unwrap();
    for case in g["cases"].as_array().unwrap() {
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = serde_json::from_value(case["ids"].clone()).unwrap();
        assert_eq!(tok.encode(text).unwrap(), want, "{text:?}");
        assert_eq!(tok.decode(&want).unwrap(), text, "round trip {text:?}");
    }
    // An unknown pre-tokenizer is an error, not a silent mis-tokenization.
    let mut other = header.clone();
    other.metadata[1].1 = s("some-future-pre");
    let e = Tokenizer::from_gguf(&other).err().unwrap().to_string();
    assert!(e.contains("some-future-pre"), "{e}");
}
