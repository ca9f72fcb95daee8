//! Grouped-query attention: for each (key/value head, block of queries) task, the scores of
//! the head's `g` query heads against every visible key, a softmax per row, and the
//! probability-weighted sum of value rows. Each key and value row is read once per query
//! and shared by the `g` query heads of its group.

use super::simd;
use crate::backend::fdot::FloatRow;
use crate::backend::{qdot, Attention, FloatSlice, HeadRows, RowStore};

/// Queries per task.
const QBLOCK: usize = 16;

/// The output pointer that tasks share; each writes disjoint rows.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write pairwise disjoint (query, head) rows of the output.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

/// Row `j` of head `h` as an f32 slice: borrowed when stored as f32, else widened (or
/// decoded from Q8_0) into `buf`.
fn row<'a>(r: &HeadRows<'a>, h: usize, j: usize, dim: usize, buf: &'a mut [f32]) -> &'a [f32] {
    let at = r.offset + h * r.head + j * r.row;
    match r.data {
        RowStore::Float(FloatSlice::F32(s)) => &s[at..at + dim],
        // Widened by the row decoder (F16C in one loop; half's slice conversion calls a
        // function per eight values, 2-3 % of a decode at a few hundred positions).
        RowStore::Float(FloatSlice::F16(s)) => {
            crate::backend::fdot::decode_row(FloatRow::F16, as_bytes(&s[at..at + dim]), &mut buf[..dim]);
            &buf[..dim]
        }
        RowStore::Float(FloatSlice::BF16(s)) => {
            crate::backend::fdot::decode_row(FloatRow::BF16, as_bytes(&s[at..at + dim]), &mut buf[..dim]);
            &buf[..dim]
        }
        RowStore::Q8_0(_) => {
            let blocks = r.q8_0_row(h, j, dim).unwrap_or_default();
            for (b, o) in blocks.chunks_exact(qdot::Q8_0_BYTES).zip(buf[..dim].chunks_exact_mut(32)) {
                let d = half::f16::from_le_bytes([b[0], b[1]]).to_f32();
                for (x, q) in o.iter_mut().zip(&b[2..]) {
                    *x = d * (*q as i8) as f32;
                }
            }
            &buf[..dim]
        }
    }
}

/// Rows `0..n` of head `h` as the bytes of one contiguous row-major block (rows `dim` apart),
/// with their format; `None` when the rows are strided.
fn contiguous_rows<'a>(r: &HeadRows<'a>, h: usize, n: usize, dim: usize) -> Option<(&'a [u8], FloatRow)> {
    if r.row != dim {
        return None;
    }
    let at = r.offset + h * r.head;
    Some(match r.data {
        RowStore::Float(FloatSlice::F32(s)) => (as_bytes(&s[at..at + n * dim]), FloatRow::F32),
        RowStore::Float(FloatSlice::F16(s)) => (as_bytes(&s[at..at + n * dim]), FloatRow::F16),
        RowStore::Float(FloatSlice::BF16(s)) => (as_bytes(&s[at..at + n * dim]), FloatRow::BF16),
        RowStore::Q8_0(_) => return None,
    })
}

/// The little-endian bytes of a slice of plain numbers.
fn as_bytes<T: Copy>(s: &[T]) -> &[u8] {
    #[cfg(target_endian = "big")]
    compile_error!("the float row kernels read little-endian bytes");
    // SAFETY: f32/f16/bf16 are plain old data without padding; the byte view covers exactly
    // the slice's memory and lives as long as the borrow.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
}

/// Native grouped-query attention (same math as the scalar spec, SIMD dot products and
/// exponentials, tasks over heads and query blocks on the pool). Each key and value row is
/// read (and widened from f16/bf16) once per block of queries.
pub fn attention(p: &Attention<'_>, out: &mut [f32]) {
    assert!(out.len() >= p.s * p.h * p.g * p.dv, "attention: output size");
    let blocks = p.s.div_ceil(QBLOCK);
    let op = OutPtr(out.as_mut_ptr());
    let task = |t: usize| {
        let base = op;
        let (h, qb) = (t % p.h, t / p.h);
        let (i0, i1) = (qb * QBLOCK, (qb * QBLOCK + QBLOCK).min(p.s));
        let nq = i1 - i0;
        let n_max = p.visible(i1 - 1);
        let rows = nq * p.g;
        let mut scores = vec![0.0f32; rows * n_max];
        let mut probs = vec![0.0f32; rows * n_max];
        let mut buf = vec![0.0f32; p.dk.max(p.dv)];
        let q = &p.q[(i0 * p.h) * p.g * p.dk..];
        // Row r = (query i0 + r / g, group head r % g) sits at q[((i0+qi)*h + h)*g + gi].
        let q_row = |qi: usize, gi: usize| &q[((qi * p.h + h) * p.g + gi) * p.dk..][..p.dk];
        if let Some((kbytes, fmt)) = contiguous_rows(&p.k, h, n_max, p.dk) {
            // All scores of the block as one small GEMM: query rows gathered, key rows in place.
            let mut qs = vec![0.0f32; rows * p.dk];
            for qi in 0..nq {
                for gi in 0..p.g {
                    qs[(qi * p.g + gi) * p.dk..][..p.dk].copy_from_slice(q_row(qi, gi));
                }
            }
            super::rowgemm::gemm_rows(rows, n_max, p.dk, &qs, kbytes, fmt, &mut scores, false);
            scores.iter_mut().for_each(|v| *v *= p.scale);
        } else if let RowStore::Q8_0(_) = p.k.data {
            // Q8_0 keys: each query row quantized once, integer dot products per key.
            let width = p.dk / 32 * qdot::Q8_0_BYTES;
            let mut q8 = vec![0u8; rows * width];
            for qi in 0..nq {
                for gi in 0..p.g {
                    super::weights::quantize_row_q8_0(q_row(qi, gi), &mut q8[(qi * p.g + gi) * width..][..width]);
                }
            }
            for j in p.first(i0)..n_max {
                let k = p.k.q8_0_row(h, j, p.dk).unwrap_or_default();
                for qi in 0..nq {
                    if !(p.first(i0 + qi)..p.visible(i0 + qi)).contains(&j) {
                        continue;
                    }
                    for gi in 0..p.g {
                        let r = qi * p.g + gi;
                        scores[r * n_max + j] = qdot::dot_q8_0_q8_0(k, &q8[r * width..][..width]) * p.scale;
                    }
                }
            }
        } else {
            for j in p.first(i0)..n_max {
                let k = row(&p.k, h, j, p.dk, &mut buf);
                for qi in 0..nq {
                    if !(p.first(i0 + qi)..p.visible(i0 + qi)).contains(&j) {
                        continue;
                    }
                    for gi in 0..p.g {
                        scores[(qi * p.g + gi) * n_max + j] = simd::dot(q_row(qi, gi), k) * p.scale;
                    }
                }
            }
        }
        for qi in 0..nq {
            let (j0, n) = (p.first(i0 + qi), p.visible(i0 + qi));
            for gi in 0..p.g {
                let r = (qi * p.g + gi) * n_max;
                if n > j0 {
                    super::reduce::softmax_serial(&scores[r + j0..r + n], 1, n - j0, &mut probs[r + j0..r + n]);
                }
            }
        }
        // SAFETY: this task alone writes rows (i0..i1, h, 0..g) of the output.
        let o_row = |qi: usize, gi: usize| unsafe {
            std::slice::from_raw_parts_mut(base.0.add((((i0 + qi) * p.h + h) * p.g + gi) * p.dv), p.dv)
        };
        if p.dv.is_multiple_of(simd::WEIGHTED_COLS) && p.dv > 0 {
            // Probabilities times values as register tiles: each query's rows (its group's
            // heads share its key range) over the value rows, decoded once for the block;
            // the same sums in the same order as one axpy per key.
            let j_first = p.first(i0);
            let mut vs = vec![0.0f32; n_max * p.dv];
            for j in j_first..n_max {
                vs[j * p.dv..(j + 1) * p.dv].copy_from_slice(row(&p.v, h, j, p.dv, &mut buf));
            }
            for qi in 0..nq {
                let range = (p.first(i0 + qi), p.visible(i0 + qi).max(p.first(i0 + qi)));
                let pr = |gi: usize| &probs[(qi * p.g + gi) * n_max..(qi * p.g + gi + 1) * n_max];
                let mut gi = 0;
                while gi + 2 <= p.g {
                    simd::weighted_rows::<2>(
                        [pr(gi), pr(gi + 1)],
                        &vs,
                        p.dv,
                        range,
                        [o_row(qi, gi), o_row(qi, gi + 1)],
                    );
                    gi += 2;
                }
                if gi < p.g {
                    simd::weighted_rows::<1>([pr(gi)], &vs, p.dv, range, [o_row(qi, gi)]);
                }
            }
            return;
        }
        for qi in 0..nq {
            for gi in 0..p.g {
                o_row(qi, gi).fill(0.0);
            }
        }
        for j in p.first(i0)..n_max {
            let v = row(&p.v, h, j, p.dv, &mut buf);
            for qi in 0..nq {
                if !(p.first(i0 + qi)..p.visible(i0 + qi)).contains(&j) {
                    continue;
                }
                for gi in 0..p.g {
                    simd::axpy(probs[(qi * p.g + gi) * n_max + j], v, o_row(qi, gi));
                }
            }
        }
    };
    let tasks = p.h * blocks;
    let work = p.s * p.t * p.h * p.g * (p.dk + p.dv);
    if super::par(work) {
        super::team::for_each(tasks, task);
    } else {
        (0..tasks).for_each(task);
    }
}

/// One head's key and value gradient rows, and its own query-gradient buffer.
type HeadGrads<'a> = (&'a mut [f32], &'a mut [f32], Vec<f32>);

/// The specification's head backward compiled for AVX2: the same operations in the same
/// order (Rust never fuses a multiply and an add on its own), in 256-bit vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn backward_head_avx2(
    p: &crate::backend::AttentionGrad<'_>,
    hh: usize,
    dq: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
) {
    crate::backend::attention_backward_head(p, hh, dq, dk, dv)
}

/// One head's backward: the specification, compiled for the widest vectors this CPU has.
fn backward_head(p: &crate::backend::AttentionGrad<'_>, hh: usize, dq: &mut [f32], dk: &mut [f32], dv: &mut [f32]) {
    match simd::level() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: has_avx2 holds only when the CPU has AVX2 and FMA.
        l if l.has_avx2() => unsafe { backward_head_avx2(p, hh, dq, dk, dv) },
        _ => crate::backend::attention_backward_head(p, hh, dq, dk, dv),
    }
}

/// The attention backward, one task per key/value head (each head's key and value gradients
/// are its own rows; its query gradients go to a buffer of its own and are copied into place
/// after), each running the specification [`crate::backend::attention_backward_head`]
/// compiled for this CPU's vectors, so the result is the scalar backend's bit for bit.
pub fn attention_backward(p: &crate::backend::AttentionGrad<'_>, dq: &mut [f32], dk: &mut [f32], dv: &mut [f32]) {
    use crate::backend::scatter_query_grads;
    let work = p.s * p.t * p.h * p.g * (p.dk + p.dv);
    let heads: Vec<std::sync::Mutex<HeadGrads<'_>>> = dk
        .chunks_mut(p.t * p.dk)
        .zip(dv.chunks_mut(p.t * p.dv))
        .take(p.h)
        .map(|(k, v)| std::sync::Mutex::new((k, v, vec![0.0f32; p.s * p.g * p.dk])))
        .collect();
    let task = |hh: usize| {
        // Each task locks only its own head: never contended.
        let mut slot = heads[hh].lock().unwrap_or_else(|e| e.into_inner());
        let (k, v, local) = &mut *slot;
        backward_head(p, hh, local, k, v);
    };
    if super::par(work) && p.h > 1 {
        super::team::for_each(p.h, task);
    } else {
        (0..p.h).for_each(task);
    }
    for (hh, slot) in heads.into_iter().enumerate() {
        let (_, _, local) = slot.into_inner().unwrap_or_else(|e| e.into_inner());
        scatter_query_grads(p, hh, &local, dq);
    }
}
