//! Native arg-reductions, top-k and running sums: the scalar lines of [`crate::backend::rank`],
//! run in parallel over the outer blocks (each line is independent, so the bits match).

use super::par;
use crate::backend::rank::{arg_line, cumsum_line, topk_line, ArgOp, Scan};
use rayon::prelude::*;

pub fn arg_reduce(op: ArgOp, x: &[f32], outer: usize, len: usize, inner: usize, out: &mut [u32]) {
    if inner == 0 || out.is_empty() {
        return;
    }
    let block = |(o, ob): (usize, &mut [u32])| {
        for (i, v) in ob.iter_mut().enumerate() {
            *v = arg_line(op, x, len, inner, o * len * inner + i);
        }
    };
    if outer > 1 && par(outer * len * inner) {
        out.par_chunks_mut(inner).enumerate().for_each(block)
    } else {
        out.chunks_mut(inner).enumerate().for_each(block)
    }
}

#[allow(clippy::too_many_arguments)]
pub fn topk(x: &[f32], outer: usize, len: usize, inner: usize, k: usize, vals: &mut [f32], idx: &mut [u32]) {
    if inner == 0 || k == 0 || vals.is_empty() {
        return;
    }
    let block = |(o, (vb, ib)): (usize, (&mut [f32], &mut [u32]))| {
        let src = &x[o * len * inner..(o + 1) * len * inner];
        for i in 0..inner {
            topk_line(src, len, inner, i, k, vb, ib, i);
        }
    };
    let chunk = k * inner;
    if outer > 1 && par(outer * len * inner * 4) {
        vals.par_chunks_mut(chunk).zip(idx.par_chunks_mut(chunk)).enumerate().for_each(block)
    } else {
        vals.chunks_mut(chunk).zip(idx.chunks_mut(chunk)).enumerate().for_each(block)
    }
}

pub fn cumsum(dir: Scan, x: &[f32], outer: usize, len: usize, inner: usize, out: &mut [f32]) {
    let chunk = len * inner;
    if chunk == 0 || out.is_empty() {
        return;
    }
    let block = |(o, ob): (usize, &mut [f32])| {
        let src = &x[o * chunk..(o + 1) * chunk];
        for i in 0..inner {
            cumsum_line(dir, src, len, inner, i, ob);
        }
    };
    if outer > 1 && par(outer * chunk) {
        out.par_chunks_mut(chunk).enumerate().for_each(block)
    } else {
        out.chunks_mut(chunk).enumerate().for_each(block)
    }
}
