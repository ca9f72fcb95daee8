//! Autograd semantics: scopes, accumulation, zero_grad, no_grad, detach, release, concurrency.

mod common;

use common::assert_close;
use fucina::autograd::no_grad;
use fucina::prelude::*;

axis!(pub a, pub b);

fn param(v: &[f32]) -> Tensor<axes![a]> {
    Tensor::from_vec(v.to_vec(), &[v.len()]).unwrap().requires_grad()
}

#[test]
fn outside_a_scope_nothing_is_recorded() {
    let x = param(&[1.0, 2.0]);
    let y = x.square().unwrap();
    assert!(!y.is_tracked());
    let ctx = ExecContext::with_backend(BackendKind::Native, 2).unwrap();
    assert!(y.sum::<a>().unwrap().backward(&ctx).is_err());
}

#[test]
fn gradients_accumulate_until_zeroed() {
    let ctx = ExecContext::with_backend(BackendKind::Native, 2).unwrap();
    let x = param(&[1.0, -2.0, 3.0]);
    for step in 1..=2 {
        let scope = ctx.open_exec_scope();
        let loss = x.square().unwrap().sum::<a>().unwrap(); // d/dx = 2x
        assert!(scope.recorded() >= 2);
        loss.backward(&ctx).unwrap();
        let g = x.grad().unwrap().to_f32_vec();
        assert_eq!(g, vec![2.0 * step as f32, -4.0 * step as f32, 6.0 * step as f32]);
    }
    x.zero_grad();
    assert!(x.grad().is_none());
}

#[test]
fn no_grad_and_detach_cut_the_graph() {
    let ctx = ExecContext::with_backend(BackendKind::Scalar, 1).unwrap();
    let x = param(&[1.0, 2.0]);
    let _scope = ctx.open_exec_scope();
    let frozen = no_grad(|| x.exp().unwrap());
    assert!(!frozen.is_tracked());
    let d = x.exp().unwrap().detach();
    assert!(!d.is_tracked());
    // loss = sum(x * detach(x)): d/dx = detach(x) only.
    let loss = x.mul(&x.detach()).unwrap().sum::<a>().unwrap();
    loss.backward(&ctx).unwrap();
    assert_eq!(x.grad().unwrap().to_f32_vec(), vec![1.0, 2.0]);
}

#[test]
fn dropping_the_scope_releases_the_graph() {
    let ctx = ExecContext::with_backend(BackendKind::Scalar, 1).unwrap();
    let x = param(&[1.0, 2.0]);
    let loss = {
        let _scope = ctx.open_exec_scope();
        x.tanh().unwrap().sum::<a>().unwrap()
    };
    let err = loss.backward(&ctx).unwrap_err();
    assert!(err.to_string().contains("released"), "{err}");
    assert!(x.grad().is_none());
}

#[test]
fn wide_graph_backward_runs_on_the_pool_and_matches_serial() {
    // 64 independent branches joined at the end: nodes fire concurrently.
    let run = |threads: usize| {
        let ctx = ExecContext::with_backend(BackendKind::Native, threads).unwrap();
        let x = Tensor::<axes![a, b]>::from_vec((0..64 * 33).map(|i| (i as f32 * 0.37).sin()).collect(), &[64, 33])
            .unwrap()
            .requires_grad();
        let scope = ctx.open_exec_scope();
        let rows = x.split::<a>(&[1; 64]).unwrap();
        let mut acc: Option<Tensor<axes![a, b]>> = None;
        for (i, r) in rows.iter().enumerate() {
            let t = r.scale(i as f32 * 0.1).unwrap().tanh().unwrap().square().unwrap();
            let s = t.sum::<(a, b)>().unwrap();
            let s = s.add_scalar(0.0).unwrap();
            let z = Tensor::<axes![a, b]>::zeros(&[1, 1]).unwrap();
            let part = z.add(&s).unwrap();
            acc = Some(match acc {
                None => part,
                Some(p) => p.add(&part).unwrap(),
            });
        }
        let loss = acc.unwrap().sum::<(a, b)>().unwrap();
        loss.backward(&ctx).unwrap();
        drop(scope);
        x.grad().unwrap().to_f32_vec()
    };
    let one = run(1);
    let two = run(2);
    assert_eq!(one.len(), 64 * 33);
    for (p, q) in one.iter().zip(&two) {
        assert!((p - q).abs() <= 1e-6, "{p} vs {q}");
    }
    assert!(one.iter().any(|v| *v != 0.0));
}

#[test]
fn many_consumers_sum_their_gradients_in_a_fixed_order() {
    // One tensor read by 48 overlapping narrows of different lengths: its gradient is a sum
    // of 48 contributions, which arrive in whatever order the pool finishes them. The sum
    // must not depend on that order: every run, on one thread or two, gives the same bits.
    let run = |threads: usize| {
        let ctx = ExecContext::with_backend(BackendKind::Native, threads).unwrap();
        let x = Tensor::<axes![a, b]>::from_vec((0..96 * 17).map(|i| (i as f32 * 0.731).sin()).collect(), &[96, 17])
            .unwrap()
            .requires_grad();
        let scope = ctx.open_exec_scope();
        let mut acc: Option<Tensor<()>> = None;
        for i in 0..48 {
            let part = x.narrow::<a>(i, 48).unwrap().scale(1.0 + i as f32 * 0.013).unwrap().exp().unwrap();
            let s = part.sum::<(a, b)>().unwrap();
            acc = Some(match acc {
                None => s,
                Some(p) => p.add(&s).unwrap(),
            });
        }
        acc.unwrap().backward(&ctx).unwrap();
        drop(scope);
        x.grad().unwrap().to_f32_vec()
    };
    let first = run(2);
    for threads in [2, 2, 2, 1] {
        assert!(run(threads) == first, "the gradient changed between runs ({threads} threads)");
    }
}

#[test]
fn cast_passes_the_gradient_through_in_the_input_dtype() {
    // Finite differences cannot see through half-precision rounding, so check the rule directly:
    // d/dx sum(w * cast(x)) = w, returned in x's dtype.
    let ctx = ExecContext::with_backend(BackendKind::Scalar, 1).unwrap();
    let x = param(&[0.1, 0.2, 0.3]);
    let w = Tensor::<axes![a]>::from_vec(vec![1.0f32, -2.0, 0.5], &[3]).unwrap();
    let _scope = ctx.open_exec_scope();
    let loss = x.cast(DType::BF16).unwrap().mul(&w).unwrap().sum::<a>().unwrap();
    loss.backward(&ctx).unwrap();
    let g = x.grad().unwrap();
    assert_eq!(g.dtype(), DType::F32);
    assert_eq!(g.to_f32_vec(), vec![1.0, -2.0, 0.5]);
}

/// Activation checkpointing gives the gradients of the plain graph (parameters inside the
/// segment, the input, parameters after it), replays dropout's masks, records one node for
/// the segment, and still reaches the parameters when the segment's input is untracked.
#[test]
fn checkpointed_segments_give_the_plain_gradients() {
    use fucina::autograd::checkpoint;
    use fucina::nn::{Dropout, Mode};
    axis!(pub ck_in, pub ck_h);
    for backend in [BackendKind::Scalar, BackendKind::Native] {
        let ctx = ExecContext::new(ExecConfig { seed: 4, backend, ..ExecConfig::default() }).unwrap();
        let _g = ctx.enter();
        let w1: Tensor<axes![ck_h, ck_in]> = ctx.randn(&[6, 5], 0.0, 0.5).unwrap().requires_grad();
        let w2: Tensor<axes![ck_h]> = ctx.randn(&[6], 0.0, 0.5).unwrap().requires_grad();
        let xv: Tensor<axes![batch, ck_in]> = ctx.randn(&[3, 5], 0.0, 1.0).unwrap();
        let segment = {
            let (w1, drop) = (w1.clone(), Dropout::new(0.3).unwrap());
            move |x: &Tensor<axes![batch, ck_in]>| -> Result<Tensor<axes![batch, ck_h]>> {
                drop.forward(&einsum!(x, w1; ck_in ->)?.gelu()?, Mode::Train)?.tanh()
            }
        };
        for tracked_input in [true, false] {
            let run = |checkpointed: bool| {
                for p in [w1.raw(), w2.raw()] {
                    fucina::autograd::zero_grad_of(p);
                }
                let x = if tracked_input { xv.clone().requires_grad() } else { xv.clone() };
                ctx.set_rng_counter(100);
                let scope = ctx.open_exec_scope();
                let h = if checkpointed { checkpoint(&x, segment.clone()).unwrap() } else { segment(&x).unwrap() };
                let nodes = scope.recorded();
                let loss = h.mul(&w2).unwrap().powf(2.0).unwrap().sum::<axes![batch, ck_h]>().unwrap();
                loss.backward(&ctx).unwrap();
                let gx = x.grad().map(|g| g.to_f32_vec());
                (nodes, w1.grad().unwrap().to_f32_vec(), w2.grad().unwrap().to_f32_vec(), gx, ctx.rng_counter())
            };
            let (plain, ckpt) = (run(false), run(true));
            assert_eq!(ckpt.0, 1, "{backend:?}: the segment is one node");
            assert!(plain.0 > 3, "{backend:?}: the plain segment records its ops");
            assert_close(&format!("{backend:?} w1"), &ckpt.1, &plain.1, 1e-6, 1e-5);
            assert_close(&format!("{backend:?} w2"), &ckpt.2, &plain.2, 1e-6, 1e-5);
            match (&ckpt.3, &plain.3) {
                (Some(a), Some(b)) => assert_close(&format!("{backend:?} x"), a, b, 1e-6, 1e-5),
                (None, None) => assert!(!tracked_input),
                _ => panic!("{backend:?}: the input's gradient differs in presence"),
            }
            assert_eq!(ckpt.4, plain.4, "{backend:?}: backward leaves the RNG where forward left it");
        }
    }
}
