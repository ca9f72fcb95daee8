//! One training step (forward + backward + AdamW) of an MLP and of a transformer block.
//! `benches/train_vs_torch.sh` runs this and `benches/torch_train_step.py` side by side.
//! Prints `RESULT <name> <threads> <median ms>` lines after criterion's output.

use criterion::Criterion;
use fucina::optim::AdamW;
use fucina::prelude::*;
use fucina_benches::interleaved_median;
use fucina_benches::train_models::{d_in, d_out, BenchBlock, BenchMlp};

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let threads: Vec<usize> = std::env::var("FUCINA_BENCH_THREADS")
        .ok()
        .map(|s| s.split(',').filter_map(|t| t.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2]);
    let mut results = Vec::new();
    for &t in &threads {
        let ctx = ExecContext::new(ExecConfig { threads: Some(t), seed: 1, ..ExecConfig::default() }).unwrap();
        let _g = ctx.enter();
        // MLP: batch 256, 512 -> 1024 -> 1024 -> 64.
        let mut mlp = BenchMlp::new(&ctx, 512, 1024, 64).unwrap();
        let mut o1 = AdamW::new(1e-3);
        let x = ctx.randn::<axes![batch, d_in]>(&[256, 512], 0.0, 1.0).unwrap();
        let y = ctx.randn::<axes![batch, d_out]>(&[256, 64], 0.0, 1.0).unwrap();
        // Transformer block: batch 8, seq 128, width 256, 4 heads, MLP 1024.
        let mut blk = BenchBlock::new(&ctx, 256, 4, 1024, 128).unwrap();
        let mut o2 = AdamW::new(1e-3);
        let xb = ctx.randn::<axes![batch, seq, hidden]>(&[8, 128, 256], 0.0, 1.0).unwrap();
        let yb = ctx.randn::<axes![batch, seq, hidden]>(&[8, 128, 256], 0.0, 1.0).unwrap();
        let mut g = c.benchmark_group(format!("train_step_{t}t"));
        g.sample_size(10);
        g.bench_function("mlp", |b| b.iter(|| mlp.step(&ctx, &mut o1, &x, &y).unwrap()));
        g.bench_function("transformer_block", |b| b.iter(|| blk.step(&ctx, &mut o2, &xb, &yb).unwrap()));
        g.finish();
        let mut f1 = || {
            mlp.step(&ctx, &mut o1, &x, &y).unwrap();
        };
        let tm = interleaved_median(15, &mut [&mut f1])[0];
        let mut f2 = || {
            blk.step(&ctx, &mut o2, &xb, &yb).unwrap();
        };
        let tb = interleaved_median(15, &mut [&mut f2])[0];
        results.push(format!("RESULT mlp {t} {:.3}", tm * 1e3));
        results.push(format!("RESULT transformer_block {t} {:.3}", tb * 1e3));
    }
    c.final_summary();
    for r in results {
        println!("{r}");
    }
}
