//! The tokenizer built from the tiny Qwen3 GGUF against HF `tokenizers` (the goldens in
//! `tests/goldens/qwen3_tokenizer.json`, made by `tools/gen_qwen3_tiny.py`): identical ids.

use fucina::formats::gguf::GgufFile;
use fucina_models::llm::Tokenizer;

#[test]
fn token_ids_match_hf_tokenizers_exactly() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let f = GgufFile::open(root.join("assets/qwen3-tiny-f32.gguf")).unwrap();
    let tok = Tokenizer::from_gguf(f.header()).unwrap();
    let gold: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("tests/goldens/qwen3_tokenizer.json")).unwrap())
            .unwrap();
    let cases = gold["cases"].as_array().unwrap();
    assert!(cases.len() >= 20);
    for c in cases {
        let text = c["text"].as_str().unwrap();
        let want: Vec<u32> = c["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let got = tok.encode(text).unwrap();
        assert_eq!(got, want, "ids for {text:?}");
        // Decoding gives the text back, up to NFC (the normalizer composes characters).
        use unicode_normalization::UnicodeNormalization;
        let nfc: String = text.nfc().collect();
        assert_eq!(tok.decode(&got).unwrap(), nfc, "round trip of {text:?}");
    }
    assert!(tok.decode(&[tok.vocab_size() as u32]).is_err());
}
