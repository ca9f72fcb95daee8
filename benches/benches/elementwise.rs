//! Elementwise ops and softmax: fucina's native backend against plain Rust loops
//! (`f32::exp`, `f32::tanh`, zipped adds: what a user would write without a library),
//! same input, measured side by side. `FUCINA_BENCH_QUICK=1` shortens the run.

use criterion::{BenchmarkId, Criterion, Throughput};
use fucina::prelude::*;
use fucina_benches::interleaved_median;

axis!(pub r, pub c);

fn sizes() -> Vec<usize> {
    if std::env::var_os("FUCINA_BENCH_QUICK").is_some() {
        vec![1 << 20]
    } else {
        vec![1 << 14, 1 << 20, 1 << 24]
    }
}

type Op = (&'static str, fn(&Tensor<axes![r, c]>, &Tensor<axes![c]>), fn(&[f32], &[f32], &mut [f32], usize));

fn ops() -> Vec<Op> {
    vec![
        ("exp", |x, _| drop(x.exp().unwrap()), |x, _, y, _| x.iter().zip(y).for_each(|(a, o)| *o = a.exp())),
        ("tanh", |x, _| drop(x.tanh().unwrap()), |x, _, y, _| x.iter().zip(y).for_each(|(a, o)| *o = a.tanh())),
        (
            "silu",
            |x, _| drop(x.silu().unwrap()),
            |x, _, y, _| x.iter().zip(y).for_each(|(a, o)| *o = a / (1.0 + (-a).exp())),
        ),
        (
            "add_bias",
            |x, b| drop(x.add(b).unwrap()),
            |x, b, y, cols| {
                for (xr, yr) in x.chunks(cols).zip(y.chunks_mut(cols)) {
                    xr.iter().zip(b).zip(yr).for_each(|((a, bb), o)| *o = a + bb);
                }
            },
        ),
        (
            "softmax_rows",
            |x, _| drop(x.softmax::<c>().unwrap()),
            |x, _, y, cols| {
                for (xr, yr) in x.chunks(cols).zip(y.chunks_mut(cols)) {
                    let m = xr.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                    let mut s = 0.0;
                    for (a, o) in xr.iter().zip(yr.iter_mut()) {
                        *o = (a - m).exp();
                        s += *o;
                    }
                    yr.iter_mut().for_each(|o| *o /= s);
                }
            },
        ),
    ]
}

fn main() {
    let mut crit = Criterion::default().configure_from_args();
    let cols = 1024;
    let mut rows_out = Vec::new();
    for n in sizes() {
        let rows = n / cols;
        let ctx = ExecContext::new(ExecConfig { seed: 5, ..ExecConfig::default() }).unwrap();
        let x = ctx.randn::<axes![r, c]>(&[rows, cols], 0.0, 2.0).unwrap();
        let bias = ctx.randn::<axes![c]>(&[cols], 0.0, 1.0).unwrap();
        let (xv, bv) = (x.to_f32_vec(), bias.to_f32_vec());
        for threads in [1usize, 2] {
            let ctx = ExecContext::with_backend(BackendKind::Native, threads).unwrap();
            let mut g = crit.benchmark_group(format!("elementwise_{threads}t"));
            g.sample_size(10).throughput(Throughput::Elements(n as u64));
            for (name, fucina_op, plain) in ops() {
                g.bench_with_input(BenchmarkId::new(format!("{name}/fucina"), n), &n, |bch, _| {
                    bch.iter(|| ctx.scope(|| fucina_op(&x, &bias)))
                });
                if threads == 1 {
                    let mut out = vec![0.0f32; n];
                    g.bench_with_input(BenchmarkId::new(format!("{name}/plain_rust"), n), &n, |bch, _| {
                        bch.iter(|| plain(&xv, &bv, &mut out, cols))
                    });
                }
                let mut out = vec![0.0f32; n];
                let mut f1 = || ctx.scope(|| fucina_op(&x, &bias));
                let mut f2 = || plain(&xv, &bv, &mut out, cols);
                let t = interleaved_median(15, &mut [&mut f1, &mut f2]);
                rows_out.push(format!(
                    "{name:>13} {n:>9} {threads:>3} {:>10.3} {:>10.3} {:>7.2}",
                    t[0] * 1e3,
                    t[1] * 1e3,
                    t[1] / t[0]
                ));
            }
            g.finish();
        }
    }
    crit.final_summary();
    println!("\nside-by-side (interleaved, median ms); plain Rust is single-threaded; ratio = plain / fucina");
    println!("{:>13} {:>9} {:>3} {:>10} {:>10} {:>7}", "op", "elements", "thr", "fucina", "plain", "ratio");
    for r in rows_out {
        println!("{r}");
    }
}
