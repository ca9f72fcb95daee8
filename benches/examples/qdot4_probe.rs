//! Probe: single-thread MAC rate of the four-row quantized kernels on cache-resident data.
use fucina::backend::{qdot, qdot_k};
use fucina::quant::{quantize, GgmlType};
use std::time::Instant;

fn main() {
    let k = 1024;
    let x: Vec<f32> = (0..k).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
    for (ty, name) in [(GgmlType::Q4_K, "Q4_K"), (GgmlType::Q6_K, "Q6_K"), (GgmlType::Q8_0, "Q8_0")] {
        let row = quantize(ty, &x).unwrap();
        let rows: Vec<u8> = (0..64).flat_map(|_| row.clone()).collect();
        let rb = row.len();
        let (k1, k4, a): (qdot::RowDot, qdot_k::RowDot4, Vec<u8>) = match ty {
            GgmlType::Q8_0 => {
                let mut a = vec![0u8; k / 32 * qdot::Q8_0_BYTES];
                qdot::quantize_row_q8_0(&x, &mut a);
                (qdot::row_kernel(false), qdot::row_kernel_x4(false).unwrap(), a)
            }
            _ => {
                let mut a = vec![0u8; k / 256 * qdot_k::Q8_K_BYTES];
                qdot_k::quantize_row_q8_k(&x, &mut a);
                let f = if ty == GgmlType::Q4_K { qdot_k::KFormat::Q4K } else { qdot_k::KFormat::Q6K };
                (qdot_k::row_kernel(f), qdot_k::row_kernel_x4(f).unwrap(), a)
            }
        };
        let acts: Vec<Vec<u8>> = (0..4).map(|_| a.clone()).collect();
        let mut s = 0.0f32;
        let iters = 20000;
        let t = Instant::now();
        for _ in 0..iters {
            for r in rows.chunks_exact(rb) {
                // SAFETY: the kernels were picked for this CPU, and rows and activations hold whole blocks.
                s += unsafe { k1(r, &a) };
            }
        }
        let one = (iters * 64 * k) as f64 / t.elapsed().as_secs_f64() / 1e9;
        let t = Instant::now();
        for _ in 0..iters / 4 {
            for r in rows.chunks_exact(rb) {
                // SAFETY: the kernels were picked for this CPU, and rows and activations hold whole blocks.
                let v = unsafe { k4(r, [&acts[0], &acts[1], &acts[2], &acts[3]]) };
                s += v[0] + v[3];
            }
        }
        let four = (iters / 4 * 64 * k * 4) as f64 / t.elapsed().as_secs_f64() / 1e9;
        println!("{name}: x1 {one:.1} G MAC/s, x4 {four:.1} G MAC/s [{s}]");
    }
}
