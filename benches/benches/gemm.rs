//! f32 GEMM: fucina's native backend against matrixmultiply (and OpenBLAS with
//! `--features openblas`), same inputs, same thread count, measured side by side.
//!
//! `cargo bench -p fucina-benches --bench gemm [--features openblas]`
//! prints criterion's timings, then a ratio table from interleaved rounds.
//! Set `FUCINA_BENCH_QUICK=1` for a short run.

use criterion::{BenchmarkId, Criterion, Throughput};
use fucina::prelude::*;
use fucina_benches::{interleaved_median, matrixmultiply_sgemm};

axis!(pub m, pub k, pub n);

fn sizes() -> Vec<usize> {
    if std::env::var_os("FUCINA_BENCH_QUICK").is_some() {
        vec![256, 1024]
    } else {
        vec![64, 128, 256, 512, 1024, 2048]
    }
}

struct Case {
    a: Tensor<axes![m, k]>,
    b: Tensor<axes![k, n]>,
    av: Vec<f32>,
    bv: Vec<f32>,
}

fn case(s: usize) -> Case {
    let ctx = ExecContext::new(ExecConfig { seed: s as u64, ..ExecConfig::default() }).unwrap();
    let a = ctx.randn::<axes![m, k]>(&[s, s], 0.0, 1.0).unwrap();
    let b = ctx.randn::<axes![k, n]>(&[s, s], 0.0, 1.0).unwrap();
    let (av, bv) = (a.to_f32_vec(), b.to_f32_vec());
    Case { a, b, av, bv }
}

fn criterion_benches(c: &mut Criterion) {
    for threads in [1usize, 2] {
        let ctx = ExecContext::with_backend(BackendKind::Native, threads).unwrap();
        let mut g = c.benchmark_group(format!("gemm_f32_{threads}t"));
        g.sample_size(10);
        for s in sizes() {
            let cs = case(s);
            g.throughput(Throughput::Elements((2 * s * s * s) as u64));
            g.bench_with_input(BenchmarkId::new("fucina", s), &s, |bch, _| {
                bch.iter(|| ctx.scope(|| cs.a.contract::<k, _>(&cs.b).unwrap()))
            });
            if threads == 1 {
                let mut out = vec![0.0f32; s * s];
                g.bench_with_input(BenchmarkId::new("matrixmultiply", s), &s, |bch, _| {
                    bch.iter(|| matrixmultiply_sgemm(s, s, s, &cs.av, &cs.bv, &mut out))
                });
            }
            #[cfg(feature = "openblas")]
            {
                fucina_benches::openblas_set_threads(threads);
                let mut out = vec![0.0f32; s * s];
                g.bench_with_input(BenchmarkId::new("openblas", s), &s, |bch, _| {
                    bch.iter(|| fucina_benches::openblas_sgemm(s, s, s, &cs.av, &cs.bv, &mut out))
                });
            }
        }
        g.finish();
    }
}

fn ratio_table() {
    println!(
        "\nside-by-side (interleaved rounds, median), GFLOP/s and ratio peer_time / fucina_time (>1: fucina faster)"
    );
    println!(
        "{:>7} {:>3} {:>10} {:>16} {:>8} {:>10} {:>8}",
        "n", "thr", "fucina", "matrixmultiply", "ratio", "openblas", "ratio"
    );
    for threads in [1usize, 2] {
        let ctx = ExecContext::with_backend(BackendKind::Native, threads).unwrap();
        for s in sizes() {
            let cs = case(s);
            let rounds = if s >= 1024 { 7 } else { 25 };
            let mut out = vec![0.0f32; s * s];
            let mut out2 = vec![0.0f32; s * s];
            let mut f1 = || {
                ctx.scope(|| cs.a.contract::<k, _>(&cs.b).unwrap());
            };
            let mut f2 = || matrixmultiply_sgemm(s, s, s, &cs.av, &cs.bv, &mut out);
            #[cfg(feature = "openblas")]
            fucina_benches::openblas_set_threads(threads);
            #[cfg(feature = "openblas")]
            let mut f3 = || fucina_benches::openblas_sgemm(s, s, s, &cs.av, &cs.bv, &mut out2);
            #[cfg(not(feature = "openblas"))]
            let mut f3 = || out2[0] += 1.0;
            let mut fs: Vec<&mut dyn FnMut()> = vec![&mut f1, &mut f3];
            if threads == 1 {
                fs.push(&mut f2);
            }
            let t = interleaved_median(rounds, &mut fs);
            let gf = |secs: f64| 2.0 * (s as f64).powi(3) / secs / 1e9;
            let mm = if threads == 1 {
                format!("{:>10.1} {:>5.2}", gf(t[2]), t[2] / t[0])
            } else {
                format!("{:>10} {:>5}", "-", "-")
            };
            let ob = if cfg!(feature = "openblas") {
                format!("{:>10.1} {:>8.2}", gf(t[1]), t[1] / t[0])
            } else {
                format!("{:>10} {:>8}", "n/a", "-")
            };
            println!("{s:>7} {threads:>3} {:>10.1} {mm:>25} {ob}", gf(t[0]));
        }
    }
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    criterion_benches(&mut c);
    c.final_summary();
    ratio_table();
}
