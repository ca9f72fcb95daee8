//! Fuzzes the whole language-model path past the parser: the fuzz bytes damage a tiny
//! model (metadata values, tensor sizes, token types and texts, cut arrays), which is then
//! loaded, its tokenizer built, a prompt tokenized and two tokens generated
//! (`fucina_models::fuzzing::lm_case`). The first byte picks the base model.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn bases() -> &'static [Vec<u8>] {
    static BASES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    BASES.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fucina-models/assets");
        ["qwen3-tiny-f32.gguf", "qwen3-tiny-q8_0.gguf", "qwen3moe-tiny-f32.gguf", "deepseek-v2-tiny-f32.gguf", "deepseek-v3-tiny-f32.gguf"]
            .iter()
            .map(|f| std::fs::read(dir.join(f)).expect("the tiny models in fucina-models/assets"))
            .collect()
    })
}

fuzz_target!(|data: &[u8]| {
    if let Some((pick, rest)) = data.split_first() {
        let bases = bases();
        let _ = fucina_models::fuzzing::lm_case(&bases[*pick as usize % bases.len()], rest);
    }
});
