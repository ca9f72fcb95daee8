//! Quantized mat-vec / mat-mat (Q8_0, Q4_0 weights with Q8_0 activations; Q4_K, Q6_K with Q8_K) at LLM shapes, with
//! the bytes of weights streamed per second next to the machine's measured memory
//! bandwidth (a STREAM-style triad run in the same process). `FUCINA_BENCH_QUICK=1` shortens it.

use criterion::{BenchmarkId, Criterion};
use fucina::prelude::*;
use fucina::quant::{GgmlType, QWeight};
use fucina_benches::interleaved_median;
use rayon::prelude::*;

axis!(pub o, pub i);

/// STREAM triad `a = b + s*c` over 3 x 64 MiB, on `threads` threads: GB/s moved.
fn triad_gbs(threads: usize) -> f64 {
    let n = 16 << 20;
    let b = vec![1.0f32; n];
    let c = vec![2.0f32; n];
    let mut a = vec![0.0f32; n];
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
    let mut f = || {
        pool.install(|| {
            a.par_chunks_mut(1 << 16).zip(b.par_chunks(1 << 16)).zip(c.par_chunks(1 << 16)).for_each(|((a, b), c)| {
                for k in 0..a.len() {
                    a[k] = b[k] + 3.0 * c[k];
                }
            })
        })
    };
    let t = interleaved_median(7, &mut [&mut f])[0];
    (3 * n * 4) as f64 / t / 1e9
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let quick = std::env::var_os("FUCINA_BENCH_QUICK").is_some();
    let shapes: Vec<(usize, usize)> =
        if quick { vec![(3072, 1024)] } else { vec![(3072, 1024), (1024, 3072), (4096, 4096)] };
    let mut rows = Vec::new();
    for threads in [1usize, 2] {
        let bw = triad_gbs(threads);
        let ctx = ExecContext::new(ExecConfig { threads: Some(threads), seed: 3, ..ExecConfig::default() }).unwrap();
        let _g = ctx.enter();
        for &(n, k) in &shapes {
            let w = ctx.randn::<axes![o, i]>(&[n, k], 0.0, 0.02).unwrap();
            for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_K, GgmlType::Q6_K] {
                let qw = QWeight::quantize(&w, ty).unwrap();
                let wbytes = ty.bytes_for(n * k).unwrap() as f64;
                for m in [1usize, 64] {
                    let x = ctx.randn::<axes![batch, i]>(&[m, k], 0.0, 1.0).unwrap();
                    let id = format!("{ty:?}/{n}x{k}/batch{m}/{threads}t");
                    let mut g = c.benchmark_group("quant_matmul");
                    g.sample_size(10);
                    g.bench_function(BenchmarkId::from_parameter(&id), |b| b.iter(|| qw.forward(&x).unwrap()));
                    g.finish();
                    let mut f = || {
                        qw.forward(&x).unwrap();
                    };
                    let t = interleaved_median(9, &mut [&mut f])[0];
                    let gbs = wbytes / t / 1e9;
                    rows.push(format!(
                        "{:<6} {:>10} {:>5} {:>3} {:>10.3} {:>9.2} {:>9.2} {:>7.0}%",
                        format!("{ty:?}"),
                        format!("{n}x{k}"),
                        m,
                        threads,
                        t * 1e3,
                        gbs,
                        bw,
                        100.0 * gbs / bw
                    ));
                }
            }
        }
    }
    c.final_summary();
    println!(
        "\n{:<6} {:>10} {:>5} {:>3} {:>10} {:>9} {:>9} {:>8}",
        "type", "shape", "batch", "thr", "ms", "W GB/s", "triad", "of bw"
    );
    for r in rows {
        println!("{r}");
    }
}
