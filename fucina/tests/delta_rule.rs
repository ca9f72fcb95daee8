//! The recurrent mixers (`fucina::ops::{gated_delta_rule, causal_conv1d}`):
//! - against transformers' own chunked and recurrent delta-rule functions
//!   (`goldens/delta_rule.json`, `tools/gen_qwen35_tiny.py`): 150 positions (two full chunks
//!   and a partial one), value heads grouped by key head, from a random state; outputs and
//!   final states within 2e-5 + 1e-4 relative, in both of our forms on both backends;
//! - the chunked form against the recurrent one on random shapes (tiled and grouped heads,
//!   keys wider or narrower than values, lengths around the chunk size), within 1e-4;
//! - native against scalar, bit for bit, in each form;
//! - a sequence fed in pieces (the state carried) against one call;
//! - the convolution against its definition and in pieces, and bad sizes refused.

mod common;
use common::{assert_close, contexts, values, Sizes};
use fucina::ops::{causal_conv1d, gated_delta_rule, ConvState, DeltaForm, DeltaOptions, DeltaState, HeadMap};
use fucina::prelude::*;

axis!(kh, vh, dk, dv, ch, tap);

struct Case {
    s: usize,
    nkh: usize,
    nvh: usize,
    ndk: usize,
    ndv: usize,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    beta: Vec<f32>,
    state: Vec<f32>,
}

impl Case {
    fn random(seed: u64, s: usize, nkh: usize, nvh: usize, ndk: usize, ndv: usize) -> Case {
        let unit = |mut x: Vec<f32>, w: usize| {
            for r in x.chunks_mut(w) {
                let n = r.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-6);
                r.iter_mut().for_each(|v| *v /= n);
            }
            x
        };
        Case {
            s,
            nkh,
            nvh,
            ndk,
            ndv,
            q: unit(values(seed, s * nkh * ndk), ndk),
            k: unit(values(seed + 1, s * nkh * ndk), ndk),
            v: values(seed + 2, s * nvh * ndv),
            g: values(seed + 3, s * nvh).iter().map(|x| -0.3 * (2.0 * x).exp()).collect(),
            beta: values(seed + 4, s * nvh).iter().map(|x| 1.0 / (1.0 + (-2.0 * x).exp())).collect(),
            state: values(seed + 5, nvh * ndk * ndv).iter().map(|x| 0.5 * x).collect(),
        }
    }

    /// Runs positions `from..to` from `state` (updated).
    fn run(&self, map: HeadMap, form: DeltaForm, from: usize, to: usize, state: &mut DeltaState) -> Vec<f32> {
        let n = to - from;
        let part = |x: &[f32], w: usize| x[from * w..to * w].to_vec();
        let q =
            Tensor::<(seq, kh, dk)>::from_vec(part(&self.q, self.nkh * self.ndk), &[n, self.nkh, self.ndk]).unwrap();
        let k =
            Tensor::<(seq, kh, dk)>::from_vec(part(&self.k, self.nkh * self.ndk), &[n, self.nkh, self.ndk]).unwrap();
        let v =
            Tensor::<(seq, vh, dv)>::from_vec(part(&self.v, self.nvh * self.ndv), &[n, self.nvh, self.ndv]).unwrap();
        let g = Tensor::<(seq, vh)>::from_vec(part(&self.g, self.nvh), &[n, self.nvh]).unwrap();
        let b = Tensor::<(seq, vh)>::from_vec(part(&self.beta, self.nvh), &[n, self.nvh]).unwrap();
        let opts = DeltaOptions { scale: 1.0 / (self.ndk as f32).sqrt(), map, form };
        gated_delta_rule(&q, &k, &v, &g, &b, opts, state).unwrap().to_f32_vec()
    }

    fn state(&self) -> DeltaState {
        DeltaState::from_values(self.nvh, self.ndk, self.ndv, self.state.clone()).unwrap()
    }
}

fn floats(v: &serde_json::Value) -> Vec<f32> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect()
}

#[test]
fn delta_rule_matches_transformers_chunked_and_recurrent_functions() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/goldens/delta_rule.json");
    let gold: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let sz: Vec<usize> = gold["sizes"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as usize).collect();
    let c = Case {
        s: sz[0],
        nkh: sz[1],
        nvh: sz[2],
        ndk: sz[3],
        ndv: sz[4],
        q: floats(&gold["q"]),
        k: floats(&gold["k"]),
        v: floats(&gold["v"]),
        g: floats(&gold["g"]),
        beta: floats(&gold["beta"]),
        state: floats(&gold["state"]),
    };
    let (scalar, native) = contexts();
    for ctx in [&scalar, &native] {
        let _g = ctx.enter();
        for form in [DeltaForm::Recurrent, DeltaForm::Chunked, DeltaForm::Auto] {
            for reference in ["chunked", "recurrent"] {
                let mut st = c.state();
                let out = c.run(HeadMap::Grouped, form, 0, c.s, &mut st);
                let what = format!("{:?} {form:?} vs transformers' {reference}", ctx.backend());
                assert_close(&format!("{what}: output"), &out, &floats(&gold[reference]["out"]), 2e-5, 1e-4);
                assert_close(&format!("{what}: state"), st.values(), &floats(&gold[reference]["state"]), 2e-5, 1e-4);
            }
        }
    }
}

#[test]
fn chunked_form_equals_recurrent_form_and_native_equals_scalar() {
    let (scalar, native) = contexts();
    let mut sizes = Sizes::new(35);
    for (i, &s) in [1usize, 5, 63, 64, 65, 130].iter().enumerate() {
        let nkh = sizes.pick(1, 3);
        let nvh = nkh * sizes.pick(1, 3);
        let (ndk, ndv) = (sizes.pick(3, 20), sizes.pick(3, 20));
        let c = Case::random(100 + i as u64, s, nkh, nvh, ndk, ndv);
        for map in [HeadMap::Tiled, HeadMap::Grouped] {
            let mut per_form = Vec::new();
            for form in [DeltaForm::Recurrent, DeltaForm::Chunked] {
                let mut got = Vec::new();
                for ctx in [&scalar, &native] {
                    let _g = ctx.enter();
                    let mut st = c.state();
                    let out = c.run(map, form, 0, s, &mut st);
                    got.push((out, st.values().to_vec()));
                }
                assert_eq!(got[0], got[1], "native differs from scalar: s {s}, {map:?} {form:?}");
                per_form.push(got.remove(0));
            }
            let what = format!("chunked vs recurrent, s {s} heads {nkh}/{nvh} widths {ndk}/{ndv} {map:?}");
            assert_close(&format!("{what}: output"), &per_form[1].0, &per_form[0].0, 1e-5, 1e-4);
            assert_close(&format!("{what}: state"), &per_form[1].1, &per_form[0].1, 1e-5, 1e-4);
        }
    }
}

#[test]
fn a_sequence_fed_in_pieces_gives_the_output_of_one_call() {
    let c = Case::random(7, 140, 2, 4, 8, 6);
    let (_, native) = contexts();
    let _g = native.enter();
    let mut whole = c.state();
    let want = c.run(HeadMap::Tiled, DeltaForm::Recurrent, 0, c.s, &mut whole);
    let mut st = c.state();
    let mut got = Vec::new();
    // A long prefill in chunks, short ones, then single decode steps.
    for (a, b, form) in [
        (0, 100, DeltaForm::Chunked),
        (100, 103, DeltaForm::Auto),
        (103, 130, DeltaForm::Chunked),
        (130, 131, DeltaForm::Recurrent),
        (131, 140, DeltaForm::Auto),
    ] {
        got.extend(c.run(HeadMap::Tiled, form, a, b, &mut st));
    }
    assert_close("pieces vs one call: output", &got, &want, 1e-5, 1e-4);
    assert_close("pieces vs one call: state", st.values(), whole.values(), 1e-5, 1e-4);
}

#[test]
fn bad_sizes_and_tracked_inputs_are_refused() {
    let c = Case::random(1, 4, 2, 4, 8, 8);
    let mut wrong = DeltaState::new(4, 8, 7).unwrap();
    let q = Tensor::<(seq, kh, dk)>::from_vec(c.q.clone(), &[4, 2, 8]).unwrap();
    let v = Tensor::<(seq, vh, dv)>::from_vec(c.v.clone(), &[4, 4, 8]).unwrap();
    let g = Tensor::<(seq, vh)>::from_vec(c.g.clone(), &[4, 4]).unwrap();
    let opts = DeltaOptions { scale: 1.0, map: HeadMap::Tiled, form: DeltaForm::Auto };
    let e = gated_delta_rule(&q, &q, &v, &g, &g, opts, &mut wrong).unwrap_err();
    assert!(e.to_string().contains("state of 4 heads 8 x 7"), "{e}");
    let mut st = c.state();
    let tracked = q.clone().requires_grad();
    let e = gated_delta_rule(&tracked, &q, &v, &g, &g, opts, &mut st).unwrap_err();
    assert!(e.to_string().contains("must not require gradients"), "{e}");
    // Three value heads over two key heads do not group.
    let v3 = Tensor::<(seq, vh, dv)>::from_vec(vec![0.0; 4 * 3 * 8], &[4, 3, 8]).unwrap();
    let g3 = Tensor::<(seq, vh)>::from_vec(vec![0.0; 12], &[4, 3]).unwrap();
    let mut st3 = DeltaState::new(3, 8, 8).unwrap();
    assert!(gated_delta_rule(&q, &q, &v3, &g3, &g3, opts, &mut st3).is_err());
    assert!(ConvState::new(0, 4).is_err());
}

#[test]
fn causal_conv_matches_its_definition_in_pieces_and_on_both_backends() {
    let (s, nch, taps) = (37, 19, 4);
    let x = values(11, s * nch);
    let w = values(12, nch * taps);
    // PyTorch's conv1d(x, w, padding = taps - 1, groups = ch)[..s], written out.
    let mut want = vec![0.0f32; s * nch];
    for t in 0..s {
        for c in 0..nch {
            for j in 0..taps {
                let src = t as isize + j as isize - (taps as isize - 1);
                if src >= 0 {
                    want[t * nch + c] += w[c * taps + j] * x[src as usize * nch + c];
                }
            }
        }
    }
    let wt = Tensor::<axes![ch, tap]>::from_vec(w.clone(), &[nch, taps]).unwrap();
    let (scalar, native) = contexts();
    let mut outs = Vec::new();
    for ctx in [&scalar, &native] {
        let _g = ctx.enter();
        let mut st = ConvState::new(taps, nch).unwrap();
        let mut got = Vec::new();
        for (a, b) in [(0, 20), (20, 21), (21, 22), (22, 37)] {
            let xt = Tensor::<axes![seq, ch]>::from_vec(x[a * nch..b * nch].to_vec(), &[b - a, nch]).unwrap();
            got.extend(causal_conv1d(&xt, &wt, &mut st).unwrap().to_f32_vec());
        }
        assert_close(&format!("{:?} conv in pieces", ctx.backend()), &got, &want, 1e-6, 1e-5);
        assert_eq!(st.values(), &x[(s - 3) * nch..], "the state keeps the last three inputs");
        outs.push(got);
    }
    assert_eq!(outs[0], outs[1], "native differs from scalar");
    let mut st = ConvState::new(3, nch).unwrap();
    let xt = Tensor::<axes![seq, ch]>::from_vec(x[..nch].to_vec(), &[1, nch]).unwrap();
    assert!(causal_conv1d(&xt, &wt, &mut st).is_err(), "a 3-tap state for a 4-tap weight");
}
