//! Training checkpoints: model parameters, optimizer state and the RNG position in one
//! safetensors file (metadata in its JSON header), so a resumed run continues bit-exactly.

use super::safetensors::{save, SafeTensors};
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::nn::Module;
use crate::optim::Optimizer;
use crate::tensor::RawTensor;
use std::collections::BTreeMap;
use std::path::Path;

const MODEL: &str = "model.";
const OPTIM: &str = "optim.";

/// Writes `model`, `opt`'s state and `ctx`'s RNG counter (plus `extra` metadata) to `path`.
pub fn save_checkpoint(
    path: impl AsRef<Path>,
    model: &impl Module,
    opt: &dyn Optimizer,
    ctx: &ExecContext,
    extra: &BTreeMap<String, String>,
) -> Result<()> {
    let mut tensors: Vec<(String, RawTensor)> =
        model.named_params().into_iter().map(|(n, t)| (format!("{MODEL}{n}"), t.detached())).collect();
    tensors.extend(opt.state_tensors().into_iter().map(|(n, t)| (format!("{OPTIM}{n}"), t)));
    let mut meta = extra.clone();
    meta.insert("fucina.format".into(), "checkpoint-v1".into());
    meta.insert("fucina.rng_seed".into(), ctx.config().seed.to_string());
    meta.insert("fucina.rng_counter".into(), ctx.rng_counter().to_string());
    meta.insert("fucina.optimizer_steps".into(), opt.steps().to_string());
    save(path, &tensors, &meta)
}

/// Restores a checkpoint written by [`save_checkpoint`] into `model`, `opt` and `ctx`'s RNG;
/// returns the file's metadata. The context must have been built with the same seed.
pub fn load_checkpoint(
    path: impl AsRef<Path>,
    model: &mut impl Module,
    opt: &mut dyn Optimizer,
    ctx: &ExecContext,
) -> Result<BTreeMap<String, String>> {
    let file = SafeTensors::open(path)?;
    let meta = file.metadata().clone();
    let bad = |msg: String| FucinaError::Format { format: "checkpoint", msg };
    if meta.get("fucina.format").map(String::as_str) != Some("checkpoint-v1") {
        return Err(bad("not a fucina checkpoint (missing fucina.format = checkpoint-v1)".into()));
    }
    let seed: u64 =
        meta.get("fucina.rng_seed").and_then(|s| s.parse().ok()).ok_or_else(|| bad("bad fucina.rng_seed".into()))?;
    if seed != ctx.config().seed {
        return Err(bad(format!(
            "the checkpoint was written with seed {seed}, the context has seed {}",
            ctx.config().seed
        )));
    }
    let counter: u64 = meta
        .get("fucina.rng_counter")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("bad fucina.rng_counter".into()))?;
    let mut err = None;
    model.visit_params_mut("", &mut |name, mut slot| {
        if err.is_some() {
            return;
        }
        let key = format!("{MODEL}{name}");
        let r = file.load(&key).and_then(|t| {
            if t.shape() != slot.get().shape() {
                return Err(bad(format!(
                    "`{name}` has shape {:?} in the file, {:?} in the model",
                    t.shape(),
                    slot.get().shape()
                )));
            }
            slot.set(t)
        });
        if let Err(e) = r {
            err = Some(e);
        }
    });
    if let Some(e) = err {
        return Err(e);
    }
    let mut state = BTreeMap::new();
    for name in file.tensors().keys() {
        if let Some(k) = name.strip_prefix(OPTIM) {
            state.insert(k.to_string(), file.load(name)?);
        }
    }
    opt.load_state_tensors(&state)?;
    ctx.set_rng_counter(counter);
    Ok(meta)
}
