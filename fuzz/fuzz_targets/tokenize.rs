//! Fuzzes the byte-level BPE tokenizer of the tiny Qwen3 with arbitrary text: with control
//! tokens parsed, without, and inside a chat prompt; then decodes the ids.
#![no_main]

use fucina_models::llm::Tokenizer;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn tokenizer() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fucina-models/assets/qwen3-tiny-f32.gguf");
        let gguf = fucina::formats::gguf::GgufFile::open(path).expect("the tiny Qwen3");
        Tokenizer::from_gguf(gguf.header()).expect("its tokenizer")
    })
}

fuzz_target!(|data: &[u8]| {
    fucina_models::fuzzing::tokenizer_case(tokenizer(), data).expect("any text tokenizes");
});
