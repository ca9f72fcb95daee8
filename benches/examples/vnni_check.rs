use fucina::backend::qdot;
fn main() {
    let k = 128;
    let w: Vec<f32> = (0..k).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
    let wq = fucina::quant::quantize(fucina::quant::GgmlType::Q8_0, &w).unwrap();
    let acts: Vec<Vec<u8>> = (0..4)
        .map(|r| {
            let x: Vec<f32> = (0..k).map(|i| (((i + r * 13) * 104729) % 1000) as f32 / 300.0 - 1.5).collect();
            let mut a = vec![0u8; k / 32 * 34];
            qdot::quantize_row_q8_0(&x, &mut a);
            a
        })
        .collect();
    let k4 = qdot::row_kernel_x4(false).unwrap();
    let got = unsafe { k4(&wq, [&acts[0], &acts[1], &acts[2], &acts[3]]) };
    for r in 0..4 {
        println!("{} vs {}", got[r], qdot::dot_q8_0_q8_0_scalar(&wq, &acts[r]));
    }
}
