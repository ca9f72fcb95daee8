//! Neural-network building blocks; for now the [`Module`] trait behind `#[derive(Module)]`.

mod module;

pub use module::{join_name, Module, ParamMut};
