//! Finite-difference gradient checks.

use super::{grad_of, track, zero_grad_of};
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::storage::Buffer;
use crate::tensor::RawTensor;

/// The worst disagreement a [`gradcheck`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct GradcheckReport {
    /// Elements compared.
    pub checked: usize,
    /// Largest `|analytic - numeric|`.
    pub max_abs_err: f64,
    /// (input, element, analytic, numeric) of the worst element.
    pub worst: Option<(usize, usize, f64, f64)>,
}

/// Compares the gradients `backward` computes for a scalar `loss(inputs)` with central
/// differences `(loss(x + eps) - loss(x - eps)) / 2 eps`, differences taken in f64.
///
/// Each element must satisfy `|analytic - numeric| <= atol + rtol * |numeric|`; the
/// first one that does not is returned as an error naming the input and element.
pub fn gradcheck(
    ctx: &ExecContext,
    inputs: &[RawTensor],
    loss: impl Fn(&[RawTensor]) -> Result<RawTensor>,
    eps: f32,
    atol: f64,
    rtol: f64,
) -> Result<GradcheckReport> {
    let leaves: Vec<RawTensor> = inputs
        .iter()
        .map(|t| track(RawTensor::from_buffer(Buffer::F32(t.to_f32_vec()), t.shape()).unwrap_or_else(|_| t.clone())))
        .collect();
    let analytic: Vec<Vec<f32>> = {
        let scope = ctx.open_exec_scope();
        let l = loss(&leaves)?;
        if l.numel() != 1 {
            return Err(FucinaError::InvalidArgument { op: "gradcheck", msg: "the loss must have one element".into() });
        }
        let root = super::node::of(&l).ok_or(FucinaError::InvalidArgument {
            op: "gradcheck",
            msg: "the loss does not depend on any input".into(),
        })?;
        super::engine::backward(ctx, root, RawTensor::from_buffer(Buffer::F32(vec![1.0]), l.shape())?)?;
        drop(scope);
        leaves.iter().map(|t| grad_of(t).map(|g| g.to_f32_vec()).unwrap_or_else(|| vec![0.0; t.numel()])).collect()
    };
    leaves.iter().for_each(zero_grad_of);
    let eval = |vals: &[Vec<f32>]| -> Result<f64> {
        let ts = vals
            .iter()
            .zip(inputs)
            .map(|(v, t)| RawTensor::from_buffer(Buffer::F32(v.clone()), t.shape()))
            .collect::<Result<Vec<_>>>()?;
        Ok(ctx.scope(|| loss(&ts))?.to_f32_vec()[0] as f64)
    };
    let mut vals: Vec<Vec<f32>> = inputs.iter().map(|t| t.to_f32_vec()).collect();
    let mut report = GradcheckReport { checked: 0, max_abs_err: 0.0, worst: None };
    for i in 0..vals.len() {
        for j in 0..vals[i].len() {
            let x0 = vals[i][j];
            vals[i][j] = x0 + eps;
            let up = eval(&vals)?;
            vals[i][j] = x0 - eps;
            let down = eval(&vals)?;
            vals[i][j] = x0;
            let h = ((x0 + eps) as f64) - ((x0 - eps) as f64);
            let numeric = (up - down) / h;
            let a = analytic[i][j] as f64;
            let err = (a - numeric).abs();
            report.checked += 1;
            if err > report.max_abs_err {
                report.max_abs_err = err;
                report.worst = Some((i, j, a, numeric));
            }
            if err > atol + rtol * numeric.abs() {
                return Err(FucinaError::InvalidArgument {
                    op: "gradcheck",
                    msg: format!("input {i} element {j}: analytic {a:.6e} vs numeric {numeric:.6e}"),
                });
            }
        }
    }
    Ok(report)
}
