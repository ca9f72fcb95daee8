//! K-quant encoders (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K), ported from ggml's reference
//! quantizers (`quantize_row_qN_K_ref`, the path `llama-quantize` takes without an
//! importance matrix).
//!
//! Every float expression keeps ggml's operand order and f32 precision, so on the same input
//! the output bytes are identical to ggml's (compiled without FMA contraction, as x86-64's
//! baseline is). The goldens in `fucina/tests/goldens/kquant/` hold that proof.

pub(crate) use crate::backend::qdot_k::nearest_int;
use crate::backend::qdot_k::{q3k_scales, scale_min_k4};
use half::f16;

const QK_K: usize = 256;
/// Groups whose largest magnitude is below this are stored as all zero (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

fn h(x: f32) -> [u8; 2] {
    f16::from_f32(x).to_le_bytes()
}

fn fp16_round(x: f32) -> f32 {
    f16::from_f32(x).to_f32()
}

/// `make_qx_quants` with `rmse_type = 1` and no importance weights (Q6_K's scale search):
/// signed levels in `[0, 2 nmax)`, returns the scale.
fn make_qx_quants(x: &[f32], nmax: i32, l_out: &mut [i32]) -> f32 {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out.iter_mut().for_each(|l| *l = 0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    let mut iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (&v, lo) in x.iter().zip(l_out.iter_mut()) {
        let l = level(iscale, v);
        *lo = l + nmax;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9i32..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        sumlx = 0.0;
        suml2 = 0.0;
        for &v in x {
            let l = level(iscale, v);
            let w = v * v;
            sumlx += w * v * l as f32;
            suml2 += w * l as f32 * l as f32;
        }
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (&v, lo) in x.iter().zip(l_out.iter_mut()) {
                *lo = nmax + level(iscale, v);
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// `make_q3_quants` with `do_rmse = true` (Q3_K's scale search): coordinate descent on
/// the levels, five passes at most; levels are returned offset by `nmax`.
fn make_q3_quants(x: &[f32], nmax: i32, l_out: &mut [i32]) -> f32 {
    let (mut max, mut amax) = (0.0f32, 0.0f32);
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        l_out.iter_mut().for_each(|l| *l = 0);
        return 0.0;
    }
    let iscale = -(nmax as f32) / max;
    let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
    for (&v, lo) in x.iter().zip(l_out.iter_mut()) {
        let l = nearest_int(iscale * v).clamp(-nmax, nmax - 1);
        *lo = l;
        let w = v * v;
        sumlx += w * v * l as f32;
        suml2 += w * l as f32 * l as f32;
    }
    for _ in 0..5 {
        let mut changed = 0;
        for (&v, lo) in x.iter().zip(l_out.iter_mut()) {
            let w = v * v;
            let cur = *lo as f32;
            let mut slx = sumlx - w * v * cur;
            if slx > 0.0 {
                let mut sl2 = suml2 - w * cur * cur;
                let new_l = nearest_int(v * sl2 / slx).clamp(-nmax, nmax - 1);
                if new_l != *lo {
                    slx += w * v * new_l as f32;
                    sl2 += w * new_l as f32 * new_l as f32;
                    if sl2 > 0.0 && slx * slx * suml2 > sumlx * sumlx * sl2 {
                        *lo = new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        changed += 1;
                    }
                }
            }
        }
        if changed == 0 {
            break;
        }
    }
    l_out.iter_mut().for_each(|l| *l += nmax);
    if suml2 > 0.0 {
        sumlx / suml2
    } else {
        0.0
    }
}

/// The settings of `make_qkx2_quants`' grid search over scale and minimum.
struct Qkx2 {
    nmax: i32,
    rmin: f32,
    rdelta: f32,
    nstep: i32,
    use_mad: bool,
}

/// `make_qkx2_quants`: unsigned levels in `[0, nmax]` with a scale and a minimum, chosen by
/// weighted least squares over `nstep + 1` trial scales. Returns `(scale, -min)`.
fn make_qkx2_quants(x: &[f32], weights: &[f32], p: &Qkx2, l_out: &mut [i32]) -> (f32, f32) {
    let n = x.len();
    let (mut min, mut max) = (x[0], x[0]);
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        l_out.iter_mut().for_each(|l| *l = 0);
        return (0.0, -min);
    }
    let err = |d: f32| if p.use_mad { d.abs() } else { d * d };
    let mut iscale = p.nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = nearest_int(iscale * (x[i] - min)).clamp(0, p.nmax);
        l_out[i] = l;
        best_error += weights[i] * err(scale * l as f32 + min - x[i]);
    }
    if p.nstep < 1 {
        return (scale, -min);
    }
    let mut aux = [0i32; 32];
    let aux = &mut aux[..n];
    for is in 0..=p.nstep {
        iscale = (p.rmin + p.rdelta * is as f32 + p.nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = nearest_int(iscale * (x[i] - min)).clamp(0, p.nmax);
            aux[i] = l;
            let (w, lf) = (weights[i], l as f32);
            sum_l += w * lf;
            sum_l2 += w * lf * lf;
            sum_xl += w * lf * x[i];
        }
        let dd = sum_w * sum_l2 - sum_l * sum_l;
        if dd > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / dd;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / dd;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                cur_error += weights[i] * err(this_scale * aux[i] as f32 + this_min - x[i]);
            }
            if cur_error < best_error {
                l_out.copy_from_slice(aux);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    (scale, -min)
}

/// Packs 2-bit levels as ggml does: byte `l` of each 32-byte run holds values `l`, `l+32`,
/// `l+64`, `l+96` of its 128-value half.
fn pack_2bit(l: &[i32; QK_K], qs: &mut [u8]) {
    for j in (0..QK_K).step_by(128) {
        for i in 0..32 {
            qs[j / 4 + i] = (l[j + i] | (l[j + i + 32] << 2) | (l[j + i + 64] << 4) | (l[j + i + 96] << 6)) as u8;
        }
    }
}

/// Encodes Q2_K (`scales[16] qs[64] d dmin`, 84 bytes per 256 values).
pub fn quantize_q2_k(x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; x.len() / QK_K * 84];
    let p = Qkx2 { nmax: 3, rmin: -0.5, rdelta: 0.1, nstep: 15, use_mad: true };
    for (x, y) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(84)) {
        let mut l = [0i32; QK_K];
        let (mut scales, mut mins) = ([0.0f32; 16], [0.0f32; 16]);
        let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
        for j in 0..16 {
            let g = &x[16 * j..16 * j + 16];
            let mut w = [0.0f32; 16];
            for (wi, v) in w.iter_mut().zip(g) {
                *wi = v.abs();
            }
            (scales[j], mins[j]) = make_qkx2_quants(g, &w, &p, &mut l[16 * j..16 * j + 16]);
            if scales[j] > max_scale {
                max_scale = scales[j];
            }
            if mins[j] > max_min {
                max_min = mins[j];
            }
        }
        let (sc, rest) = y.split_at_mut(16);
        let d = if max_scale > 0.0 {
            let iscale = 15.0 / max_scale;
            for j in 0..16 {
                sc[j] = nearest_int(iscale * scales[j]) as u8;
            }
            max_scale / 15.0
        } else {
            sc.iter_mut().for_each(|s| *s = 0);
            0.0
        };
        let dmin = if max_min > 0.0 {
            let iscale = 15.0 / max_min;
            for j in 0..16 {
                sc[j] |= (nearest_int(iscale * mins[j]) << 4) as u8;
            }
            max_min / 15.0
        } else {
            0.0
        };
        rest[64..66].copy_from_slice(&h(d));
        rest[66..68].copy_from_slice(&h(dmin));
        let (d, dmin) = (fp16_round(d), fp16_round(dmin));
        for j in 0..16 {
            let dl = d * (sc[j] & 0xF) as f32;
            if dl == 0.0 {
                continue;
            }
            let dm = dmin * (sc[j] >> 4) as f32;
            for ii in 0..16 {
                l[16 * j + ii] = nearest_int((x[16 * j + ii] + dm) / dl).clamp(0, 3);
            }
        }
        pack_2bit(&l, &mut rest[..64]);
    }
    out
}

/// Runs `search` on each group of 16 (levels into `l`) and returns the 16 scales, the one of
/// largest magnitude (with its sign) and that magnitude — the first step of Q3_K and Q6_K.
fn signed_group_scales(
    x: &[f32],
    l: &mut [i32; QK_K],
    search: impl Fn(&[f32], &mut [i32]) -> f32,
) -> ([f32; 16], f32, f32) {
    let mut scales = [0.0f32; 16];
    let (mut max_scale, mut max_abs) = (0.0f32, 0.0f32);
    for j in 0..16 {
        scales[j] = search(&x[16 * j..16 * j + 16], &mut l[16 * j..16 * j + 16]);
        if scales[j].abs() > max_abs {
            max_abs = scales[j].abs();
            max_scale = scales[j];
        }
    }
    (scales, max_scale, max_abs)
}

/// Re-rounds every group of 16 against its stored (quantized) scale `d * stored[j]`: signed
/// levels in `[-nmax, nmax)`, stored offset by `nmax`; groups whose scale is zero keep the
/// levels of the search — Q3_K's and Q6_K's second pass.
fn requantize_signed(x: &[f32], l: &mut [i32; QK_K], d: f32, stored: &[i32; 16], nmax: i32) {
    for j in 0..16 {
        let dl = d * stored[j] as f32;
        if dl == 0.0 {
            continue;
        }
        for ii in 0..16 {
            l[16 * j + ii] = nearest_int(x[16 * j + ii] / dl).clamp(-nmax, nmax - 1) + nmax;
        }
    }
}

/// Encodes Q3_K (`hmask[32] qs[64] scales[12] d`, 110 bytes per 256 values).
pub fn quantize_q3_k(x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; x.len() / QK_K * 110];
    for (x, y) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(110)) {
        let mut l = [0i32; QK_K];
        let (scales, max_scale, _) = signed_group_scales(x, &mut l, |g, lg| make_q3_quants(g, 4, lg));
        let (hmask, rest) = y.split_at_mut(32);
        let (qs, rest) = rest.split_at_mut(64);
        let (sc, dbytes) = rest.split_at_mut(12);
        sc.iter_mut().for_each(|s| *s = 0);
        let d = if max_scale != 0.0 {
            let iscale = -32.0 / max_scale;
            for j in 0..16 {
                let lv = (nearest_int(iscale * scales[j]) as i8 as i32).clamp(-32, 31) + 32;
                if j < 8 {
                    sc[j] = (lv & 0xF) as u8;
                } else {
                    sc[j - 8] |= ((lv & 0xF) << 4) as u8;
                }
                sc[j % 4 + 8] |= ((lv >> 4) << (2 * (j / 4))) as u8;
            }
            1.0 / iscale
        } else {
            0.0
        };
        dbytes.copy_from_slice(&h(d));
        let d = fp16_round(d);
        requantize_signed(x, &mut l, d, &q3k_scales(sc), 4);
        hmask.iter_mut().for_each(|b| *b = 0);
        for (j, lv) in l.iter_mut().enumerate() {
            if *lv > 3 {
                hmask[j % 32] |= 1 << (j / 32);
                *lv -= 4;
            }
        }
        pack_2bit(&l, qs);
    }
    out
}

/// The scale/min search and 6-bit packing shared by Q4_K and Q5_K: returns the levels
/// (`0..=nmax`) and writes `d`, `dmin` and `scales[12]` into the block's first 16 bytes.
fn q45_k_block(x: &[f32], p: &Qkx2, head: &mut [u8]) -> [i32; QK_K] {
    let mut l = [0i32; QK_K];
    let (mut scales, mut mins) = ([0.0f32; 8], [0.0f32; 8]);
    let (mut max_scale, mut max_min) = (0.0f32, 0.0f32);
    for j in 0..8 {
        let g = &x[32 * j..32 * j + 32];
        let mut sum_x2 = 0.0f32;
        for v in g {
            sum_x2 += v * v;
        }
        let av_x = (sum_x2 / 32.0).sqrt();
        let mut w = [0.0f32; 32];
        for (wi, v) in w.iter_mut().zip(g) {
            *wi = av_x + v.abs();
        }
        (scales[j], mins[j]) = make_qkx2_quants(g, &w, p, &mut l[32 * j..32 * j + 32]);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 { 63.0 / max_scale } else { 0.0 };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let sc = &mut head[4..16];
    for j in 0..8 {
        let ls = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        let lm = (nearest_int(inv_min * mins[j]) as u8).min(63);
        if j < 4 {
            sc[j] = ls;
            sc[j + 4] = lm;
        } else {
            sc[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            sc[j - 4] |= (ls >> 4) << 6;
            sc[j] |= (lm >> 4) << 6;
        }
    }
    let (d, dmin) = (max_scale / 63.0, max_min / 63.0);
    head[0..2].copy_from_slice(&h(d));
    head[2..4].copy_from_slice(&h(dmin));
    let (d, dmin) = (fp16_round(d), fp16_round(dmin));
    let (s8, m8) = scale_min_k4(&head[4..16]);
    for j in 0..8 {
        let (s, m) = (s8[j], m8[j]);
        let dl = d * s as f32;
        if dl == 0.0 {
            continue;
        }
        let dm = dmin * m as f32;
        for ii in 0..32 {
            l[32 * j + ii] = nearest_int((x[32 * j + ii] + dm) / dl).clamp(0, p.nmax);
        }
    }
    l
}

/// Encodes Q4_K (`d dmin scales[12] qs[128]`, 144 bytes per 256 values).
pub fn quantize_q4_k(x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; x.len() / QK_K * 144];
    let p = Qkx2 { nmax: 15, rmin: -1.0, rdelta: 0.1, nstep: 20, use_mad: false };
    for (x, y) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(144)) {
        let (head, qs) = y.split_at_mut(16);
        let l = q45_k_block(x, &p, head);
        for (c, q) in qs.chunks_exact_mut(32).enumerate() {
            for i in 0..32 {
                q[i] = (l[64 * c + i] | (l[64 * c + i + 32] << 4)) as u8;
            }
        }
    }
    out
}

/// Encodes Q5_K (`d dmin scales[12] qh[32] qs[128]`, 176 bytes per 256 values).
pub fn quantize_q5_k(x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; x.len() / QK_K * 176];
    let p = Qkx2 { nmax: 31, rmin: -0.5, rdelta: 0.1, nstep: 15, use_mad: false };
    for (x, y) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(176)) {
        let (head, rest) = y.split_at_mut(16);
        let (qh, qs) = rest.split_at_mut(32);
        let l = q45_k_block(x, &p, head);
        qh.iter_mut().for_each(|b| *b = 0);
        for (c, q) in qs.chunks_exact_mut(32).enumerate() {
            let (m1, m2) = (1u8 << (2 * c), 2u8 << (2 * c));
            for j in 0..32 {
                let (mut l1, mut l2) = (l[64 * c + j], l[64 * c + j + 32]);
                if l1 > 15 {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                if l2 > 15 {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                q[j] = (l1 | (l2 << 4)) as u8;
            }
        }
    }
    out
}

/// Encodes Q6_K (`ql[128] qh[64] scales[16] d`, 210 bytes per 256 values).
pub fn quantize_q6_k(x: &[f32]) -> Vec<u8> {
    let mut out = vec![0u8; x.len() / QK_K * 210];
    for (x, y) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(210)) {
        let mut l = [0i32; QK_K];
        let (scales, max_scale, max_abs) = signed_group_scales(x, &mut l, |g, lg| make_qx_quants(g, 32, lg));
        if max_abs < GROUP_MAX_EPS {
            continue; // the block stays all zero, d included
        }
        let iscale = -128.0 / max_scale;
        y[208..210].copy_from_slice(&h(1.0 / iscale));
        let d = fp16_round(1.0 / iscale);
        let (ql, rest) = y.split_at_mut(128);
        let (qh, rest) = rest.split_at_mut(64);
        let sc = &mut rest[..16];
        for ib in 0..16 {
            sc[ib] = nearest_int(iscale * scales[ib]).min(127) as i8 as u8;
        }
        requantize_signed(x, &mut l, d, &std::array::from_fn(|j| sc[j] as i8 as i32), 32);
        for h in 0..2 {
            let (j, ql, qh) = (128 * h, &mut ql[64 * h..64 * h + 64], &mut qh[32 * h..32 * h + 32]);
            for i in 0..32 {
                let q = |o: usize| l[j + i + o];
                ql[i] = ((q(0) & 0xF) | ((q(64) & 0xF) << 4)) as u8;
                ql[i + 32] = ((q(32) & 0xF) | ((q(96) & 0xF) << 4)) as u8;
                qh[i] = ((q(0) >> 4) | ((q(32) >> 4) << 2) | ((q(64) >> 4) << 4) | ((q(96) >> 4) << 6)) as u8;
            }
        }
    }
    out
}
