//! Probe: single-thread throughput of the quantized row kernels on cache-resident rows
//! and on rows streamed from a buffer much larger than the caches.
//! `cargo run -p fucina-benches --release --example qdot_probe`

use fucina::backend::{qdot, qdot_k};
use fucina::quant::{quantize, GgmlType};
use std::time::Instant;

fn main() {
    let k = 1024;
    let x: Vec<f32> = (0..k).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
    for (ty, name) in [(GgmlType::Q4_K, "Q4_K"), (GgmlType::Q6_K, "Q6_K"), (GgmlType::Q8_0, "Q8_0")] {
        let row = quantize(ty, &x).unwrap();
        let rb = row.len();
        let big_rows = (512 << 20) / rb;
        let mut big = Vec::with_capacity(big_rows * rb);
        for _ in 0..big_rows {
            big.extend_from_slice(&row);
        }
        let (kern, act): (qdot::RowDot, Vec<u8>) = match ty {
            GgmlType::Q8_0 => {
                let mut a = vec![0u8; k / 32 * qdot::Q8_0_BYTES];
                qdot::quantize_row_q8_0(&x, &mut a);
                (qdot::row_kernel(false), a)
            }
            _ => {
                let mut a = vec![0u8; k / 256 * qdot_k::Q8_K_BYTES];
                qdot_k::quantize_row_q8_k(&x, &mut a);
                let f = if ty == GgmlType::Q4_K { qdot_k::KFormat::Q4K } else { qdot_k::KFormat::Q6K };
                (qdot_k::row_kernel(f), a)
            }
        };
        let mut s = 0.0f32;
        // Cache-resident: 256 rows.
        let hot = &big[..256 * rb];
        let t = Instant::now();
        for _ in 0..2000 {
            for r in hot.chunks_exact(rb) {
                // SAFETY: the kernel was picked for this CPU, and rows and activation hold whole blocks.
                s += unsafe { kern(r, &act) };
            }
        }
        let hot_s = t.elapsed().as_secs_f64();
        let hot_rate = (2000 * 256 * k) as f64 / hot_s / 1e9;
        let t = Instant::now();
        for _ in 0..3 {
            for r in big.chunks_exact(rb) {
                // SAFETY: the kernel was picked for this CPU, and rows and activation hold whole blocks.
                s += unsafe { kern(r, &act) };
            }
        }
        let cold_s = t.elapsed().as_secs_f64();
        let cold_gbs = (3 * big.len()) as f64 / cold_s / 1e9;
        println!(
            "{name}: hot {hot_rate:.1} G weights/s ({:.1} GB/s); streamed {cold_gbs:.1} GB/s  [{s}]",
            hot_rate * rb as f64 / k as f64
        );
    }
}
