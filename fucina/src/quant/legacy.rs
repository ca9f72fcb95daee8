//! The 32-value block formats Q4_0, Q4_1, Q5_0, Q5_1, Q8_0.
//!
//! Encoders reproduce gguf-py's numpy arithmetic (f32 throughout, scales stored as f16
//! rounded to nearest even, `1/d` from the unrounded `d`), so they are byte-exact with it.

use crate::backend::weights::decode_row;
use crate::backend::WeightFormat;
use half::f16;

const QK: usize = 32;

fn h(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_le_bytes()
}

fn rd(b: &[u8], at: usize) -> f32 {
    f16::from_le_bytes([b[at], b[at + 1]]).to_f32()
}

fn inv(d: f32) -> f32 {
    if d == 0.0 {
        0.0
    } else {
        1.0 / d
    }
}

/// The element of largest magnitude (first one on ties), with its sign.
fn signed_absmax(x: &[f32]) -> f32 {
    let mut best = x[0];
    for v in &x[1..] {
        if v.abs() > best.abs() {
            best = *v;
        }
    }
    best
}

fn min_max(x: &[f32]) -> (f32, f32) {
    x.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), v| (lo.min(*v), hi.max(*v)))
}

/// The low byte of numpy's (and C's, on x86-64) float -> integer cast: truncation to a
/// 32-bit integer, where NaN, infinities and values outside the i32 range become
/// `i32::MIN` (whose low byte is 0). Blocks of denormals reach this with `1/d` infinite,
/// so `x * id` is ±inf (or NaN for zeros); the reference encoders then store 0.
fn cast_low_byte(v: f32) -> u8 {
    const LIMIT: f32 = 2_147_483_648.0; // 2^31
    if v.is_nan() || !(-LIMIT..LIMIT).contains(&v) {
        0
    } else {
        (v.trunc() as i32) as u8
    }
}

/// numpy's `trunc(v).astype(uint8).clip(0, hi)`.
fn q_u8(v: f32, hi: u8) -> u8 {
    cast_low_byte(v).min(hi)
}

/// Q4_0: `d = max / -8`, `q = trunc(x/d + 8.5)` in 0..=15.
pub fn quantize_q4_0(x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(x.len() / QK * 18);
    for b in x.chunks_exact(QK) {
        let d = signed_absmax(b) / -8.0;
        let id = inv(d);
        let q: Vec<u8> = b.iter().map(|v| q_u8(v * id + 8.5, 15)).collect();
        out.extend_from_slice(&h(d));
        out.extend((0..16).map(|i| q[i] | (q[i + 16] << 4)));
    }
    out
}

/// Decodes Q4_0.
pub fn dequantize_q4_0(bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0.0; bytes.len() / 18 * QK];
    decode_row(WeightFormat::Q4_0, bytes, &mut out);
    out
}

/// Q4_1: `d = (max - min) / 15`, `q = trunc((x - min)/d + 0.5)`.
pub fn quantize_q4_1(x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(x.len() / QK * 20);
    for b in x.chunks_exact(QK) {
        let (lo, hi) = min_max(b);
        let d = (hi - lo) / 15.0;
        let id = inv(d);
        let q: Vec<u8> = b.iter().map(|v| q_u8((v - lo) * id + 0.5, 15)).collect();
        out.extend_from_slice(&h(d));
        out.extend_from_slice(&h(lo));
        out.extend((0..16).map(|i| q[i] | (q[i + 16] << 4)));
    }
    out
}

/// Decodes Q4_1.
pub fn dequantize_q4_1(bytes: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(bytes.len() / 20 * QK);
    for b in bytes.chunks_exact(20) {
        let (d, m) = (rd(b, 0), rd(b, 2));
        let qs = &b[4..];
        out.extend((0..16).map(|i| d * (qs[i] & 0x0F) as f32 + m));
        out.extend((0..16).map(|i| d * (qs[i] >> 4) as f32 + m));
    }
    out
}

fn pack5(q: &[u8]) -> ([u8; 4], [u8; 16]) {
    let mut qh = 0u32;
    for (i, v) in q.iter().enumerate() {
        qh |= ((v >> 4) as u32 & 1) << i;
    }
    let mut qs = [0u8; 16];
    for i in 0..16 {
        qs[i] = (q[i] & 0x0F) | (q[i + 16] << 4);
    }
    (qh.to_le_bytes(), qs)
}

fn unpack5(qh: &[u8], qs: &[u8]) -> [u8; 32] {
    let qh = u32::from_le_bytes([qh[0], qh[1], qh[2], qh[3]]);
    let mut q = [0u8; 32];
    for i in 0..16 {
        q[i] = (qs[i] & 0x0F) | (((qh >> i) & 1) as u8) << 4;
        q[i + 16] = (qs[i] >> 4) | (((qh >> (i + 16)) & 1) as u8) << 4;
    }
    q
}

/// Q5_0: `d = max / -16`, `q = trunc(x/d + 16.5)` in 0..=31, high bits packed apart.
pub fn quantize_q5_0(x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(x.len() / QK * 22);
    for b in x.chunks_exact(QK) {
        let d = signed_absmax(b) / -16.0;
        let id = inv(d);
        let q: Vec<u8> = b.iter().map(|v| q_u8(v * id + 16.5, 31)).collect();
        let (qh, qs) = pack5(&q);
        out.extend_from_slice(&h(d));
        out.extend_from_slice(&qh);
        out.extend_from_slice(&qs);
    }
    out
}

/// Decodes Q5_0.
pub fn dequantize_q5_0(bytes: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(bytes.len() / 22 * QK);
    for b in bytes.chunks_exact(22) {
        let d = rd(b, 0);
        out.extend(unpack5(&b[2..6], &b[6..]).iter().map(|q| d * (*q as i8 - 16) as f32));
    }
    out
}

/// Q5_1: `d = (max - min) / 31`, `q = trunc((x - min)/d + 0.5)`.
pub fn quantize_q5_1(x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(x.len() / QK * 24);
    for b in x.chunks_exact(QK) {
        let (lo, hi) = min_max(b);
        let d = (hi - lo) / 31.0;
        let id = inv(d);
        let q: Vec<u8> = b.iter().map(|v| q_u8((v - lo) * id + 0.5, 31)).collect();
        let (qh, qs) = pack5(&q);
        out.extend_from_slice(&h(d));
        out.extend_from_slice(&h(lo));
        out.extend_from_slice(&qh);
        out.extend_from_slice(&qs);
    }
    out
}

/// Decodes Q5_1.
pub fn dequantize_q5_1(bytes: &[u8]) -> Vec<f32> {
    let mut out = Vec::with_capacity(bytes.len() / 24 * QK);
    for b in bytes.chunks_exact(24) {
        let (d, m) = (rd(b, 0), rd(b, 2));
        out.extend(unpack5(&b[4..8], &b[8..]).iter().map(|q| d * *q as f32 + m));
    }
    out
}

/// Q8_0: `d = amax / 127`, `q = round(x/d)` (half away from zero), as ggml's reference.
pub fn quantize_q8_0(x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(x.len() / QK * 34);
    for b in x.chunks_exact(QK) {
        let amax = b.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = inv(d);
        out.extend_from_slice(&h(d));
        // `round` is gguf-py's np_roundf (half away from zero) on finite values; non-finite
        // products (denormal blocks) cast to 0 as numpy's `astype(int8)` does.
        out.extend(b.iter().map(|v| cast_low_byte((v * id).round())));
    }
    out
}

/// Decodes Q8_0.
pub fn dequantize_q8_0(bytes: &[u8]) -> Vec<f32> {
    let mut out = vec![0.0; bytes.len() / 34 * QK];
    decode_row(WeightFormat::Q8_0, bytes, &mut out);
    out
}
