//! Saving and loading a [`Module`]'s parameters by their dotted names.

use super::{save, SafeTensors};
use crate::error::{FucinaError, Result};
use crate::nn::Module;
use std::collections::BTreeMap;
use std::path::Path;

/// safetensors save/load for every [`Module`].
pub trait ModuleIo: Module {
    /// Writes every parameter under its dotted name.
    fn save_safetensors(&self, path: impl AsRef<Path>) -> Result<()> {
        save(path, &self.named_params(), &BTreeMap::new())
    }

    /// Replaces every parameter with the same-named tensor of the file (shapes must match).
    fn load_safetensors(&mut self, path: impl AsRef<Path>) -> Result<()> {
        let file = SafeTensors::open(path)?;
        let mut first_err: Option<FucinaError> = None;
        self.visit_params_mut("", &mut |name, mut slot| {
            if first_err.is_some() {
                return;
            }
            let r = (|| {
                let info = file.tensors().get(name).ok_or_else(|| FucinaError::MissingTensor(name.to_string()))?;
                if info.shape != slot.get().shape() {
                    return Err(FucinaError::InvalidArgument {
                        op: "load_safetensors",
                        msg: format!(
                            "`{name}` has shape {:?} in the file, {:?} in the module",
                            info.shape,
                            slot.get().shape()
                        ),
                    });
                }
                slot.set(file.load(name)?)
            })();
            if let Err(e) = r {
                first_err = Some(e);
            }
        });
        first_err.map_or(Ok(()), Err)
    }
}

impl<M: Module + ?Sized> ModuleIo for M {}
