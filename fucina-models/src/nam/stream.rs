//! The real-time WaveNet: the same network as [`super::wavenet`], run buffer by buffer with
//! a history buffer per layer, so each new sample costs only its own computation.
//! Everything is allocated in [`WaveNetStream::new`]; [`WaveNetStream::process`] performs no
//! allocation, takes no lock and makes no system call (proved by `tests/nam_realtime.rs`).
//!
//! Data are time-major: a frame is one time step's channel vector. Each layer keeps the
//! frames it reads (its input) in a linear buffer: `lookback` frames of history followed
//! by the current block; when the buffer fills, the history is moved back to the front.

use super::wavenet::WaveNet;
use fucina::backend::frames::FrameGemm;
use fucina::backend::{BackendKind, Kernels, UnaryOp};
use fucina::formats::nam::Activation;

/// A layer's parameters (re-laid out for the inner loops) and its input history.
struct LayerState {
    k: usize,
    d: usize,
    ch: usize,
    mid: usize,
    bn: usize,
    /// `[tap][ch][mid]`: `conv[(tap * ch + c) * mid + m] = W[m, c, tap]`.
    conv: Vec<f32>,
    conv_b: Vec<f32>,
    /// `[mid]`: the condition (mono) mix.
    mixer: Vec<f32>,
    /// `[bn][ch]`: `out[b * ch + c] = W1[c, b]`.
    out: Vec<f32>,
    out_b: Vec<f32>,
    act: Activation,
    gate: Option<Activation>,
    hist: History,
}

/// Frames of `width` channels: `lookback` of history, then the block being processed.
struct History {
    buf: Vec<f32>,
    width: usize,
    lookback: usize,
    /// Frame index of the first frame of the current block.
    pos: usize,
    cap: usize,
}

impl History {
    fn new(width: usize, lookback: usize, max_block: usize) -> History {
        let cap = lookback + 4 * max_block;
        History { buf: vec![0.0; cap * width], width, lookback, pos: lookback, cap }
    }

    /// Makes room for `n` frames at `pos` (moving the history to the front if needed).
    fn reserve(&mut self, n: usize) {
        if self.pos + n > self.cap {
            let (w, lb) = (self.width, self.lookback);
            self.buf.copy_within((self.pos - lb) * w..self.pos * w, 0);
            self.pos = lb;
        }
    }

    /// The current block's frames (`n` of them), writable.
    fn block_mut(&mut self, n: usize) -> &mut [f32] {
        &mut self.buf[self.pos * self.width..(self.pos + n) * self.width]
    }

    /// Frame `t - back` of the current block (`back <= lookback`).
    fn frame(&self, t: usize, back: usize) -> &[f32] {
        let f = self.pos + t - back;
        &self.buf[f * self.width..(f + 1) * self.width]
    }

    fn advance(&mut self, n: usize) {
        self.pos += n;
    }

    fn clear(&mut self) {
        self.buf.fill(0.0);
        self.pos = self.lookback;
    }
}

struct ArrayState {
    input: usize,
    ch: usize,
    bn: usize,
    hout: usize,
    hk: usize,
    /// `[input][ch]`.
    rechannel: Vec<f32>,
    layers: Vec<LayerState>,
    /// `[tap][bn][hout]`.
    head: Vec<f32>,
    head_b: Vec<f32>,
    /// The head accumulator's history (for head kernels > 1).
    head_hist: History,
}

/// A streaming WaveNet: feed it buffers of any size.
pub struct WaveNetStream {
    arrays: Vec<ArrayState>,
    head_scale: f32,
    max_block: usize,
    receptive_field: usize,
    /// Scratch, sized for `max_block` frames of the widest array.
    z: Vec<f32>,
    za: Vec<f32>,
    post: Vec<f32>,
    next_in: Vec<f32>,
    head_out: Vec<f32>,
    /// The backend whose kernels run the frame products and activations.
    kernels: &'static dyn Kernels,
}

fn to_vec(t: &fucina::prelude::Tensor<impl fucina::tensor::axes::Axes>) -> Vec<f32> {
    t.to_f32_vec()
}

/// The largest block the streaming engine sizes its buffers for (65,536 samples, 1.4 s at
/// 48 kHz); a longer buffer is processed in blocks of this size.
pub const MAX_BLOCK: usize = 1 << 16;

impl WaveNetStream {
    /// The streaming form of `net`, taking buffers of up to `max_block` samples at a time
    /// (longer buffers are processed in pieces), started from silence. `max_block` is
    /// clamped to `1..=`[`MAX_BLOCK`]; larger buffers are still accepted, in pieces.
    pub fn new(net: &WaveNet, max_block: usize) -> WaveNetStream {
        WaveNetStream::with_backend(net, max_block, BackendKind::Native)
    }

    /// [`WaveNetStream::new`] on the given backend's kernels (`Scalar` is the specification
    /// the native path is tested against).
    pub fn with_backend(net: &WaveNet, max_block: usize, backend: BackendKind) -> WaveNetStream {
        let max_block = max_block.clamp(1, MAX_BLOCK);
        let mut widest = 1;
        let arrays: Vec<ArrayState> = net
            .arrays
            .iter()
            .zip(&net.config.layers)
            .map(|(a, c)| {
                let (ch, bn) = (c.channels, c.bottleneck);
                widest = widest.max(2 * bn).max(ch).max(c.head_out).max(c.input_size);
                let rw = to_vec(&a.rechannel); // [ch, input, 1]
                let mut rechannel = vec![0.0; c.input_size * ch];
                for o in 0..ch {
                    for i in 0..c.input_size {
                        rechannel[i * ch + o] = rw[o * c.input_size + i];
                    }
                }
                let layers = a
                    .layers
                    .iter()
                    .enumerate()
                    .map(|(li, l)| {
                        let (k, d, mid) = (c.kernel_sizes[li], c.dilations[li], c.mid(li));
                        let w = to_vec(&l.conv); // [mid, ch, k]
                        let mut conv = vec![0.0; k * ch * mid];
                        for m in 0..mid {
                            for cc in 0..ch {
                                for tap in 0..k {
                                    conv[(tap * ch + cc) * mid + m] = w[(m * ch + cc) * k + tap];
                                }
                            }
                        }
                        let ow = to_vec(&l.out); // [ch, bn, 1]
                        let mut out = vec![0.0; bn * ch];
                        for cc in 0..ch {
                            for b in 0..bn {
                                out[b * ch + cc] = ow[cc * bn + b];
                            }
                        }
                        LayerState {
                            k,
                            d,
                            ch,
                            mid,
                            bn,
                            conv,
                            conv_b: to_vec(&l.conv_bias),
                            mixer: to_vec(&l.mixer),
                            out,
                            out_b: to_vec(&l.out_bias),
                            act: l.activation,
                            gate: l.gate,
                            hist: History::new(ch, (k - 1) * d, max_block),
                        }
                    })
                    .collect();
                let hw = to_vec(&a.head); // [hout, bn, hk]
                let (hout, hk) = (c.head_out, c.head_kernel);
                let mut head = vec![0.0; hk * bn * hout];
                for o in 0..hout {
                    for b in 0..bn {
                        for tap in 0..hk {
                            head[(tap * bn + b) * hout + o] = hw[(o * bn + b) * hk + tap];
                        }
                    }
                }
                ArrayState {
                    input: c.input_size,
                    ch,
                    bn,
                    hout,
                    hk,
                    rechannel,
                    layers,
                    head,
                    head_b: a.head_bias.as_ref().map_or(vec![0.0; hout], to_vec),
                    head_hist: History::new(bn, hk - 1, max_block),
                }
            })
            .collect();
        let n = max_block * widest;
        let mut s = WaveNetStream {
            arrays,
            head_scale: net.head_scale,
            max_block,
            receptive_field: net.receptive_field(),
            z: vec![0.0; n],
            za: vec![0.0; n],
            post: vec![0.0; n],
            next_in: vec![0.0; n],
            head_out: vec![0.0; n],
            kernels: backend.kernels(),
        };
        s.reset();
        s
    }

    /// Forgets all history and starts again from silence (as NAM's `pad_start`).
    pub fn reset(&mut self) {
        for a in &mut self.arrays {
            a.head_hist.clear();
            for l in &mut a.layers {
                l.hist.clear();
            }
        }
        // Feed the receptive field's worth of silence: every value the first real output
        // depends on is then what the padded whole-signal forward computes.
        let zeros = [0.0f32; 256];
        let mut sink = [0.0f32; 256];
        let mut left = self.receptive_field.saturating_sub(1);
        while left > 0 {
            let n = left.min(256);
            self.process(&zeros[..n], &mut sink[..n]);
            left -= n;
        }
    }

    /// The model's receptive field in samples.
    pub fn receptive_field(&self) -> usize {
        self.receptive_field
    }

    /// Processes `input` into `output` (same length), continuing from the previous call.
    pub fn process(&mut self, input: &[f32], output: &mut [f32]) {
        let n = input.len().min(output.len());
        let mut done = 0;
        while done < n {
            let m = (n - done).min(self.max_block);
            self.block(&input[done..done + m], &mut output[done..done + m]);
            done += m;
        }
    }

    fn block(&mut self, x: &[f32], y: &mut [f32]) {
        let n = x.len();
        let (z, za, post, next_in, head_out) =
            (&mut self.z, &mut self.za, &mut self.post, &mut self.next_in, &mut self.head_out);
        let kern = self.kernels;
        // Every operand below is sized at construction for `max_block` frames of the widest
        // array, and `n <= max_block`: the frame products' bounds hold by construction.
        // The array input: the audio (one channel) for the first array.
        next_in[..n].copy_from_slice(x);
        let mut in_width = 1;
        let mut have_head = false;
        for a in &mut self.arrays {
            debug_assert_eq!(in_width, a.input);
            // Rechannel into the first layer's history.
            {
                let l0 = &mut a.layers[0];
                l0.hist.reserve(n);
                let dst = l0.hist.block_mut(n);
                for t in 0..n {
                    let f = &mut dst[t * a.ch..(t + 1) * a.ch];
                    f.fill(0.0);
                    for i in 0..in_width {
                        let v = next_in[t * in_width + i];
                        for (o, w) in f.iter_mut().zip(&a.rechannel[i * a.ch..(i + 1) * a.ch]) {
                            *o += w * v;
                        }
                    }
                }
            }
            // The head accumulator starts as the previous array's head output (or zero).
            a.head_hist.reserve(n);
            {
                let hb = a.head_hist.block_mut(n);
                if have_head {
                    hb.copy_from_slice(&head_out[..n * a.bn]);
                } else {
                    hb.fill(0.0);
                }
            }
            let nl = a.layers.len();
            for li in 0..nl {
                let (cur, rest) = a.layers.split_at_mut(li + 1);
                let l = &mut cur[li];
                let (mid, ch, bn) = (l.mid, l.ch, l.bn);
                // z = bias + mixer * audio + sum over taps of (history frames at that tap) W_tap
                for t in 0..n {
                    let xt = x[t];
                    for ((o, b), mx) in z[t * mid..(t + 1) * mid].iter_mut().zip(&l.conv_b).zip(&l.mixer) {
                        *o = b + mx * xt;
                    }
                }
                for tap in 0..l.k {
                    let back = (l.k - 1 - tap) * l.d;
                    let first = (l.hist.pos - back) * ch;
                    let src = &l.hist.buf[first..first + n * ch];
                    let wt = &l.conv[tap * ch * mid..(tap + 1) * ch * mid];
                    kern.frames_gemm_acc(FrameGemm { n, ni: ch, no: mid, xs: ch, os: mid }, src, wt, &mut z[..n * mid]);
                }
                // Activation (and gating) into `post` [n][bn].
                activate(kern, l.act, &z[..n * mid], &mut za[..n * mid]);
                match l.gate {
                    None => post[..n * bn].copy_from_slice(&za[..n * bn]),
                    Some(g) => {
                        // Secondary activation of the second half of each frame.
                        activate(kern, g, &z[..n * mid], &mut post[..n * mid]);
                        for t in 0..n {
                            for b in 0..bn {
                                let s = post[t * mid + bn + b];
                                z[t * bn + b] = za[t * mid + b] * s;
                            }
                        }
                        post[..n * bn].copy_from_slice(&z[..n * bn]);
                    }
                }
                // Head accumulation.
                let hb = a.head_hist.block_mut(n);
                for (h, p) in hb.iter_mut().zip(&post[..n * bn]) {
                    *h += p;
                }
                // Residual: input + 1x1(post), into the next layer's history or the array output.
                let last = li + 1 == nl;
                if !last {
                    rest[0].hist.reserve(n);
                }
                {
                    let first = l.hist.pos * ch;
                    let inp = &l.hist.buf[first..first + n * ch];
                    let dst: &mut [f32] = if last {
                        &mut next_in[..n * ch]
                    } else {
                        let f = rest[0].hist.pos * ch;
                        &mut rest[0].hist.buf[f..f + n * ch]
                    };
                    for (df, sf) in dst.chunks_exact_mut(ch).zip(inp.chunks_exact(ch)) {
                        for ((o, i), b) in df.iter_mut().zip(sf).zip(&l.out_b) {
                            *o = i + b;
                        }
                    }
                    kern.frames_gemm_acc(FrameGemm { n, ni: bn, no: ch, xs: bn, os: ch }, &post[..n * bn], &l.out, dst);
                }
                l.hist.advance(n);
            }
            // Head rechannel: [n][hout].
            for t in 0..n {
                let ho = &mut head_out[t * a.hout..(t + 1) * a.hout];
                ho.copy_from_slice(&a.head_b);
                for tap in 0..a.hk {
                    let src = a.head_hist.frame(t, a.hk - 1 - tap);
                    for (b, s) in src.iter().enumerate() {
                        let w = &a.head[(tap * a.bn + b) * a.hout..(tap * a.bn + b + 1) * a.hout];
                        for (o, wv) in ho.iter_mut().zip(w) {
                            *o += wv * s;
                        }
                    }
                }
            }
            a.head_hist.advance(n);
            have_head = true;
            in_width = a.ch;
        }
        for (t, o) in y.iter_mut().enumerate() {
            *o = self.head_scale * head_out[t];
        }
    }
}

/// `y = act(x)` elementwise, with the library's vectorized kernels where there is one.
fn activate(kern: &dyn Kernels, a: Activation, x: &[f32], y: &mut [f32]) {
    let op = match a {
        Activation::Tanh => Some(UnaryOp::Tanh),
        Activation::Sigmoid => Some(UnaryOp::Sigmoid),
        Activation::Relu => Some(UnaryOp::Relu),
        Activation::Silu => Some(UnaryOp::Silu),
        _ => None,
    };
    match op {
        Some(op) => kern.unary(op, x, y),
        None => {
            for (o, v) in y.iter_mut().zip(x) {
                *o = a.apply(*v);
            }
        }
    }
}
