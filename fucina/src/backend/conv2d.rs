//! The specification of 2-D convolution (strided, padded, dilated, grouped) and pooling,
//! over contiguous `[batch, channel, height, width]` blocks.

/// A 2-D convolution's sizes: input `[batch, cin, h, w]`, weight `[cout, cin / groups, kh,
/// kw]`, output `[batch, cout, oh, ow]`; output channel `co` reads the input channels of
/// its group `co / (cout / groups)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2d {
    /// Batch size.
    pub batch: usize,
    /// Input channels.
    pub cin: usize,
    /// Output channels.
    pub cout: usize,
    /// Input height and width.
    pub hw: [usize; 2],
    /// Kernel height and width.
    pub k: [usize; 2],
    /// Step between output positions, per spatial axis.
    pub stride: [usize; 2],
    /// Zeros added on both sides, per spatial axis.
    pub padding: [usize; 2],
    /// Spacing between kernel taps, per spatial axis.
    pub dilation: [usize; 2],
    /// Channel groups (`cin` and `cout` are multiples of it).
    pub groups: usize,
}

impl Conv2d {
    /// Output size along spatial axis `a` (the ops layer checks it is positive).
    pub fn out(&self, a: usize) -> usize {
        let span = self.dilation[a] * (self.k[a] - 1) + 1;
        (self.hw[a] + 2 * self.padding[a]).saturating_sub(span) / self.stride[a] + 1
    }

    /// The input coordinate that output `o`, tap `t` reads along axis `a`, if inside the input.
    #[inline]
    pub fn src(&self, a: usize, o: usize, t: usize) -> Option<usize> {
        (o * self.stride[a] + t * self.dilation[a]).checked_sub(self.padding[a]).filter(|s| *s < self.hw[a])
    }

    /// Input channels per group.
    pub fn cin_g(&self) -> usize {
        self.cin / self.groups
    }

    /// Output channels per group.
    pub fn cout_g(&self) -> usize {
        self.cout / self.groups
    }
}

/// The convolution, in the obvious loop order (the specification).
pub fn conv2d_spec(p: &Conv2d, x: &[f32], w: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
    let (oh, ow) = (p.out(0), p.out(1));
    let (cin_g, cout_g) = (p.cin_g(), p.cout_g());
    let [h, wd] = p.hw;
    let [kh, kw] = p.k;
    for b in 0..p.batch {
        for co in 0..p.cout {
            let g = co / cout_g;
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut acc = bias.map_or(0.0, |bs| bs[co]);
                    for cl in 0..cin_g {
                        let ci = g * cin_g + cl;
                        for ky in 0..kh {
                            let Some(iy) = p.src(0, oy, ky) else { continue };
                            for kx in 0..kw {
                                let Some(ix) = p.src(1, ox, kx) else { continue };
                                acc += w[((co * cin_g + cl) * kh + ky) * kw + kx]
                                    * x[((b * p.cin + ci) * h + iy) * wd + ix];
                            }
                        }
                    }
                    out[((b * p.cout + co) * oh + oy) * ow + ox] = acc;
                }
            }
        }
    }
}

/// The convolution's backward: `dx` and `dw` (both overwritten) from `g [batch, cout, oh, ow]`.
pub fn conv2d_backward_spec(p: &Conv2d, x: &[f32], w: &[f32], g: &[f32], dx: &mut [f32], dw: &mut [f32]) {
    dx.fill(0.0);
    dw.fill(0.0);
    let (oh, ow) = (p.out(0), p.out(1));
    let (cin_g, cout_g) = (p.cin_g(), p.cout_g());
    let [h, wd] = p.hw;
    let [kh, kw] = p.k;
    for b in 0..p.batch {
        for co in 0..p.cout {
            let grp = co / cout_g;
            for oy in 0..oh {
                for ox in 0..ow {
                    let gv = g[((b * p.cout + co) * oh + oy) * ow + ox];
                    for cl in 0..cin_g {
                        let ci = grp * cin_g + cl;
                        for ky in 0..kh {
                            let Some(iy) = p.src(0, oy, ky) else { continue };
                            for kx in 0..kw {
                                let Some(ix) = p.src(1, ox, kx) else { continue };
                                let wi = ((co * cin_g + cl) * kh + ky) * kw + kx;
                                let xi = ((b * p.cin + ci) * h + iy) * wd + ix;
                                dx[xi] += w[wi] * gv;
                                dw[wi] += x[xi] * gv;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// What a pooling window computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolOp {
    /// The largest element (NaN wins; the first among equals is the one the gradient goes to).
    Max,
    /// The mean over the window, padding zeros counted (PyTorch's `count_include_pad=True`).
    Avg,
}

/// A pooling window over `[planes, h, w]`: sizes as [`Conv2d`] (one channel per plane).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool2d {
    /// Independent planes (batch times channels).
    pub planes: usize,
    /// Input height and width.
    pub hw: [usize; 2],
    /// Window height and width.
    pub k: [usize; 2],
    /// Step between windows.
    pub stride: [usize; 2],
    /// Padding on both sides (max pooling ignores it: pads are never chosen).
    pub padding: [usize; 2],
}

impl Pool2d {
    fn conv(&self) -> Conv2d {
        Conv2d {
            batch: 1,
            cin: 1,
            cout: 1,
            hw: self.hw,
            k: self.k,
            stride: self.stride,
            padding: self.padding,
            dilation: [1, 1],
            groups: 1,
        }
    }

    /// Output size along spatial axis `a`.
    pub fn out(&self, a: usize) -> usize {
        self.conv().out(a)
    }
}

/// Pools plane by plane into `out [planes, oh, ow]`; for [`PoolOp::Max`], `arg` gets the
/// flat index `iy * w + ix` within its plane of each chosen element (u32::MAX for an
/// all-padding window, which then outputs -inf).
pub fn pool2d_spec(p: &Pool2d, op: PoolOp, x: &[f32], out: &mut [f32], arg: &mut [u32]) {
    let c = p.conv();
    let (oh, ow) = (p.out(0), p.out(1));
    let [h, w] = p.hw;
    let area = (p.k[0] * p.k[1]) as f32;
    for pl in 0..p.planes {
        let src = &x[pl * h * w..(pl + 1) * h * w];
        for oy in 0..oh {
            for ox in 0..ow {
                let o = (pl * oh + oy) * ow + ox;
                let (mut best, mut at, mut sum) = (f32::NEG_INFINITY, u32::MAX, 0.0f32);
                for ky in 0..p.k[0] {
                    let Some(iy) = c.src(0, oy, ky) else { continue };
                    for kx in 0..p.k[1] {
                        let Some(ix) = c.src(1, ox, kx) else { continue };
                        let v = src[iy * w + ix];
                        sum += v;
                        if at == u32::MAX || (!best.is_nan() && (v > best || v.is_nan())) {
                            best = v;
                            at = (iy * w + ix) as u32;
                        }
                    }
                }
                match op {
                    PoolOp::Max => {
                        out[o] = best;
                        arg[o] = at;
                    }
                    PoolOp::Avg => out[o] = sum / area,
                }
            }
        }
    }
}

/// The backward of [`PoolOp::Avg`]: `dx` (overwritten) from `g [planes, oh, ow]`, each
/// window spreading `g / area` over its elements inside the input.
pub fn avg_pool2d_backward_spec(p: &Pool2d, g: &[f32], dx: &mut [f32]) {
    dx.fill(0.0);
    let c = p.conv();
    let (oh, ow) = (p.out(0), p.out(1));
    let [h, w] = p.hw;
    let area = (p.k[0] * p.k[1]) as f32;
    for pl in 0..p.planes {
        for oy in 0..oh {
            for ox in 0..ow {
                let gv = g[(pl * oh + oy) * ow + ox] / area;
                for ky in 0..p.k[0] {
                    let Some(iy) = c.src(0, oy, ky) else { continue };
                    for kx in 0..p.k[1] {
                        let Some(ix) = c.src(1, ox, kx) else { continue };
                        dx[(pl * h + iy) * w + ix] += gv;
                    }
                }
            }
        }
    }
}

/// im2col of one group of one batch item: `cols [cin_g * kh * kw, oh * ow]`, row
/// `(cl * kh + ky) * kw + kx`, from `x` (the item's `[cin, h, w]`).
pub fn im2col_2d(p: &Conv2d, x: &[f32], group: usize, cols: &mut [f32]) {
    let (oh, ow) = (p.out(0), p.out(1));
    let [h, w] = p.hw;
    let [kh, kw] = p.k;
    for (row, dst) in cols.chunks_mut(oh * ow).enumerate() {
        let (cl, ky, kx) = (row / (kh * kw), row / kw % kh, row % kw);
        let plane = &x[(group * p.cin_g() + cl) * h * w..][..h * w];
        for oy in 0..oh {
            let line = &mut dst[oy * ow..(oy + 1) * ow];
            match p.src(0, oy, ky) {
                None => line.fill(0.0),
                Some(iy) => {
                    for (ox, d) in line.iter_mut().enumerate() {
                        *d = p.src(1, ox, kx).map_or(0.0, |ix| plane[iy * w + ix]);
                    }
                }
            }
        }
    }
}

/// The adjoint of [`im2col_2d`]: adds `cols` back into the item's `dx [cin, h, w]`.
pub fn col2im_2d(p: &Conv2d, cols: &[f32], group: usize, dx: &mut [f32]) {
    let (oh, ow) = (p.out(0), p.out(1));
    let [h, w] = p.hw;
    let [kh, kw] = p.k;
    for (row, src) in cols.chunks(oh * ow).enumerate() {
        let (cl, ky, kx) = (row / (kh * kw), row / kw % kh, row % kw);
        let plane = &mut dx[(group * p.cin_g() + cl) * h * w..][..h * w];
        for oy in 0..oh {
            let Some(iy) = p.src(0, oy, ky) else { continue };
            for ox in 0..ow {
                if let Some(ix) = p.src(1, ox, kx) {
                    plane[iy * w + ix] += src[oy * ow + ox];
                }
            }
        }
    }
}
