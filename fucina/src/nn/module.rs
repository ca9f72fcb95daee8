//! The `Module` trait: named parameter listing, mutable visiting and counting.

use crate::autograd;
use crate::error::{FucinaError, Result};
use crate::storage::SharedBytes;
use crate::tensor::axes::Axes;
use crate::tensor::{RawTensor, Tensor};

/// Mutable access to one parameter that preserves its shape (and so its axis type).
pub struct ParamMut<'a> {
    raw: &'a mut RawTensor,
}

impl<'a> ParamMut<'a> {
    /// Wraps a parameter slot.
    pub fn new(raw: &'a mut RawTensor) -> ParamMut<'a> {
        ParamMut { raw }
    }

    /// The current value.
    pub fn get(&self) -> &RawTensor {
        self.raw
    }

    /// Replaces the value with a tensor of the same shape; a trainable parameter stays the
    /// same autograd leaf (its identity and accumulated gradient are kept).
    pub fn set(&mut self, value: RawTensor) -> Result<()> {
        if value.shape() != self.raw.shape() {
            return Err(FucinaError::InvalidArgument {
                op: "set parameter",
                msg: format!("shape {:?} does not match the parameter's {:?}", value.shape(), self.raw.shape()),
            });
        }
        let value = match self.raw.node() {
            Some(n) if autograd::is_leaf(self.raw) => value.detached().with_node(n.clone()),
            _ => value.detached(),
        };
        *self.raw = value;
        Ok(())
    }

    /// Makes the parameter a trainable autograd leaf (no-op if it already is).
    pub fn track(&mut self) {
        let t = std::mem::replace(self.raw, self.raw.detached());
        *self.raw = autograd::track(t);
    }

    /// The gradient accumulated by `backward`, if any.
    pub fn grad(&self) -> Option<RawTensor> {
        autograd::grad_of(self.raw)
    }
}

/// Joins a parameter path: `join_name("layers.0", "w")` is `layers.0.w`; an empty `name`
/// (an enum variant's single field) leaves the prefix as it is.
pub fn join_name(prefix: &str, name: &str) -> String {
    if name.is_empty() {
        prefix.to_string()
    } else if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// A frozen weight a module holds besides its trainable tensors: a matrix kept in a storage
/// format of its own (the quantized and half-precision weights of `fucina::quant`), visited
/// by name through [`Module::visit_frozen`].
pub trait FrozenWeight {
    /// The storage format's name (`Q4_K`, `F16`, ...).
    fn format_name(&self) -> String;
    /// Rows (outputs).
    fn rows(&self) -> usize;
    /// Columns (inputs).
    fn cols(&self) -> usize;
    /// Bytes the weight takes in memory.
    fn bytes(&self) -> usize;
    /// The weight's bytes in its storage format (what a file holds), or `None` when they
    /// are held in a layout of this machine's instead (repacked at load for its kernels), in
    /// which case the weight cannot be written back as it is.
    fn stored_bytes(&self) -> Option<&[u8]>;
    /// Whether [`FrozenWeight::replace`] would take `len` bytes of `format`, `rows` x `cols`
    /// (the same checks, nothing changed), so a loader can check a whole file first.
    fn check_replacement(&self, format: &str, rows: usize, cols: usize, len: usize) -> Result<()>;
    /// Replaces the weight with `bytes` of the storage format `format` (a name as
    /// [`FrozenWeight::format_name`] gives it), `rows` x `cols`: an error, leaving the
    /// weight as it was, when the format is unknown or has no kernel, the shape differs
    /// from the weight's, or the byte count does not fit the format and shape.
    fn replace(&mut self, format: &str, rows: usize, cols: usize, bytes: SharedBytes) -> Result<()>;
}

/// A set of named parameters: a tensor, or a struct of them (`#[derive(Module)]`).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a module or a tensor, so it cannot be a field of a `#[derive(Module)]` struct",
    label = "this field is neither a `Tensor`, a `Module`, nor a Vec/array/Option of them",
    note = "mark configuration fields with `#[module(skip)]`"
)]
pub trait Module {
    /// Calls `f(name, tensor)` for each parameter, names prefixed by `prefix`.
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &RawTensor));
    /// Calls `f(name, slot)` for each parameter, mutably.
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, ParamMut<'_>));

    /// Calls `f(name, weight)` for each frozen weight ([`FrozenWeight`]), names prefixed by
    /// `prefix`; none by default (a tensor is a parameter, not a frozen weight).
    fn visit_frozen(&self, prefix: &str, f: &mut dyn FnMut(&str, &dyn FrozenWeight)) {
        let _ = (prefix, f);
    }

    /// Calls `f(name, weight)` for each frozen weight, mutably (to load one by name).
    fn visit_frozen_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut dyn FrozenWeight)) {
        let _ = (prefix, f);
    }

    /// Every frozen weight with its dotted name, format and shape, in declaration order.
    fn frozen_weights(&self) -> Vec<(String, String, usize, usize)> {
        let mut v = Vec::new();
        self.visit_frozen("", &mut |n, w| v.push((n.to_string(), w.format_name(), w.rows(), w.cols())));
        v
    }

    /// All parameters with their dotted names, in declaration order.
    fn named_params(&self) -> Vec<(String, RawTensor)> {
        let mut v = Vec::new();
        self.visit_params("", &mut |n, t| v.push((n.to_string(), t.clone())));
        v
    }

    /// The dotted parameter names, in declaration order.
    fn param_names(&self) -> Vec<String> {
        self.named_params().into_iter().map(|(n, _)| n).collect()
    }

    /// Total number of scalar parameters.
    fn num_params(&self) -> usize {
        let mut n = 0;
        self.visit_params("", &mut |_, t| n += t.numel());
        n
    }

    /// Number of parameter tensors.
    fn num_tensors(&self) -> usize {
        let mut n = 0;
        self.visit_params("", &mut |_, _| n += 1);
        n
    }

    /// Makes every parameter a trainable autograd leaf.
    fn track_params(&mut self) {
        self.visit_params_mut("", &mut |_, mut p| p.track());
    }

    /// Clears every parameter's accumulated gradient.
    fn zero_grad(&self) {
        self.visit_params("", &mut |_, t| autograd::zero_grad_of(t));
    }
}

impl<A: Axes> Module for Tensor<A> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &RawTensor)) {
        f(prefix, self.raw())
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, ParamMut<'_>)) {
        f(prefix, ParamMut::new(self.raw_mut()))
    }
}

impl<M: Module> Module for Vec<M> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &RawTensor)) {
        self.as_slice().visit_params(prefix, f)
    }
    fn visit_frozen(&self, prefix: &str, f: &mut dyn FnMut(&str, &dyn FrozenWeight)) {
        self.as_slice().visit_frozen(prefix, f)
    }
    fn visit_frozen_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut dyn FrozenWeight)) {
        self.as_mut_slice().visit_frozen_mut(prefix, f)
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, ParamMut<'_>)) {
        self.as_mut_slice().visit_params_mut(prefix, f)
    }
}

impl<M: Module> Module for [M] {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &RawTensor)) {
        for (i, m) in self.iter().enumerate() {
            m.visit_params(&join_name(prefix, &i.to_string()), f);
        }
    }
    fn visit_frozen(&self, prefix: &str, f: &mut dyn FnMut(&str, &dyn FrozenWeight)) {
        for (i, m) in self.iter().enumerate() {
            m.visit_frozen(&join_name(prefix, &i.to_string()), f);
        }
    }
    fn visit_frozen_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut dyn FrozenWeight)) {
        for (i, m) in self.iter_mut().enumerate() {
            m.visit_frozen_mut(&join_name(prefix, &i.to_string()), f);
        }
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, ParamMut<'_>)) {
        for (i, m) in self.iter_mut().enumerate() {
            m.visit_params_mut(&join_name(prefix, &i.to_string()), f);
        }
    }
}

impl<M: Module, const N: usize> Module for [M; N] {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &RawTensor)) {
        self.as_slice().visit_params(prefix, f)
    }
    fn visit_frozen(&self, prefix: &str, f: &mut dyn FnMut(&str, &dyn FrozenWeight)) {
        self.as_slice().visit_frozen(prefix, f)
    }
    fn visit_frozen_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut dyn FrozenWeight)) {
        self.as_mut_slice().visit_frozen_mut(prefix, f)
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, ParamMut<'_>)) {
        self.as_mut_slice().visit_params_mut(prefix, f)
    }
}

impl<M: Module> Module for Option<M> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &RawTensor)) {
        if let Some(m) = self {
            m.visit_params(prefix, f)
        }
    }
    fn visit_frozen(&self, prefix: &str, f: &mut dyn FnMut(&str, &dyn FrozenWeight)) {
        if let Some(m) = self {
            m.visit_frozen(prefix, f)
        }
    }
    fn visit_frozen_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut dyn FrozenWeight)) {
        if let Some(m) = self {
            m.visit_frozen_mut(prefix, f)
        }
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, ParamMut<'_>)) {
        if let Some(m) = self {
            m.visit_params_mut(prefix, f)
        }
    }
}

impl<M: Module + ?Sized> Module for Box<M> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &RawTensor)) {
        (**self).visit_params(prefix, f)
    }
    fn visit_frozen(&self, prefix: &str, f: &mut dyn FnMut(&str, &dyn FrozenWeight)) {
        (**self).visit_frozen(prefix, f)
    }
    fn visit_frozen_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut dyn FrozenWeight)) {
        (**self).visit_frozen_mut(prefix, f)
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, ParamMut<'_>)) {
        (**self).visit_params_mut(prefix, f)
    }
}
