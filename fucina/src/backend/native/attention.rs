//! Grouped-query attention: for each (key/value head, block of queries) task, the scores of
//! the head's `g` query heads against every visible key, a softmax per row, and the
//! probability-weighted sum of value rows. Each key and value row is read once per query
//! and shared by the `g` query heads of its group.

use super::simd;
use crate::backend::{Attention, FloatSlice, HeadRows};
use rayon::prelude::*;

/// Queries per task.
const QBLOCK: usize = 8;

/// The output pointer that tasks share; each writes disjoint rows.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write pairwise disjoint (query, head) rows of the output.
unsafe impl Send for OutPtr {}
// SAFETY: as above.
unsafe impl Sync for OutPtr {}

/// Row `j` of head `h` as an f32 slice: borrowed when stored as f32, else widened into `buf`.
fn row<'a>(r: &HeadRows<'a>, h: usize, j: usize, dim: usize, buf: &'a mut [f32]) -> &'a [f32] {
    let at = r.offset + h * r.head + j * r.row;
    match r.data {
        FloatSlice::F32(s) => &s[at..at + dim],
        FloatSlice::F16(s) => {
            half::slice::HalfFloatSliceExt::convert_to_f32_slice(&s[at..at + dim], &mut buf[..dim]);
            &buf[..dim]
        }
        FloatSlice::BF16(s) => {
            half::slice::HalfFloatSliceExt::convert_to_f32_slice(&s[at..at + dim], &mut buf[..dim]);
            &buf[..dim]
        }
    }
}

/// Native grouped-query attention (same math as the scalar spec, SIMD dot products and
/// exponentials, tasks over heads and query blocks on the pool).
pub fn attention(p: &Attention<'_>, out: &mut [f32]) {
    assert!(out.len() >= p.s * p.h * p.g * p.dv, "attention: output size");
    let blocks = p.s.div_ceil(QBLOCK);
    let op = OutPtr(out.as_mut_ptr());
    let task = |t: usize| {
        let base = op;
        let (h, qb) = (t % p.h, t / p.h);
        let mut scores = vec![0.0f32; p.g * p.t];
        let mut probs = vec![0.0f32; p.g * p.t];
        let mut kbuf = vec![0.0f32; p.dk.max(p.dv)];
        for i in qb * QBLOCK..(qb * QBLOCK + QBLOCK).min(p.s) {
            let n = p.visible(i);
            let q = &p.q[(i * p.h + h) * p.g * p.dk..][..p.g * p.dk];
            for j in 0..n {
                let k = row(&p.k, h, j, p.dk, &mut kbuf);
                for gi in 0..p.g {
                    scores[gi * n + j] = simd::dot(&q[gi * p.dk..(gi + 1) * p.dk], k) * p.scale;
                }
            }
            let sc = &mut probs[..p.g * n];
            if n > 0 {
                super::reduce::softmax_serial(&scores[..p.g * n], p.g, n, sc);
            }
            // SAFETY: this task alone writes rows (i, h, 0..g) of the output.
            let o = unsafe { std::slice::from_raw_parts_mut(base.0.add((i * p.h + h) * p.g * p.dv), p.g * p.dv) };
            o.fill(0.0);
            for j in 0..n {
                let v = row(&p.v, h, j, p.dv, &mut kbuf);
                for gi in 0..p.g {
                    simd::axpy(sc[gi * n + j], v, &mut o[gi * p.dv..(gi + 1) * p.dv]);
                }
            }
        }
    };
    let tasks = p.h * blocks;
    let work = p.s * p.t * p.h * p.g * (p.dk + p.dv);
    if super::par(work) {
        (0..tasks).into_par_iter().for_each(task);
    } else {
        (0..tasks).for_each(task);
    }
}
