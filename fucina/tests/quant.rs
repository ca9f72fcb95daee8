//! Block formats against gguf-py (`tools/gen_gguf_goldens.py` -> `goldens/quant.json`):
//! encoders byte-exact, decoders bit-exact; Q8_K (no gguf-py encoder) by its invariants.

use fucina::quant::{dequantize, quantize, GgmlType};
use serde_json::Value;

fn ty(name: &str) -> GgmlType {
    match name {
        "Q4_0" => GgmlType::Q4_0,
        "Q4_1" => GgmlType::Q4_1,
        "Q5_0" => GgmlType::Q5_0,
        "Q5_1" => GgmlType::Q5_1,
        "Q8_0" => GgmlType::Q8_0,
        "BF16" => GgmlType::BF16,
        "Q2_K" => GgmlType::Q2_K,
        "Q3_K" => GgmlType::Q3_K,
        "Q4_K" => GgmlType::Q4_K,
        "Q5_K" => GgmlType::Q5_K,
        "Q6_K" => GgmlType::Q6_K,
        other => panic!("unknown type {other}"),
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len() / 2).map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap()).collect()
}

fn bits(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

#[test]
fn encoders_and_decoders_match_gguf_py() {
    let g: Value = serde_json::from_str(include_str!("goldens/quant.json")).unwrap();
    let cases = g["cases"].as_array().unwrap();
    // 11 ordinary cases, then 5 blocks of denormals (Q4_0..Q8_0) where 1/d overflows.
    assert_eq!(cases.len(), 16);
    for c in cases {
        let t = ty(c["type"].as_str().unwrap());
        let enc = hex(c["encoded"].as_str().unwrap());
        let dec: Vec<u32> = bits(&c["decoded"]);
        if !c["input"].is_null() {
            let x: Vec<f32> = bits(&c["input"]).into_iter().map(f32::from_bits).collect();
            assert_eq!(quantize(t, &x).unwrap(), enc, "{t:?}: encoded bytes differ from gguf-py's");
        }
        let got: Vec<u32> = dequantize(t, &enc, dec.len()).unwrap().into_iter().map(f32::to_bits).collect();
        assert_eq!(got, dec, "{t:?}: decoded values differ from gguf-py's");
    }
}

#[test]
fn q8_k_keeps_its_invariants() {
    let x: Vec<f32> = (0..512).map(|i| ((i as f32) * 0.37).sin() * 3.0 + if i == 300 { -9.0 } else { 0.0 }).collect();
    let q = quantize(GgmlType::Q8_K, &x).unwrap();
    assert_eq!(q.len(), 2 * 292);
    let back = dequantize(GgmlType::Q8_K, &q, 512).unwrap();
    for (b, blk) in q.chunks(292).enumerate() {
        let d = f32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]).abs();
        for i in 0..256 {
            assert!((back[b * 256 + i] - x[b * 256 + i]).abs() <= d * 0.5 + 1e-6, "element {i}");
        }
        for g in 0..16 {
            let s: i32 = blk[4 + g * 16..4 + g * 16 + 16].iter().map(|v| *v as i8 as i32).sum();
            let stored = i16::from_le_bytes([blk[260 + 2 * g], blk[261 + 2 * g]]) as i32;
            assert_eq!(s, stored, "block sum {g}");
        }
    }
    // The element of largest magnitude maps to -127 exactly (iscale = -127 / max).
    assert_eq!(q[292 + 4 + 44] as i8, -127);
    assert_eq!(quantize(GgmlType::Q8_K, &[0.0; 256]).unwrap(), vec![0u8; 292]);
}

#[test]
fn sizes_are_checked() {
    assert!(quantize(GgmlType::Q4_0, &[1.0; 33]).is_err());
    assert!(dequantize(GgmlType::Q6_K, &[0u8; 209], 256).is_err());
    assert!(GgmlType::from_id(99).unwrap_err().to_string().contains("99"));
}

mod qmatmul {
    use fucina::prelude::*;
    use fucina::quant::{dequantize, GgmlType, QWeight};

    axis!(pub o, pub i);

    fn data(seed: u32, n: usize) -> Vec<f32> {
        (0..n).map(|k| (k as f32 * 0.731 + seed as f32).sin() * 1.7).collect()
    }

    #[test]
    fn quantized_matmul_agrees_across_backends_and_with_dequantized_f32() {
        for ty in [
            GgmlType::F32,
            GgmlType::F16,
            GgmlType::BF16,
            GgmlType::Q8_0,
            GgmlType::Q4_0,
            GgmlType::Q2_K,
            GgmlType::Q3_K,
            GgmlType::Q4_K,
            GgmlType::Q5_K,
            GgmlType::Q6_K,
        ] {
            let shapes: &[(usize, usize, usize)] = if ty.block_size() == 256 {
                &[(1, 7, 256), (3, 65, 768), (5, 300, 512), (20, 33, 256), (37, 300, 768)]
            } else {
                &[(1, 7, 32), (3, 65, 96), (5, 300, 512), (20, 33, 128), (37, 300, 544)]
            };
            for &(m, n, k) in shapes {
                let w = Tensor::<axes![o, i]>::from_vec(data(1, n * k), &[n, k]).unwrap();
                let x = Tensor::<axes![batch, i]>::from_vec(data(2, m * k), &[m, k]).unwrap();
                let qw = QWeight::quantize(&w, ty).unwrap();
                let scalar = ExecContext::with_backend(BackendKind::Scalar, 1).unwrap();
                let native = ExecContext::with_backend(BackendKind::Native, 2).unwrap();
                let ys = scalar.scope(|| qw.forward(&x)).unwrap().to_f32_vec();
                let yn = native.scope(|| qw.forward(&x)).unwrap().to_f32_vec();
                // Integer block sums are exact on both; only the f32 accumulation order differs.
                for (p, q) in ys.iter().zip(&yn) {
                    assert!((p - q).abs() <= 2e-5 * (1.0 + p.abs()), "{ty:?} {m}x{n}x{k}: {p} vs {q}");
                }
                // Against the dequantized weights in f32: only the Q8_0 rounding of x remains.
                let wd = dequantize(ty, &fucina::quant::quantize(ty, &w.to_f32_vec()).unwrap(), n * k).unwrap();
                let wt = Tensor::<axes![o, i]>::from_vec(wd, &[n, k]).unwrap();
                let yf = scalar.scope(|| x.contract::<i, _>(&wt)).unwrap().to_f32_vec();
                let scale = (k as f32).sqrt() * 1.7 * 1.7;
                // Batches of block/BF16 weights round activations and weights to bf16: each
                // product is then within 2^-8 of exact, so the sum within 2^-8 of sum |x w|.
                let bf16_path =
                    m >= fucina::quant::BF16_BATCH && k % 32 == 0 && !matches!(ty, GgmlType::F32 | GgmlType::F16);
                let (xv, wv) = (x.to_f32_vec(), wt.to_f32_vec());
                for (idx, (p, q)) in ys.iter().zip(&yf).enumerate() {
                    let (i, j) = (idx / n, idx % n);
                    let tol = if bf16_path {
                        let mag: f32 = (0..k).map(|t| (xv[i * k + t] * wv[j * k + t]).abs()).sum();
                        mag / 256.0 + 1e-4
                    } else {
                        // Otherwise only the Q8_0/Q8_K rounding of x (or nothing, for floats).
                        0.01 * scale
                    };
                    assert!((p - q).abs() <= tol, "{ty:?} {m}x{n}x{k}: quantized {p} vs f32 {q} (tolerance {tol})");
                }
            }
        }
        let w = Tensor::<axes![o, i]>::zeros(&[2, 32]).unwrap();
        assert!(QWeight::quantize(&w, GgmlType::Q6_K).is_err(), "32 values are not a Q6_K super-block");
        assert!(QWeight::quantize(&w, GgmlType::Q4_1).is_err(), "Q4_1 has no kernel");
        let qw = QWeight::quantize(&w, GgmlType::Q8_0).unwrap();
        assert!(qw.forward(&Tensor::<axes![batch, i]>::zeros(&[1, 64]).unwrap()).is_err());
        // Row lookup (embeddings) decodes exactly what dequantize gives, and checks ids.
        let w = Tensor::<axes![o, i]>::from_vec(data(3, 4 * 32), &[4, 32]).unwrap();
        let qw = QWeight::quantize(&w, GgmlType::Q8_0).unwrap();
        let rows: Tensor<axes![batch, i]> = qw.lookup(&[2, 0]).unwrap();
        let all = dequantize(GgmlType::Q8_0, qw.bytes(), 4 * 32).unwrap();
        assert_eq!(rows.to_f32_vec()[..32], all[64..96]);
        assert_eq!(rows.to_f32_vec()[32..], all[..32]);
        assert!(qw.lookup::<batch>(&[4]).is_err());
    }
}

/// Every K-quant kernel against the scalar spec on random bytes (all bit patterns of levels,
/// scales and high bits; only the f16 scales are kept finite), one super-block at a time
/// and over whole rows.
#[test]
fn kquant_dot_kernels_match_the_scalar_spec_on_random_blocks() {
    use fucina::backend::qdot_k::{dot_k_q8_k, dot_k_q8_k_scalar, quantize_row_q8_k, KFormat, Q8_K_BYTES};
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for f in [KFormat::Q2K, KFormat::Q3K, KFormat::Q4K, KFormat::Q5K, KFormat::Q6K] {
        let bb = f.block_bytes();
        for blocks in [1usize, 3, 8] {
            let mut w: Vec<u8> = (0..blocks * bb).map(|_| next() as u8).collect();
            // f16 scales in [2^-15, 2^-1): finite, non-zero, either sign.
            let scale_at: &[usize] = match f {
                KFormat::Q2K => &[80, 82],
                KFormat::Q3K => &[108],
                KFormat::Q4K | KFormat::Q5K => &[0, 2],
                KFormat::Q6K => &[208],
            };
            for b in 0..blocks {
                for &o in scale_at {
                    let v = (next() as u16 & 0x83ff) | (((next() % 14) as u16 + 1) << 10);
                    w[b * bb + o..b * bb + o + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
            let x: Vec<f32> = (0..blocks * 256).map(|_| (next() % 20001) as f32 / 10000.0 - 1.0).collect();
            let mut a = vec![0u8; blocks * Q8_K_BYTES];
            quantize_row_q8_k(&x, &mut a);
            let s = dot_k_q8_k_scalar(f, &w, &a);
            let v = dot_k_q8_k(f, &w, &a);
            assert!(s.is_finite());
            assert!((s - v).abs() <= 1e-5 * (1.0 + s.abs()), "{f:?} x{blocks}: scalar {s} vs native {v}");
            // The spec itself: dequantized weights times dequantized activations.
            let ty = match f {
                KFormat::Q2K => GgmlType::Q2_K,
                KFormat::Q3K => GgmlType::Q3_K,
                KFormat::Q4K => GgmlType::Q4_K,
                KFormat::Q5K => GgmlType::Q5_K,
                KFormat::Q6K => GgmlType::Q6_K,
            };
            let wd = dequantize(ty, &w, blocks * 256).unwrap();
            let ad = dequantize(GgmlType::Q8_K, &a, blocks * 256).unwrap();
            let r: f64 = wd.iter().zip(&ad).map(|(p, q)| *p as f64 * *q as f64).sum();
            let mag: f64 = wd.iter().zip(&ad).map(|(p, q)| (*p as f64 * *q as f64).abs()).sum();
            assert!((s as f64 - r).abs() <= 1e-5 * (1.0 + mag), "{f:?} x{blocks}: spec {s} vs dequantized {r}");
        }
    }
}

/// K-quant encoders against ggml's own `quantize_row_*_K_ref` (compiled from the pinned
/// llama.cpp sources by `tools/gen_kquant_goldens.py`): every byte must match.
#[test]
fn kquant_encoders_are_byte_exact_against_ggml() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/kquant.gguf");
    let f = fucina::formats::gguf::GgufFile::open(path).unwrap();
    let (_, x) = f.tensor_f32("input").unwrap();
    assert_eq!(x.len(), 64 * 256);
    for (name, t) in [
        ("q2_k", GgmlType::Q2_K),
        ("q3_k", GgmlType::Q3_K),
        ("q4_k", GgmlType::Q4_K),
        ("q5_k", GgmlType::Q5_K),
        ("q6_k", GgmlType::Q6_K),
        ("q8_k", GgmlType::Q8_K),
    ] {
        let want = f.tensor_data(name).unwrap();
        let got = quantize(t, &x).unwrap();
        assert_eq!(got.len(), want.len(), "{name}: size");
        let bb = t.block_bytes();
        for (b, (g, w)) in got.chunks(bb).zip(want.chunks(bb)).enumerate() {
            assert!(g == w, "{name}: block {b} differs from ggml\n ours: {g:?}\n ggml: {w:?}");
        }
        // And the decoded values stay close to the input where the block is not degenerate.
        let back = dequantize(t, &got, x.len()).unwrap();
        assert!(back.iter().all(|v| v.is_finite()), "{name}: decoded a non-finite value");
    }
}

/// The weight-product seam (`Kernels::weight_matmul` / `weight_decode`) directly: for every
/// format, the native backend against the scalar specification over odd shapes that cross
/// the 4-row kernels' remainders, the bf16 threshold and the thread split, inside and
/// outside a pool.
#[test]
fn weight_kernels_match_the_scalar_spec_on_odd_shapes() {
    use fucina::backend::fdot::FloatRow;
    use fucina::backend::qdot_k::KFormat;
    use fucina::backend::{BackendKind, WeightFormat, WeightMat};
    let formats = [
        (WeightFormat::Float(FloatRow::F32), GgmlType::F32),
        (WeightFormat::Float(FloatRow::F16), GgmlType::F16),
        (WeightFormat::Float(FloatRow::BF16), GgmlType::BF16),
        (WeightFormat::Q8_0, GgmlType::Q8_0),
        (WeightFormat::Q4_0, GgmlType::Q4_0),
        (WeightFormat::K(KFormat::Q2K), GgmlType::Q2_K),
        (WeightFormat::K(KFormat::Q3K), GgmlType::Q3_K),
        (WeightFormat::K(KFormat::Q4K), GgmlType::Q4_K),
        (WeightFormat::K(KFormat::Q5K), GgmlType::Q5_K),
        (WeightFormat::K(KFormat::Q6K), GgmlType::Q6_K),
    ];
    let (scalar, native) = (BackendKind::Scalar.kernels(), BackendKind::Native.kernels());
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let val = |s: usize, i: usize| ((i * 7919 + s * 104_729) % 2003) as f32 / 1001.5 - 1.0;
    for (format, ty) in formats {
        // Q8_0 and Q4_0 blocks are 32 values: lengths of 1 and 11 blocks too, which cross the
        // one-row kernel's groups of eight blocks.
        let short: &[(usize, usize)] =
            if matches!(ty, GgmlType::Q8_0 | GgmlType::Q4_0) { &[(5, 32), (9, 352)] } else { &[] };
        for &(n, k) in [(1, 256), (3, 512), (17, 256), (33, 768), (700, 256)].iter().chain(short) {
            let wf: Vec<f32> = (0..n * k).map(|i| val(1, i)).collect();
            let data = fucina::quant::quantize(ty, &wf).unwrap();
            let w = WeightMat { format, rows: n, cols: k, data: &data };
            let (mut d0, mut d1) = (vec![0.0; n * k], vec![0.0; n * k]);
            scalar.weight_decode(&w, &mut d0);
            pool.install(|| native.weight_decode(&w, &mut d1));
            assert_eq!(d0, d1, "{format:?} decode {n}x{k}");
            let big = if n == 33 { &[64, 300][..] } else { &[] };
            for &m in [1, 2, 3, 5, 7, 8, 9, 13, 31, 33].iter().chain(big) {
                check_weight_product(&w, &d0, m, m + 2, &pool);
            }
        }
    }
}

/// Q4_K, Q6_K and Q8_0 weights repacked with sixteen rows interleaved (`backend::interleave`):
/// decoding gives the plain rows' values exactly, the scalar spec of a product is the plain
/// rows' integer path bit for bit, and the native kernels (AVX-512 VNNI where present, for
/// Q8_0 the AVX2 kernel, which gives the spec's bits, the gathered row kernels elsewhere)
/// match the spec over odd shapes and batch sizes, on one
/// thread and two. The backends' layout choice is checked too: both make the same one, and
/// only whole groups of sixteen rows are repacked.
#[test]
fn interleaved_layouts_match_the_plain_rows() {
    use fucina::backend::interleave::{interleave, Interleaved};
    use fucina::backend::qdot_k::KFormat;
    use fucina::backend::{BackendKind, WeightFormat, WeightMat};
    let (scalar, native) = (BackendKind::Scalar.kernels(), BackendKind::Native.kernels());
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let val = |s: usize, i: usize| ((i * 7919 + s * 104_729) % 2003) as f32 / 1001.5 - 1.0;
    let cases = [
        (Interleaved::Q4K, WeightFormat::K(KFormat::Q4K), WeightFormat::Q4KX16, GgmlType::Q4_K),
        (Interleaved::Q6K, WeightFormat::K(KFormat::Q6K), WeightFormat::Q6KX16, GgmlType::Q6_K),
        (Interleaved::Q8_0, WeightFormat::Q8_0, WeightFormat::Q8_0X16, GgmlType::Q8_0),
    ];
    for (f, plain, packed_format, ty) in cases {
        // Both backends choose the same layout (the spec computes the native path).
        let chosen = native.weight_layout(plain, 32, 256);
        assert!(chosen == plain || chosen == packed_format, "{chosen:?}");
        assert_eq!(scalar.weight_layout(plain, 32, 256), chosen);
        assert_eq!(native.weight_layout(plain, 24, 256), plain, "24 rows are not whole groups");
        assert!(!f.fits(24, 256) && !f.fits(32, 100) && f.fits(48, 768));
        // A matrix large enough for the native repack to split over the pool (uneven tasks).
        let (n, k) = (400, 2048);
        let data = fucina::quant::quantize(ty, &(0..n * k).map(|i| val(5, i)).collect::<Vec<_>>()).unwrap();
        let rows = WeightMat { format: plain, rows: n, cols: k, data: &data };
        let (mut p1, mut p2) = (vec![0u8; data.len()], vec![0u8; data.len()]);
        interleave(f, n, k, &data, &mut p1);
        pool.install(|| native.weight_repack(&rows, f, &mut p2));
        assert!(p1 == p2, "{f:?} {n}x{k}: the split repack differs");
        for (n, k) in [(16, 256), (48, 768), (160, 512)] {
            let wf: Vec<f32> = (0..n * k).map(|i| val(3, i) * (1.0 + (i % 29) as f32)).collect();
            let data = fucina::quant::quantize(ty, &wf).unwrap();
            let mut packed = vec![0u8; data.len()];
            interleave(f, n, k, &data, &mut packed);
            let rows = WeightMat { format: plain, rows: n, cols: k, data: &data };
            let x16 = WeightMat { format: packed_format, rows: n, cols: k, data: &packed };
            let (mut p1, mut p2) = (vec![0u8; data.len()], vec![0u8; data.len()]);
            scalar.weight_repack(&rows, f, &mut p1);
            pool.install(|| native.weight_repack(&rows, f, &mut p2));
            assert!(p1 == packed && p2 == packed, "{f:?} {n}x{k}: the backends repack differently");
            let (mut d0, mut d1, mut d2) = (vec![0.0; n * k], vec![0.0; n * k], vec![0.0; n * k]);
            scalar.weight_decode(&rows, &mut d0);
            scalar.weight_decode(&x16, &mut d1);
            pool.install(|| native.weight_decode(&x16, &mut d2));
            assert!(d0 == d1 && d0 == d2, "{f:?} {n}x{k}: decoded values differ");
            for m in [1, 2, 3, 4, 5, 7, 8, 9, 17, 33] {
                let x: Vec<f32> = (0..m * k).map(|i| val(m, i)).collect();
                if !plain.takes_bf16(m, k) {
                    let (mut a, mut b) = (vec![0.0; m * n], vec![0.0; m * n]);
                    scalar.weight_matmul(&rows, &x, m, &mut a);
                    scalar.weight_matmul(&x16, &x, m, &mut b);
                    assert!(a == b, "{f:?} {n}x{k} m={m}: the spec differs between layouts");
                }
                check_weight_product(&x16, &d0, m, m, &pool);
                // A row's result does not depend on the batch it came in (four-row kernels,
                // the Q6_K tile from 8 rows): the same bits as that row alone.
                let mut y = vec![0.0; m * n];
                native.weight_matmul(&x16, &x, m, &mut y);
                for i in [0, m / 2, m - 1] {
                    let mut one = vec![0.0; n];
                    native.weight_matmul(&x16, &x[i * k..(i + 1) * k], 1, &mut one);
                    assert!(one == y[i * n..(i + 1) * n], "{f:?} {n}x{k} m={m}: row {i} differs alone");
                }
            }
        }
    }
}

/// Runs one product `x [m, k] W^T` (activations from `seed`) on the scalar backend, the
/// native one and the native one on a two-thread pool: the two native results must be the
/// same bits (splitting over threads never changes a sum's order) and within 2e-5 of the
/// spec relative to the sum of |products| (same path, other summation order). `decoded` is
/// the weight decoded by the spec.
fn check_weight_product(
    w: &fucina::backend::WeightMat<'_>,
    decoded: &[f32],
    m: usize,
    seed: usize,
    pool: &rayon::ThreadPool,
) {
    use fucina::backend::BackendKind;
    let (scalar, native) = (BackendKind::Scalar.kernels(), BackendKind::Native.kernels());
    let (n, k, format) = (w.rows, w.cols, w.format);
    let val = |s: usize, i: usize| ((i * 7919 + s * 104_729) % 2003) as f32 / 1001.5 - 1.0;
    let x: Vec<f32> = (0..m * k).map(|i| val(seed, i)).collect();
    let (mut y0, mut y1, mut y2) = (vec![0.0; m * n], vec![0.0; m * n], vec![0.0; m * n]);
    scalar.weight_matmul(w, &x, m, &mut y0);
    native.weight_matmul(w, &x, m, &mut y1);
    pool.install(|| native.weight_matmul(w, &x, m, &mut y2));
    assert!(y1 == y2, "{format:?} m={m} n={n} k={k}: one thread and two differ");
    // Products on the integer path give the spec's bits with every kernel (one row, four
    // rows, the tiles), so a row's result cannot depend on the batch size: Q8_0 and Q4_0 on
    // every CPU, the K-quants where their AVX2 (or scalar) kernels run; the AVX-512 K-quant
    // row kernels accumulate in vector lanes and are held to the tolerance above only.
    use fucina::backend::WeightFormat as F;
    let exact = match format {
        F::Q8_0 | F::Q4_0 => true,
        F::K(_) => !fucina::backend::native::simd::has_avx512_int(),
        // The interleaved AVX2 Q8_0 and Q4_K kernels add each row's block terms in the
        // spec's order.
        F::Q8_0X16 | F::Q4KX16 => !fucina::backend::native::simd::has_avx512_int(),
        _ => false,
    };
    if exact && !format.takes_bf16(m, k) {
        for j in 0..m * n {
            assert!(
                y1[j].to_bits() == y0[j].to_bits(),
                "{format:?} m={m} n={n} k={k} [{}, {}]: native {} vs spec {}",
                j / n,
                j % n,
                y1[j],
                y0[j]
            );
        }
    }
    for j in 0..m * n {
        let (i, c) = (j / n, j % n);
        let mag: f32 = (0..k).map(|t| (x[i * k + t] * decoded[c * k + t]).abs()).sum::<f32>() + 1e-3;
        assert!(
            (y1[j] - y0[j]).abs() <= 2e-5 * mag,
            "{format:?} m={m} n={n} k={k} [{i},{c}]: {} vs {} (scale {mag})",
            y1[j],
            y0[j]
        );
    }
}

/// Float weights with reduction lengths that are not a multiple of the vector width, through
/// the packed GEMM (from 8 rows on AVX2, from 1024 on AVX-512) and the row tiles below it:
/// native against the scalar spec, and the same bits on one thread and two.
#[test]
fn float_weight_products_handle_ragged_lengths() {
    use fucina::backend::fdot::FloatRow;
    use fucina::backend::{BackendKind, WeightFormat, WeightMat};
    let scalar = BackendKind::Scalar.kernels();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let val = |s: usize, i: usize| ((i * 7919 + s * 104_729) % 2003) as f32 / 1001.5 - 1.0;
    for (format, ty) in [
        (WeightFormat::Float(FloatRow::F32), GgmlType::F32),
        (WeightFormat::Float(FloatRow::F16), GgmlType::F16),
        (WeightFormat::Float(FloatRow::BF16), GgmlType::BF16),
    ] {
        for (n, k) in [(19, 37), (40, 300), (5, 1)] {
            let wf: Vec<f32> = (0..n * k).map(|i| val(1, i)).collect();
            let data = fucina::quant::quantize(ty, &wf).unwrap();
            let w = WeightMat { format, rows: n, cols: k, data: &data };
            let mut d = vec![0.0; n * k];
            scalar.weight_decode(&w, &mut d);
            for m in [2, 7, 8, 17, 40, 1030] {
                check_weight_product(&w, &d, m, m + 5, &pool);
            }
        }
    }
}

/// `QLinear` over an input whose contracted axis is not last: with f32 rows it equals
/// `nn::Linear` within 1e-5, with Q4_K weights within the format's error, on both backends;
/// its weight is a frozen weight and its bias a parameter; a wrong width is an error.
#[test]
fn qlinear_matches_nn_linear_in_any_layout() {
    use fucina::nn::{Bias, Linear, Module};
    use fucina::prelude::*;
    use fucina::quant::QLinear;
    for backend in [BackendKind::Scalar, BackendKind::Native] {
        let ctx = ExecContext::new(ExecConfig { backend, seed: 5, ..ExecConfig::default() }).unwrap();
        let _g = ctx.enter();
        let fc = Linear::<hidden, r#in>::init(&ctx, 256, 24, Bias::With).unwrap();
        let x = ctx.randn::<axes![seq, r#in, batch]>(&[3, 256, 2], 0.0, 1.0).unwrap();
        let want = fc.forward(&x).unwrap();
        assert_eq!(want.shape(), &[3, 2, 24]);
        for (ty, tol) in [(GgmlType::F32, 1e-5), (GgmlType::Q8_0, 0.05), (GgmlType::Q4_K, 0.25)] {
            let q = QLinear::quantize(&fc, ty).unwrap();
            let got: Tensor<axes![seq, batch, hidden]> = q.forward(&x).unwrap();
            let err = want.to_f32_vec().iter().zip(got.to_f32_vec()).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
            assert!(err < tol, "{backend:?} {ty:?}: off by {err}");
            assert_eq!(q.param_names(), ["bias"]);
            assert_eq!(q.frozen_weights(), [("weight".to_string(), format!("{ty:?}"), 24, 256)]);
        }
        let q = QLinear::quantize(&fc, GgmlType::Q8_0).unwrap();
        let narrow = Tensor::<axes![batch, r#in]>::zeros(&[2, 255]).unwrap();
        assert!(q.forward(&narrow).is_err(), "255 inputs for a 256-wide weight");
    }
}

/// A group of weight products (`Kernels::weight_matmul_group`) gives each product the same
/// bits as its own `weight_matmul` on the same backend, whichever way the native backend runs
/// the group: interleaved weights as one region (two products reading the same activations
/// share one quantization), small products of other formats side by side, larger ones one
/// after another; on one thread and two. `ProductGroup` hands each result back once, typed.
#[test]
fn weight_groups_equal_one_product_each() {
    use fucina::backend::fdot::FloatRow;
    use fucina::backend::interleave::{interleave, Interleaved};
    use fucina::backend::qdot_k::KFormat;
    use fucina::backend::{BackendKind, Kernels, WeightFormat, WeightJob, WeightMat};
    let (scalar, native) = (BackendKind::Scalar.kernels(), BackendKind::Native.kernels());
    let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
    let val = |s: usize, i: usize| ((i * 7919 + s * 104_729) % 2003) as f32 / 1001.5 - 1.0;
    let quantized = |ty: GgmlType, n: usize, k: usize, seed: usize| {
        quantize(ty, &(0..n * k).map(|i| val(seed, i)).collect::<Vec<_>>()).unwrap()
    };
    let f16_bytes = |n: usize, seed: usize| -> Vec<u8> {
        (0..n).flat_map(|i| half::f16::from_f32(val(seed, i)).to_le_bytes()).collect()
    };
    let bf16_bytes = |n: usize, seed: usize| -> Vec<u8> {
        (0..n).flat_map(|i| half::bf16::from_f32(val(seed, i)).to_le_bytes()).collect()
    };
    let packed = |f: Interleaved, n: usize, k: usize, data: &[u8]| {
        let mut out = vec![0u8; data.len()];
        interleave(f, n, k, data, &mut out);
        out
    };
    // (format, rows, cols, bytes): interleaved layouts of three formats and plain rows of others.
    let q4 = quantized(GgmlType::Q4_K, 48, 768, 1);
    let q6 = quantized(GgmlType::Q6_K, 32, 256, 2);
    let q8 = quantized(GgmlType::Q8_0, 160, 512, 3);
    let q4b = quantized(GgmlType::Q4_K, 64, 768, 4);
    let weights: Vec<(WeightFormat, usize, usize, Vec<u8>)> = vec![
        (WeightFormat::Q4KX16, 48, 768, packed(Interleaved::Q4K, 48, 768, &q4)),
        (WeightFormat::Q6KX16, 32, 256, packed(Interleaved::Q6K, 32, 256, &q6)),
        (WeightFormat::Q8_0X16, 160, 512, packed(Interleaved::Q8_0, 160, 512, &q8)),
        (WeightFormat::Q4KX16, 64, 768, packed(Interleaved::Q4K, 64, 768, &q4b)),
        (WeightFormat::K(KFormat::Q5K), 24, 256, quantized(GgmlType::Q5_K, 24, 256, 5)),
        (WeightFormat::Q8_0, 40, 96, quantized(GgmlType::Q8_0, 40, 96, 6)),
        (WeightFormat::Q4KX16, 16, 256, packed(Interleaved::Q4K, 16, 256, &quantized(GgmlType::Q4_K, 16, 256, 7))),
        (WeightFormat::K(KFormat::Q5K), 64, 1024, quantized(GgmlType::Q5_K, 64, 1024, 8)),
        (WeightFormat::Q8_0, 64, 1024, quantized(GgmlType::Q8_0, 64, 1024, 9)),
        (WeightFormat::Float(FloatRow::F16), 96, 1024, f16_bytes(96 * 1024, 11)),
        (WeightFormat::Float(FloatRow::F16), 40, 1024, f16_bytes(40 * 1024, 12)),
        (WeightFormat::Float(FloatRow::BF16), 72, 512, bf16_bytes(72 * 512, 13)),
    ];
    // Groups as indices into `weights`, each product's activation rows, and which products
    // read the first product's activations (same slice) instead of their own.
    let groups: [(&[usize], &[usize], &[bool]); 9] = [
        (&[7, 8, 7, 8, 7], &[1, 1, 1, 1, 1], &[false, false, false, false, true]),
        // Float weights (f16, bf16), one row each, next to each other and next to Q8_0.
        (&[9, 10, 9, 11, 10], &[1, 1, 1, 1, 1], &[false, false, true, false, false]),
        (&[9, 10, 8], &[1, 1, 1], &[false, true, false]),
        (&[0, 3], &[1, 1], &[false, true]),
        (&[0, 1, 2, 3, 6], &[1, 3, 9, 2, 5], &[false, false, false, false, false]),
        (&[0, 3, 0], &[4, 4, 4], &[false, true, true]),
        (&[4, 5, 0, 1], &[1, 2, 8, 3], &[false, false, false, false]),
        (&[4, 5, 2], &[17, 9, 33], &[false, false, false]),
        // Float weights on their tile paths, with rows past the last whole tile.
        (&[9, 10, 11], &[5, 17, 6], &[false, false, false]),
    ];
    for (ids, ms, shared) in groups {
        let mats: Vec<WeightMat<'_>> = ids
            .iter()
            .map(|&i| WeightMat { format: weights[i].0, rows: weights[i].1, cols: weights[i].2, data: &weights[i].3 })
            .collect();
        let xs: Vec<Vec<f32>> = mats
            .iter()
            .zip(ms)
            .enumerate()
            .map(|(j, (w, &m))| (0..m * w.cols).map(|i| val(10 + j, i)).collect())
            .collect();
        let input = |j: usize| if shared[j] { &xs[0] } else { &xs[j] };
        for (name, kern) in [("scalar", scalar), ("native", native)] {
            for threads in [1, 2] {
                let run = |f: &mut (dyn FnMut() + Send)| if threads == 2 { pool.install(f) } else { f() };
                // Outputs start as NaN: every product must write every element (callers hand
                // in pooled buffers with stale values), and NaN never equals itself below.
                let mut alone: Vec<Vec<f32>> = mats.iter().zip(ms).map(|(w, &m)| vec![f32::NAN; m * w.rows]).collect();
                run(&mut || {
                    for (j, w) in mats.iter().enumerate() {
                        kern.weight_matmul(w, input(j), ms[j], &mut alone[j]);
                    }
                });
                let mut ys: Vec<Vec<f32>> = mats.iter().zip(ms).map(|(w, &m)| vec![f32::NAN; m * w.rows]).collect();
                run(&mut || {
                    let mut jobs: Vec<WeightJob<'_>> = ys
                        .iter_mut()
                        .enumerate()
                        .map(|(j, y)| WeightJob { w: mats[j], x: input(j), m: ms[j], y })
                        .collect();
                    kern.weight_matmul_group(&mut jobs);
                });
                for j in 0..mats.len() {
                    assert!(
                        ys[j] == alone[j],
                        "{name}, {threads} threads, group {ids:?}: product {j} differs from its own call"
                    );
                }
            }
        }
    }
    let _: &dyn Kernels = native;

    // The typed front: results by handle, once each.
    use fucina::prelude::*;
    use fucina::quant::{ProductGroup, QWeight};
    axis!(seq, hidden, wide, narrow);
    let wa =
        QWeight::<wide, hidden>::quantize(&Tensor::<axes![wide, hidden]>::randn(&[64, 256]).unwrap(), GgmlType::Q4_K)
            .unwrap();
    let wb = QWeight::<narrow, hidden>::quantize(
        &Tensor::<axes![narrow, hidden]>::randn(&[16, 256]).unwrap(),
        GgmlType::Q6_K,
    )
    .unwrap();
    let (x, x2) = (
        Tensor::<axes![seq, hidden]>::randn(&[3, 256]).unwrap(),
        Tensor::<axes![seq, hidden]>::randn(&[5, 256]).unwrap(),
    );
    let mut group = ProductGroup::new();
    let (ha, hb, hb2) = (group.push(&wa, &x).unwrap(), group.push(&wb, &x).unwrap(), group.push(&wb, &x2).unwrap());
    let mut out = group.run().unwrap();
    assert_eq!(out.take(hb2).unwrap().to_f32_vec(), wb.forward(&x2).unwrap().to_f32_vec());
    assert_eq!(out.take(ha).unwrap().to_f32_vec(), wa.forward(&x).unwrap().to_f32_vec());
    assert_eq!(out.take(hb).unwrap().to_f32_vec(), wb.forward(&x).unwrap().to_f32_vec());
    let mut again = ProductGroup::new();
    let stale = again.push(&wa, &x).unwrap();
    let mut other = ProductGroup::new();
    let _first = other.push(&wb, &x2).unwrap();
    let mut other_out = other.run().unwrap();
    assert!(other_out.take(stale).is_err(), "a handle whose slot holds another shape");
    let wrong = Tensor::<axes![seq, hidden]>::randn(&[2, 128]).unwrap();
    assert!(ProductGroup::new().push(&wa, &wrong).is_err(), "the contracted sizes differ");
}

/// A stack of matrices (`QWeightStack`, ggml's three-dimensional weights) gives each index of
/// its stacking axis the bits of that matrix's own product with that slice of the input, on
/// both backends, on one thread and two (a team driving the group), with the file's rows or
/// a repacked layout, for one activation row and several, with the input in a permuted
/// layout; mismatched sizes are errors naming the axis.
#[test]
fn weight_stacks_equal_one_product_per_index() {
    use fucina::prelude::*;
    use fucina::quant::{QWeight, QWeightStack};
    axis!(seq, head, outs, ins);
    let val = |s: usize, i: usize| ((i * 7919 + s * 104_729) % 2003) as f32 / 1001.5 - 1.0;
    // (format, rows, cols): Q8_0 and Q4_K with sixteen-row multiples (repacked where this CPU
    // repacks them), rows that are not, and float rows of odd lengths.
    let cases = [
        (GgmlType::Q8_0, 48, 96),
        (GgmlType::Q8_0, 40, 64),
        (GgmlType::Q4_K, 32, 256),
        (GgmlType::Q6_K, 24, 512),
        (GgmlType::F32, 5, 7),
        (GgmlType::F16, 9, 33),
    ];
    for backend in [BackendKind::Scalar, BackendKind::Native] {
        for threads in [1, 2] {
            let ctx = ExecContext::with_backend(backend, threads).unwrap();
            let _g = ctx.enter();
            for (ty, rows, cols) in cases {
                let g = 3;
                let values: Vec<f32> = (0..g * rows * cols).map(|i| val(1, i)).collect();
                let stack =
                    QWeightStack::<head, outs, ins>::from_f32(&values, g, rows, cols, ty).unwrap().prepared().unwrap();
                for m in [1, 3] {
                    let x: Vec<f32> = (0..m * g * cols).map(|i| val(2 + m, i)).collect();
                    // Built as [head, seq, ins] and seen as [seq, head, ins]: a strided input.
                    let x = Tensor::<axes![head, seq, ins]>::from_vec(x, &[g, m, cols])
                        .unwrap()
                        .permute::<axes![seq, head, ins]>()
                        .unwrap();
                    let y = ctx.run_on_pool(|| stack.forward(&x)).unwrap();
                    assert_eq!(y.shape(), &[m, g, rows]);
                    for h in 0..g {
                        let xh = x.narrow::<head>(h, 1).unwrap().contiguous().unwrap().to_f32_vec();
                        let xh = Tensor::<axes![seq, ins]>::from_vec(xh, &[m, cols]).unwrap();
                        let want = stack.get(h).unwrap().forward(&xh).unwrap().to_f32_vec();
                        let got = y.narrow::<head>(h, 1).unwrap().contiguous().unwrap().to_f32_vec();
                        assert!(
                            want.iter().map(|v| v.to_bits()).eq(got.iter().map(|v| v.to_bits())),
                            "{backend:?}, {threads} threads, {ty:?} {rows}x{cols}, {m} rows: head {h} differs"
                        );
                    }
                }
            }
            // Sizes that do not match are errors naming the axis, not panics.
            let stack =
                QWeightStack::<head, outs, ins>::from_f32(&[0.5; 2 * 4 * 32], 2, 4, 32, GgmlType::Q8_0).unwrap();
            let e = stack.forward(&Tensor::<axes![seq, head, ins]>::zeros(&[1, 3, 32]).unwrap()).unwrap_err();
            assert!(e.to_string().contains("head"), "{e}");
            let e = stack.forward(&Tensor::<axes![seq, head, ins]>::zeros(&[1, 2, 64]).unwrap()).unwrap_err();
            assert!(e.to_string().contains("ins"), "{e}");
            let empty = stack.forward(&Tensor::<axes![seq, head, ins]>::zeros(&[0, 2, 32]).unwrap()).unwrap();
            assert_eq!(empty.shape(), &[0, 2, 4]);
        }
    }
    let a = QWeight::<outs, ins>::quantize(&Tensor::zeros(&[4, 32]).unwrap(), GgmlType::Q8_0).unwrap();
    let b = QWeight::<outs, ins>::quantize(&Tensor::zeros(&[4, 64]).unwrap(), GgmlType::Q8_0).unwrap();
    assert!(QWeightStack::<head, outs, ins>::new(vec![a, b]).is_err(), "matrices of two shapes");
    assert!(QWeightStack::<head, outs, ins>::new(Vec::new()).is_err(), "no matrices");
    assert!(QWeightStack::<head, outs, ins>::from_f32(&[0.0; 10], 2, 4, 32, GgmlType::F32).is_err(), "too few values");
}
