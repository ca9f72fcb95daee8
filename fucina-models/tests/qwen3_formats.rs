//! The same random Qwen3 (and Qwen3-MoE) written in every weight format runs through the
//! format's kernels and stays close to its F32 original: logits compared by cosine similarity
//! and by the largest difference relative to the largest logit, with bounds per format
//! (block formats also quantize the activations, to Q8_0 or Q8_K). The scalar and native
//! backends agree on each file to f32 rounding.

mod common;

use fucina::prelude::*;
use fucina::quant::GgmlType;
use fucina_models::llm::synth::{self, Qwen3Shape};
use fucina_models::llm::KvType;
use fucina_models::llm::LogitRows;
use fucina_models::llm::ModelFile;
use fucina_models::qwen3::Qwen3;

fn logits(path: &std::path::Path, backend: BackendKind, tokens: &[u32]) -> Vec<f32> {
    let ctx = ExecContext::with_backend(backend, 2).unwrap();
    let _g = ctx.enter();
    let file = ModelFile::open(path, &["qwen3", "qwen3moe"]).unwrap();
    let model = Qwen3::load(&file).unwrap();
    let mut cache = model.new_cache(32, KvType::F32).unwrap();
    let mut out = model.forward(&tokens[..10], &mut cache, LogitRows::All).unwrap().to_f32_vec();
    for t in &tokens[10..] {
        out.extend(model.forward(std::slice::from_ref(t), &mut cache, LogitRows::Last).unwrap().to_f32_vec());
    }
    out
}

fn compare(a: &[f32], b: &[f32]) -> (f64, f32) {
    common::closeness(a, b)
}

fn run(shape: Qwen3Shape, name: &str) {
    let dir = std::env::temp_dir().join(format!("fucina-formats-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let model = synth::qwen3(&shape);
    let tokens: Vec<u32> = (0..14).map(|i| (i * 37 + 5) % shape.vocab as u32).collect();
    let f32_path = dir.join("f32.gguf");
    synth::write(&model, GgmlType::F32, 3, &f32_path, |_, _| {}).unwrap();
    let reference = logits(&f32_path, BackendKind::Native, &tokens);
    // (format, min cosine, max diff relative to the largest logit): about twice the measured
    // 1 - cosine and 1.5 times the measured difference (2026-12-03: F16 1.000000/0.0008,
    // BF16 0.99999/0.006, Q8_0 0.99976/0.025, Q6_K 0.9983/0.062, Q5_K 0.9937/0.150,
    // Q4_K 0.978/0.257, Q4_0 0.965/0.305). A broken kernel lands near cosine 0.
    let bounds = [
        (GgmlType::F16, 0.99999, 2e-3),
        (GgmlType::BF16, 0.99995, 1.2e-2),
        (GgmlType::Q8_0, 0.9995, 0.05),
        (GgmlType::Q6_K, 0.9965, 0.1),
        (GgmlType::Q5_K, 0.987, 0.23),
        (GgmlType::Q4_K, 0.955, 0.4),
        (GgmlType::Q4_0, 0.93, 0.46),
    ];
    for (ty, min_cos, max_rel) in bounds {
        let path = dir.join(format!("{ty:?}.gguf"));
        synth::write(&model, ty, 3, &path, |_, _| {}).unwrap();
        let native = logits(&path, BackendKind::Native, &tokens);
        let scalar = logits(&path, BackendKind::Scalar, &tokens);
        let (cos, rel) = compare(&native, &reference);
        eprintln!("{name} {ty:?}: cosine {cos:.6}, max diff / max logit {rel:.4}");
        assert!(
            cos >= min_cos && rel <= max_rel,
            "{name} {ty:?}: cosine {cos} (>= {min_cos}), rel {rel} (<= {max_rel})"
        );
        // F16: the exact f32 path, only summation order differs. The others round activations
        // (to bf16 in batches, to Q8 rows one at a time), where a one-ulp difference upstream
        // can move a value across a rounding boundary and the difference grows layer by layer.
        let (_, backends) = compare(&native, &scalar);
        let tol = if ty == GgmlType::F16 { 1e-4 } else { 2e-2 };
        eprintln!("{name} {ty:?}: native vs scalar {backends:.2e}");
        assert!(backends <= tol, "{name} {ty:?}: native vs scalar differ by {backends} of the largest logit");
    }
    std::fs::remove_dir_all(&dir).ok();
}

const SMALL: Qwen3Shape = Qwen3Shape {
    layers: 2,
    hidden: 256,
    ffn: 512,
    heads: 4,
    kv_heads: 2,
    head_dim: 64,
    vocab: 1024,
    context: 256,
    moe: None,
    tied: false,
};

#[test]
fn dense_qwen3_in_every_format_stays_close_to_f32() {
    run(SMALL, "dense");
}

#[test]
fn moe_qwen3_in_every_format_stays_close_to_f32() {
    run(Qwen3Shape { ffn: 256, moe: Some((4, 2)), ..SMALL }, "moe");
}
