//! A short, seeded fuzz run on stable Rust (the long runs use cargo-fuzz on nightly; see
//! docs/FORMATS.md): for each tiny model, the committed corpus and a few hundred random
//! damage recipes go through load -> tokenize -> generate (`fucina_models::fuzzing`), and
//! random text through the tokenizer. Errors are expected; a panic fails the test and
//! prints the input that caused it.

use fucina::rng::Philox;
use fucina_models::fuzzing::{lm_case, parakeet_case, tokenizer_case};
use fucina_models::llm::Tokenizer;
use std::path::Path;
use std::time::{Duration, Instant};

fn assets() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets")
}

/// Random bytes from a counter-based RNG: `n` bytes of case `i`.
fn case_bytes(rng: &Philox, i: u64, n: usize) -> Vec<u8> {
    (0..n.div_ceil(16) as u32)
        .flat_map(|j| rng.block([i as u32, j, 0, 0]).into_iter().flat_map(u32::to_le_bytes))
        .take(n)
        .collect()
}

fn run(name: &str, f: impl Fn(&[u8]) + std::panic::RefUnwindSafe) {
    let t0 = Instant::now();
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(name);
    let mut inputs: Vec<Vec<u8>> = std::fs::read_dir(&corpus)
        .map(|d| d.filter_map(|e| std::fs::read(e.ok()?.path()).ok()).collect())
        .unwrap_or_default();
    let rng = Philox::new(0xF022);
    let cases: u64 = std::env::var("FUCINA_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
    inputs.extend((0..cases).map(|i| case_bytes(&rng, i, 8 + (i as usize * 7) % 120)));
    for input in &inputs {
        let started = Instant::now();
        if std::panic::catch_unwind(|| f(input)).is_err() {
            panic!("{name}: panic on input {:02x?}", input);
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{name}: input {:02x?} took {:?}",
            input,
            started.elapsed()
        );
    }
    eprintln!("{name}: {} inputs in {:.1} s", inputs.len(), t0.elapsed().as_secs_f64());
}

#[test]
fn damaged_models_load_tokenize_and_generate_without_panics() {
    for file in [
        "qwen3-tiny-f32.gguf",
        "qwen3-tiny-q8_0.gguf",
        "qwen3moe-tiny-f32.gguf",
        "deepseek-v3-tiny-f32.gguf",
        "gemma4-tiny-f32.gguf",
        "gemma4moe-tiny-f32.gguf",
        "glm4moe-tiny-f32.gguf",
        "qwen35-tiny-f32.gguf",
    ] {
        let base = std::fs::read(assets().join(file)).unwrap();
        // The undamaged model goes through the whole path.
        lm_case(&base, &[0, b'h', b'i']).unwrap();
        run("lm_load_run", |d| {
            // As the cargo-fuzz target, whose first byte picks the base model.
            let _ = lm_case(&base, d.get(1..).unwrap_or(&[]));
        });
    }
}

#[test]
fn random_text_tokenizes_without_panics() {
    // Byte-level BPE, SentencePiece, and Gemma 4's BPE over characters with byte fallback.
    for file in ["qwen3-tiny-f32.gguf", "llama-spm-tiny-f32.gguf", "gemma4-tiny-f32.gguf"] {
        let gguf = fucina::formats::gguf::GgufFile::open(assets().join(file)).unwrap();
        let tok = Tokenizer::from_gguf(gguf.header()).unwrap();
        run("tokenize", |d| tokenizer_case(&tok, d).unwrap());
    }
}

#[test]
fn damaged_parakeet_files_load_and_recognize_without_panics() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scratch = std::env::temp_dir().join(format!("fucina-fuzz-parakeet-{}.safetensors", std::process::id()));
    for file in [
        "assets/parakeet-ctc-tiny.safetensors",
        "tests/goldens/parakeet-tdt-tiny.safetensors",
        "tests/goldens/parakeet-rnnt-tiny.safetensors",
    ] {
        let base = dir.join(file);
        // The undamaged model goes through the whole path.
        parakeet_case(&base, &[], &scratch).unwrap();
        run("parakeet", |d| {
            let _ = parakeet_case(&base, d, &scratch);
        });
    }
    let _ = std::fs::remove_file(&scratch);
}
