//! The recurrent mixers of [`crate::backend::delta`] on the worker team: the gated delta rule
//! one value head per task, and the causal convolution with its taps outermost so the channel
//! loop vectorizes. Both give the bits of the specification for the form they run.
//!
//! `DeltaForm::Auto` runs the recurrent form at every length here: on a CPU the chunked
//! form does about as many multiply-adds (it pays where its blocks become large matrix
//! products, as on GPUs), and measured on Qwen3.5-0.8B's shapes (Zen 4, 2 threads, pp256,
//! 3 interleaved rounds) it was slower: 227-237 tok/s against 227-256 for the recurrent form
//! (185-200 before its dot products were split into eight partial sums).

use crate::backend::delta::{
    causal_conv1d_spec, delta_head, scatter_head, shift_state, CausalConv, DeltaForm, DeltaRule,
};
use std::sync::Mutex;

/// Value heads side by side on the team, each from its own slice of the state.
pub fn gated_delta_rule(p: &DeltaRule<'_>, form: DeltaForm, state: &mut [f32], out: &mut [f32]) {
    let form = match form {
        DeltaForm::Auto => DeltaForm::Recurrent,
        f => f,
    };
    let slots: Vec<Mutex<(&mut [f32], Vec<f32>)>> =
        state.chunks_exact_mut(p.dk * p.dv).take(p.vh).map(|st| Mutex::new((st, vec![0.0f32; p.s * p.dv]))).collect();
    let task = |h: usize| {
        // Each task locks only its own head: never contended.
        let mut slot = slots[h].lock().unwrap_or_else(|e| e.into_inner());
        let (st, local) = &mut *slot;
        delta_head(p, form, h, st, local);
    };
    let work = p.s * p.vh * p.dk * p.dv;
    if super::par(work) && p.vh > 1 {
        super::team::for_each(p.vh, task);
    } else {
        (0..p.vh).for_each(task);
    }
    for (h, slot) in slots.into_iter().enumerate() {
        let (_, local) = slot.into_inner().unwrap_or_else(|e| e.into_inner());
        scatter_head(p, h, &local, out);
    }
}

/// The convolution with the weight transposed to `[taps, ch]`: per output row, one pass
/// over the channels per tap, taps in the specification's order (the same sums).
pub fn causal_conv1d(p: &CausalConv, x: &[f32], w: &[f32], state: &mut [f32], out: &mut [f32]) {
    if p.ch < 8 {
        return causal_conv1d_spec(p, x, w, state, out);
    }
    let keep = p.taps - 1;
    let mut wt = vec![0.0f32; p.taps * p.ch];
    for c in 0..p.ch {
        for j in 0..p.taps {
            wt[j * p.ch + c] = w[c * p.taps + j];
        }
    }
    for (t, o) in out.chunks_exact_mut(p.ch).enumerate().take(p.s) {
        o.fill(0.0);
        for (j, wj) in wt.chunks_exact(p.ch).enumerate() {
            let r = t + j;
            let src =
                if r < keep { &state[r * p.ch..(r + 1) * p.ch] } else { &x[(r - keep) * p.ch..(r - keep + 1) * p.ch] };
            for ((o, w), x) in o.iter_mut().zip(wj).zip(src) {
                *o += w * x;
            }
        }
    }
    shift_state(p, x, state);
}
