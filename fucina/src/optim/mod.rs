//! Optimizers and learning-rate schedules.
//!
//! An optimizer walks a [`Module`]'s parameters by name, reads each one's accumulated
//! gradient and replaces the value (the parameter stays the same autograd leaf). State is
//! kept per parameter name as f32 vectors, and can be saved and restored exactly.
//! Hyperparameters are f64 and enter the f32 arithmetic the way PyTorch's Python floats do.

mod adamw;
mod apollo;
mod es;
mod muon;
mod schedule;
mod sgd;

pub use adamw::AdamW;
pub use apollo::{apollo_projection, Apollo};
pub use es::EvolutionStrategy;
pub use muon::{newton_schulz5, Muon};
pub use schedule::LrSchedule;
pub use sgd::Sgd;

use crate::error::{FucinaError, Result};
use crate::nn::Module;
use crate::storage::Buffer;
use crate::tensor::RawTensor;
use std::collections::BTreeMap;

/// Per-parameter state: named f32 buffers (e.g. `exp_avg`), all of the parameter's size.
pub type ParamState = BTreeMap<String, Vec<f32>>;

/// The state every optimizer keeps: the step count and per-parameter buffers.
#[derive(Debug, Clone, Default)]
pub struct OptState {
    /// Steps taken.
    pub steps: u64,
    /// Buffers by parameter name.
    pub params: BTreeMap<String, ParamState>,
}

/// An optimizer over a module's parameters.
pub trait Optimizer {
    /// Updates every parameter that has a gradient; returns how many were updated.
    fn step(&mut self, model: &mut dyn ModuleMut) -> Result<usize>;
    /// The learning rate used by the next step.
    fn lr(&self) -> f64;
    /// Sets the learning rate (schedules call this between steps).
    fn set_lr(&mut self, lr: f64);
    /// The optimizer's state.
    fn state(&self) -> &OptState;
    /// The optimizer's state, mutably.
    fn state_mut(&mut self) -> &mut OptState;
    /// Names of the per-parameter buffers it may keep (for restoring checkpoints).
    fn buffer_names(&self) -> &'static [&'static str];

    /// Steps taken so far.
    fn steps(&self) -> u64 {
        self.state().steps
    }
    /// The state as named tensors (`<param>.<buffer>`) plus the step count, for checkpoints.
    fn state_tensors(&self) -> Vec<(String, RawTensor)> {
        states_to_tensors(&self.state().params, self.state().steps)
    }
    /// Restores state saved by [`state_tensors`](Self::state_tensors).
    fn load_state_tensors(&mut self, tensors: &BTreeMap<String, RawTensor>) -> Result<()> {
        let (params, steps) = tensors_to_states(tensors, self.buffer_names())?;
        *self.state_mut() = OptState { steps, params };
        Ok(())
    }
}

/// Object-safe access to a module's parameters (every `Module` is one).
pub trait ModuleMut {
    /// Calls `f(name, slot)` for each parameter.
    fn for_each_param(&mut self, f: &mut dyn FnMut(&str, crate::nn::ParamMut<'_>));
}

impl<M: Module> ModuleMut for M {
    fn for_each_param(&mut self, f: &mut dyn FnMut(&str, crate::nn::ParamMut<'_>)) {
        self.visit_params_mut("", f)
    }
}

/// Runs `update(name, shape, value, grad, state)` in place for each parameter with a gradient.
pub(crate) fn update_params(
    model: &mut dyn ModuleMut,
    states: &mut BTreeMap<String, ParamState>,
    mut update: impl FnMut(&str, &[usize], &mut [f32], &[f32], &mut ParamState) -> Result<()>,
) -> Result<usize> {
    let mut first_err = None;
    let mut count = 0;
    model.for_each_param(&mut |name, mut slot| {
        if first_err.is_some() {
            return;
        }
        let Some(g) = slot.grad() else { return };
        // Gradients are often strided views (a contraction's result permuted back): gather
        // them with the copy kernel, on the pool, rather than element by element.
        let ctx = crate::exec::ExecContext::current();
        let (value, grad) =
            match (crate::ops::to_f32_contiguous(&ctx, slot.get()), crate::ops::to_f32_contiguous(&ctx, &g)) {
                (Ok(v), Ok(g)) => (v, g),
                (Err(e), _) | (_, Err(e)) => {
                    first_err = Some(e);
                    return;
                }
            };
        let mut value = value;
        if grad.len() != value.len() {
            first_err = Some(FucinaError::InvalidArgument {
                op: "optimizer step",
                msg: format!("gradient of `{name}` has the wrong size"),
            });
            return;
        }
        let st = states.entry(name.to_string()).or_default();
        let shape = slot.get().shape().to_vec();
        if let Err(e) = update(name, &shape, &mut value, &grad, st) {
            first_err = Some(e);
            return;
        }
        let dtype = slot.get().dtype();
        let r = RawTensor::from_buffer(Buffer::F32(value), &shape)
            .and_then(|t| crate::ops::cast_to(&t, dtype))
            .and_then(|t| slot.set(t));
        match r {
            Ok(()) => count += 1,
            Err(e) => first_err = Some(e),
        }
    });
    first_err.map_or(Ok(count), Err)
}

/// Flattens per-parameter state into `<param>.<buffer>` tensors.
pub(crate) fn states_to_tensors(states: &BTreeMap<String, ParamState>, steps: u64) -> Vec<(String, RawTensor)> {
    let mut out = Vec::new();
    for (p, st) in states {
        for (k, v) in st {
            if let Ok(t) = RawTensor::from_buffer(Buffer::F32(v.clone()), &[v.len()]) {
                out.push((format!("{p}.{k}"), t));
            }
        }
    }
    // The step count as two u32 halves, exact.
    if let Ok(t) = RawTensor::from_buffer(Buffer::U32(vec![steps as u32, (steps >> 32) as u32]), &[2]) {
        out.push(("__steps__".into(), t));
    }
    out
}

/// Inverse of [`states_to_tensors`]: buffers named `<param>.<buffer>` for the given buffer names.
pub(crate) fn tensors_to_states(
    tensors: &BTreeMap<String, RawTensor>,
    buffers: &[&str],
) -> Result<(BTreeMap<String, ParamState>, u64)> {
    let mut states: BTreeMap<String, ParamState> = BTreeMap::new();
    let mut steps = 0u64;
    for (name, t) in tensors {
        if name == "__steps__" {
            let v = t.to_vec::<u32>()?;
            if v.len() != 2 {
                return Err(FucinaError::Format {
                    format: "optimizer state",
                    msg: "__steps__ must hold two u32".into(),
                });
            }
            steps = v[0] as u64 | (v[1] as u64) << 32;
            continue;
        }
        let Some((param, buf)) = buffers.iter().find_map(|b| name.strip_suffix(&format!(".{b}")).map(|p| (p, *b)))
        else {
            return Err(FucinaError::Format { format: "optimizer state", msg: format!("unexpected entry `{name}`") });
        };
        states.entry(param.to_string()).or_default().insert(buf.to_string(), t.to_vec::<f32>()?);
    }
    Ok((states, steps))
}
