//! A model's forward run the way the binaries run it (`ExecContext::run_on_pool`, which on
//! more than one thread drives the context's worker team) gives the same bits on 1, 2 and 3
//! threads, for prefill and decode, in every weight layout: the team splits work into tasks
//! over output columns, never inside a sum.

use fucina::prelude::*;
use fucina::quant::GgmlType;
use fucina_models::llm::synth::{self, Qwen3Shape};
use fucina_models::llm::KvType;
use fucina_models::llm::LogitRows;

fn logits(path: &std::path::Path, threads: usize) -> Vec<u32> {
    let ctx = ExecContext::with_backend(BackendKind::Native, threads).unwrap();
    let _g = ctx.enter();
    let lm = fucina_models::lm::open(path, false).unwrap();
    let m = &*lm.model;
    let tokens: Vec<u32> = (0..40).map(|i| (i * 53 + 7) % 1000).collect();
    let mut cache = m.new_cache(64, KvType::F16).unwrap();
    // A short prefill (8 rows: the small-batch kernels, e.g. the 2 x 4 integer tile on AVX2),
    // a longer one (24 rows: the batch kernels), then decode.
    let mut out = ctx.run_on_pool(|| m.forward(&tokens[..8], &mut cache, LogitRows::All)).unwrap().to_f32_vec();
    out.extend(ctx.run_on_pool(|| m.forward(&tokens[8..32], &mut cache, LogitRows::All)).unwrap().to_f32_vec());
    for t in &tokens[32..] {
        out.extend(
            ctx.run_on_pool(|| m.forward(std::slice::from_ref(t), &mut cache, LogitRows::Last)).unwrap().to_f32_vec(),
        );
    }
    out.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn the_same_logits_on_any_thread_count() {
    let dir = std::env::temp_dir().join(format!("fucina-threads-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // Products large enough to be split (hidden x ffn = 131072 multiply-adds per row).
    let shape = Qwen3Shape {
        layers: 2,
        hidden: 256,
        ffn: 512,
        heads: 4,
        kv_heads: 2,
        head_dim: 64,
        vocab: 1000,
        context: 128,
        moe: None,
        tied: false,
    };
    for format in [GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K] {
        let path = dir.join(format!("{format:?}.gguf"));
        synth::write(&synth::qwen3(&shape), format, 11, &path, |_, _| {}).unwrap();
        let one = logits(&path, 1);
        assert!(one.iter().any(|b| *b != 0), "{format:?}: no logits");
        for threads in [2, 3] {
            assert!(logits(&path, threads) == one, "{format:?}: {threads} threads differ from one");
        }
    }
}
