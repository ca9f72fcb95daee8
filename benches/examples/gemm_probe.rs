//! Times one f32 GEMM size on the native backend: `cargo run --release -p fucina-benches --example gemm_probe -- 1024 1`.
use fucina::prelude::*;
axis!(pub m, pub k, pub n);
fn main() {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse().unwrap()).collect();
    let (s, threads) = (args.first().copied().unwrap_or(1024), args.get(1).copied().unwrap_or(1));
    let ctx = ExecContext::with_backend(BackendKind::Native, threads).unwrap();
    let a = ctx.randn::<axes![m, k]>(&[s, s], 0.0, 1.0).unwrap();
    let b = ctx.randn::<axes![k, n]>(&[s, s], 0.0, 1.0).unwrap();
    let _g = ctx.enter();
    let mut best = f64::MAX;
    for _ in 0..10 {
        let t = std::time::Instant::now();
        let c = a.contract::<k, _>(&b).unwrap();
        best = best.min(t.elapsed().as_secs_f64());
        drop(c);
    }
    println!("n={s} threads={threads}: {:.1} GFLOP/s", 2.0 * (s as f64).powi(3) / best / 1e9);
}
