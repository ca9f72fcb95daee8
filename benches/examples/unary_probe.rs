//! Times one unary op on the native backend: `cargo run --release -p fucina-benches --example unary_probe`.
use fucina::prelude::*;
axis!(pub r);
fn main() {
    let ctx = ExecContext::with_backend(BackendKind::Native, 1).unwrap();
    let x = ctx.randn::<axes![r]>(&[1 << 20], 0.0, 2.0).unwrap();
    let _g = ctx.enter();
    let mut best = f64::MAX;
    for _ in 0..200 {
        let t = std::time::Instant::now();
        let y = x.exp().unwrap();
        best = best.min(t.elapsed().as_secs_f64());
        drop(y);
    }
    println!("exp 1M: {:.3} ms", best * 1e3);
}
