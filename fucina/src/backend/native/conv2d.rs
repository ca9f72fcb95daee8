//! Native 2-D convolution (im2col + the packed GEMM, one product per batch item and group)
//! and pooling (parallel over planes), following the specifications in
//! [`crate::backend::conv2d`].

use super::{gemm, par};
use crate::backend::conv2d::{col2im_2d, im2col_2d, pool2d_spec, Conv2d, Pool2d, PoolOp};
use crate::backend::{FloatSlice, Gemm, MatRef};
use rayon::prelude::*;

fn mat(data: &[f32], offset: usize, rs: usize, cs: usize) -> MatRef<'_> {
    MatRef { data: FloatSlice::F32(data), offset, bs: 0, rs, cs }
}

pub fn conv2d(p: &Conv2d, x: &[f32], w: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
    let n = p.out(0) * p.out(1);
    let (cout_g, kk) = (p.cout_g(), p.cin_g() * p.k[0] * p.k[1]);
    let item = p.cin * p.hw[0] * p.hw[1];
    if n == 0 || cout_g == 0 {
        return;
    }
    let job = |(i, ob): (usize, &mut [f32])| {
        let (b, g) = (i / p.groups, i % p.groups);
        let mut cols = vec![0.0f32; kk * n];
        im2col_2d(p, &x[b * item..(b + 1) * item], g, &mut cols);
        let prod = Gemm { batch: 1, m: cout_g, n, k: kk, a: mat(w, g * cout_g * kk, kk, 1), b: mat(&cols, 0, n, 1) };
        gemm::gemm(&prod, ob);
        if let Some(bias) = bias {
            for (row, bv) in ob.chunks_mut(n).zip(&bias[g * cout_g..(g + 1) * cout_g]) {
                row.iter_mut().for_each(|v| *v += bv);
            }
        }
    };
    if p.batch * p.groups > 1 && par(p.batch * p.cout * n * kk) {
        out.par_chunks_mut(cout_g * n).enumerate().for_each(job)
    } else {
        out.chunks_mut(cout_g * n).enumerate().for_each(job)
    }
}

pub fn conv2d_backward(p: &Conv2d, x: &[f32], w: &[f32], g: &[f32], dx: &mut [f32], dw: &mut [f32]) {
    dx.fill(0.0);
    dw.fill(0.0);
    let n = p.out(0) * p.out(1);
    let (cout_g, kk) = (p.cout_g(), p.cin_g() * p.k[0] * p.k[1]);
    let item = p.cin * p.hw[0] * p.hw[1];
    if n == 0 || cout_g == 0 {
        return;
    }
    let mut cols = vec![0.0f32; kk * n];
    let mut dcols = vec![0.0f32; kk * n];
    let mut dwg = vec![0.0f32; cout_g * kk];
    for b in 0..p.batch {
        let (xb, dxb) = (&x[b * item..(b + 1) * item], &mut dx[b * item..(b + 1) * item]);
        for grp in 0..p.groups {
            let go = (b * p.cout + grp * cout_g) * n;
            im2col_2d(p, xb, grp, &mut cols);
            // dW_g += g_bg [cout_g, n] cols^T [n, kk]
            let prod = Gemm { batch: 1, m: cout_g, n: kk, k: n, a: mat(g, go, n, 1), b: mat(&cols, 0, 1, n) };
            gemm::gemm(&prod, &mut dwg);
            dw[grp * cout_g * kk..(grp + 1) * cout_g * kk].iter_mut().zip(&dwg).for_each(|(d, v)| *d += v);
            // dcols = W_g^T [kk, cout_g] g_bg [cout_g, n]
            let back = Gemm { batch: 1, m: kk, n, k: cout_g, a: mat(w, grp * cout_g * kk, 1, kk), b: mat(g, go, n, 1) };
            gemm::gemm(&back, &mut dcols);
            col2im_2d(p, &dcols, grp, dxb);
        }
    }
}

pub fn pool2d(p: &Pool2d, op: PoolOp, x: &[f32], out: &mut [f32], arg: &mut [u32]) {
    let (hw, n) = (p.hw[0] * p.hw[1], p.out(0) * p.out(1));
    if n == 0 || hw == 0 {
        return;
    }
    let one = Pool2d { planes: 1, ..*p };
    let job = |(pl, (ob, ab)): (usize, (&mut [f32], &mut [u32]))| {
        pool2d_spec(&one, op, &x[pl * hw..(pl + 1) * hw], ob, ab);
    };
    if p.planes > 1 && par(p.planes * n * p.k[0] * p.k[1]) {
        out.par_chunks_mut(n).zip(arg.par_chunks_mut(n)).enumerate().for_each(job)
    } else {
        out.chunks_mut(n).zip(arg.chunks_mut(n)).enumerate().for_each(job)
    }
}
