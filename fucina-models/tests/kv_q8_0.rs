//! The q8_0 KV cache (`--kv q8_0`): keys and values stored as Q8_0 blocks, scores by integer
//! dot products. On synthetic Qwen3, Qwen3-MoE and DeepSeek-V2 files whose head widths are
//! whole blocks, the logits of a prompt and of decode steps after it stay close to the f32
//! cache's (bounds below, about twice what was measured), native equals the scalar spec,
//! greedy decoding with the cache runs batched and alone to the same tokens, and models
//! whose rows are not whole blocks are refused with a clear error.

mod common;

use fucina::prelude::*;
use fucina::quant::GgmlType;
use fucina_models::llm::generate::CausalLm;
use fucina_models::llm::synth::{self, DeepSeekShape, Qwen3Shape};
use fucina_models::llm::{KvType, LogitRows, Segment};
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!("fucina-kvq8-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn qwen3(moe: bool, tag: &str) -> PathBuf {
    let shape = Qwen3Shape {
        layers: 2,
        hidden: 128,
        ffn: 192,
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
        vocab: 800,
        context: 256,
        moe: moe.then_some((4, 2)),
        tied: false,
    };
    let path = dir().join(format!("{tag}-{}.gguf", if moe { "qwen3moe" } else { "qwen3" }));
    synth::write(&synth::qwen3(&shape), GgmlType::F32, 7, &path, |_, _| {}).unwrap();
    path
}

fn deepseek() -> PathBuf {
    let shape = DeepSeekShape {
        layers: 2,
        hidden: 128,
        heads: 4,
        q_lora: None,
        kv_lora: 64,
        qk_nope: 32,
        qk_rope: 32,
        v_head: 32,
        ffn: 192,
        dense_lead: 1,
        experts: 4,
        used: 2,
        shared: 1,
        expert_ffn: 64,
        vocab: 800,
        context: 256,
        v3: false,
    };
    let path = dir().join("deepseek.gguf");
    synth::write(&synth::deepseek(&shape), GgmlType::F32, 7, &path, |_, _| {}).unwrap();
    path
}

/// Logits of a 24-token prompt (all rows) and of 8 single-token steps after it.
fn logits(path: &Path, backend: BackendKind, kv: KvType) -> Vec<f32> {
    let ctx = ExecContext::with_backend(backend, 2).unwrap();
    let _g = ctx.enter();
    let lm = fucina_models::lm::open(path, false).unwrap();
    let m = &*lm.model;
    let tokens: Vec<u32> = (0..32).map(|i| (i * 37 + 11) % 800).collect();
    let mut cache = m.new_cache(64, kv).unwrap();
    let mut out = m.forward(&tokens[..24], &mut cache, LogitRows::All).unwrap().to_f32_vec();
    for t in &tokens[24..] {
        out.extend(m.forward(std::slice::from_ref(t), &mut cache, LogitRows::Last).unwrap().to_f32_vec());
    }
    out
}

/// (1 - cosine, largest difference over the largest logit).
fn compare(a: &[f32], b: &[f32]) -> (f64, f32) {
    let (cos, rel) = common::closeness(a, b);
    (1.0 - cos, rel)
}

#[test]
fn q8_0_cache_logits_stay_close_to_f32() {
    // (file, max 1 - cosine, max relative difference). Measured 2026-12-04 (native):
    // qwen3 2.9e-5 / 0.0075, qwen3moe 4.6e-5 / 0.0104, deepseek2 1.3e-5 / 0.0059. The bounds
    // are about twice the measured values.
    for (name, path, max_cos, max_rel) in [
        ("qwen3", qwen3(false, "close"), 6e-5, 0.015),
        ("qwen3moe", qwen3(true, "close"), 9e-5, 0.02),
        ("deepseek2", deepseek(), 3e-5, 0.012),
    ] {
        let f32s = logits(&path, BackendKind::Native, KvType::F32);
        let native = logits(&path, BackendKind::Native, KvType::Q8_0);
        let scalar = logits(&path, BackendKind::Scalar, KvType::Q8_0);
        let (cos, rel) = compare(&native, &f32s);
        eprintln!("{name}: q8_0 vs f32 cache: 1 - cosine {cos:.2e}, max diff / max logit {rel:.4}");
        assert!(cos <= max_cos && rel <= max_rel, "{name}: 1 - cosine {cos} (<= {max_cos}), rel {rel} (<= {max_rel})");
        assert!(rel > 0.0, "{name}: the q8_0 cache gave exactly the f32 logits: it was not used");
        let (_, backends) = compare(&native, &scalar);
        eprintln!("{name}: q8_0 native vs scalar {backends:.2e}");
        // 3e-7 with SIMD; 3.4e-4 (qwen3) under FUCINA_NO_SIMD, where the portable f32 sums
        // round differently and flip a few int8 levels of the cache (rounding to a level is
        // discontinuous). Still 15-40x under the q8_0-vs-f32 difference, which a wrong q8_0
        // path would exceed.
        assert!(backends <= 1e-3, "{name}: native and scalar q8_0 caches differ by {backends}");
        // f16 stays the closer of the two.
        let (cos16, _) = compare(&logits(&path, BackendKind::Native, KvType::F16), &f32s);
        assert!(cos16 <= cos, "{name}: f16 cache further from f32 ({cos16}) than q8_0 ({cos})");
    }
}

#[test]
fn q8_0_cache_serves_batched_passes() {
    let path = qwen3(false, "batched");
    let ctx = ExecContext::with_backend(BackendKind::Native, 2).unwrap();
    let _g = ctx.enter();
    let lm = fucina_models::lm::open(&path, false).unwrap();
    let m: &dyn CausalLm = &*lm.model;
    let a: Vec<u32> = (0..9).map(|i| (i * 13 + 1) % 800).collect();
    let b: Vec<u32> = (0..5).map(|i| (i * 29 + 3) % 800).collect();
    let (mut ca, mut cb) = (m.new_cache(32, KvType::Q8_0).unwrap(), m.new_cache(32, KvType::Q8_0).unwrap());
    let mut batch = [
        Segment { tokens: &a, cache: &mut ca, rows: LogitRows::Last },
        Segment { tokens: &b, cache: &mut cb, rows: LogitRows::Last },
    ];
    let got = m.forward_batch(&mut batch).unwrap();
    for (t, g) in [(&a, &got[0]), (&b, &got[1])] {
        let mut c = m.new_cache(32, KvType::Q8_0).unwrap();
        let want = m.forward(t, &mut c, LogitRows::Last).unwrap().to_f32_vec();
        let (cos, rel) = compare(&g.to_f32_vec(), &want);
        assert!(cos < 1e-9 && rel < 1e-5, "batched q8_0 pass differs: {cos} {rel}");
    }
}

#[test]
fn rows_that_are_not_whole_blocks_are_refused() {
    // The committed tiny Qwen3 has 16-wide heads.
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/qwen3-tiny-f32.gguf");
    let lm = fucina_models::lm::open(&path, false).unwrap();
    let e = lm.model.new_cache(16, KvType::Q8_0).unwrap_err().to_string();
    assert!(e.contains("32-value blocks") && e.contains("16"), "{e}");
    assert_eq!("Q8_0".parse::<KvType>().unwrap(), KvType::Q8_0);
    assert!("q4_0".parse::<KvType>().unwrap_err().contains("f32, f16 or q8_0"));
}
