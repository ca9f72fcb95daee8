//! The 256-value K-quant super-block formats: decoders for Q2_K..Q6_K and Q8_K, and the
//! Q8_K encoder (ggml's `quantize_row_q8_K_ref`).

use crate::backend::qdot_k::{quantize_row_q8_k, Q8_K_BYTES};
use half::f16;

const QK_K: usize = 256;

fn rd(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

/// Decodes Q2_K: `scales[16] qs[64] d dmin`; 16 groups of 16 with 4-bit scale and min.
pub fn dequantize_q2_k(bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0.0f32; bytes.len() / 84 * QK_K];
    for (b, o) in bytes.chunks_exact(84).zip(out.chunks_exact_mut(QK_K)) {
        let (scales, qs) = (&b[..16], &b[16..80]);
        let (d, dmin) = (rd(b, 80), rd(b, 82));
        for (e, v) in o.iter_mut().enumerate() {
            let (c, s, i) = (e / 128, (e / 32) % 4, e % 32);
            let q = ((qs[c * 32 + i] >> (2 * s)) & 3) as f32;
            let g = e / 16;
            let dl = d * (scales[g] & 0x0F) as f32;
            let ml = dmin * (scales[g] >> 4) as f32;
            *v = dl * q - ml;
        }
    }
    out
}

/// Decodes Q3_K: `hmask[32] qs[64] scales[12] d`; 16 groups of 16 with 6-bit signed scales.
pub fn dequantize_q3_k(bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0.0f32; bytes.len() / 110 * QK_K];
    for (b, o) in bytes.chunks_exact(110).zip(out.chunks_exact_mut(QK_K)) {
        let (hmask, qs, sc) = (&b[..32], &b[32..96], &b[96..108]);
        let d = rd(b, 108);
        let mut scales = [0.0f32; 16];
        for (j, s) in scales.iter_mut().enumerate() {
            let l = sc[j % 8] >> (4 * (j / 8));
            let hbits = sc[8 + j % 4] >> (2 * (j / 4));
            let v = (l & 0x0F) | ((hbits & 0x03) << 4);
            *s = (v as i8 - 32) as f32;
        }
        for (e, v) in o.iter_mut().enumerate() {
            let (c, s, i) = (e / 128, (e / 32) % 4, e % 32);
            let ql = ((qs[c * 32 + i] >> (2 * s)) & 3) as i8;
            let qh = ((hmask[e % 32] >> (e / 32)) & 1) ^ 1;
            let q = (ql - (qh << 2) as i8) as f32;
            *v = (d * scales[e / 16]) * q;
        }
    }
    out
}

/// The eight 6-bit scales and minimums of a Q4_K/Q5_K super-block.
fn scale_min_k4(sc: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (d, m, md) = (&sc[0..4], &sc[4..8], &sc[8..12]);
    let mut s = [0u8; 8];
    let mut mn = [0u8; 8];
    for i in 0..4 {
        s[i] = d[i] & 0x3F;
        s[4 + i] = (md[i] & 0x0F) | ((d[i] >> 2) & 0x30);
        mn[i] = m[i] & 0x3F;
        mn[4 + i] = (md[i] >> 4) | ((m[i] >> 2) & 0x30);
    }
    (s, mn)
}

/// Decodes Q4_K: `d dmin scales[12] qs[128]`; 8 groups of 32.
pub fn dequantize_q4_k(bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0.0f32; bytes.len() / 144 * QK_K];
    for (b, o) in bytes.chunks_exact(144).zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (rd(b, 0), rd(b, 2));
        let (sc, mn) = scale_min_k4(&b[4..16]);
        let qs = &b[16..];
        for (e, v) in o.iter_mut().enumerate() {
            let (c, s, i) = (e / 64, (e / 32) % 2, e % 32);
            let q = ((qs[c * 32 + i] >> (4 * s)) & 0x0F) as f32;
            let g = e / 32;
            *v = (d * sc[g] as f32) * q - dmin * mn[g] as f32;
        }
    }
    out
}

/// Decodes Q5_K: `d dmin scales[12] qh[32] qs[128]`; 8 groups of 32.
pub fn dequantize_q5_k(bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0.0f32; bytes.len() / 176 * QK_K];
    for (b, o) in bytes.chunks_exact(176).zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (rd(b, 0), rd(b, 2));
        let (sc, mn) = scale_min_k4(&b[4..16]);
        let (qh, qs) = (&b[16..48], &b[48..]);
        for (e, v) in o.iter_mut().enumerate() {
            let (c, s, i) = (e / 64, (e / 32) % 2, e % 32);
            let ql = (qs[c * 32 + i] >> (4 * s)) & 0x0F;
            let hb = (qh[e % 32] >> (e / 32)) & 1;
            let q = (ql | (hb << 4)) as f32;
            let g = e / 32;
            *v = (d * sc[g] as f32) * q - dmin * mn[g] as f32;
        }
    }
    out
}

/// Decodes Q6_K: `ql[128] qh[64] scales[16] d`; 16 groups of 16 with int8 scales.
pub fn dequantize_q6_k(bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0.0f32; bytes.len() / 210 * QK_K];
    for (b, o) in bytes.chunks_exact(210).zip(out.chunks_exact_mut(QK_K)) {
        let (ql, qh, sc) = (&b[..128], &b[128..192], &b[192..208]);
        let d = rd(b, 208);
        for (e, v) in o.iter_mut().enumerate() {
            let c = e / 128;
            let lo = (ql[c * 64 + e % 64] >> (4 * ((e / 64) % 2))) & 0x0F;
            let hi = (qh[c * 32 + e % 32] >> (2 * ((e / 32) % 4))) & 0x03;
            let q = ((lo | (hi << 4)) as i8 - 32) as f32;
            *v = (d * (sc[e / 16] as i8) as f32) * q;
        }
    }
    out
}

/// Decodes Q8_K: `d (f32) qs[256] (i8) bsums[16] (i16)`.
pub fn dequantize_q8_k(bytes: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(bytes.len() / 292 * QK_K);
    for b in bytes.chunks_exact(292) {
        let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        out.extend(b[4..260].iter().map(|q| d * *q as i8 as f32));
    }
    out
}

/// Encodes Q8_K as ggml's `quantize_row_q8_K_ref`: `iscale = -127 / max`, 16 block sums.
pub fn quantize_q8_k(x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; x.len() / QK_K * Q8_K_BYTES];
    quantize_row_q8_k(x, &mut out);
    out
}
