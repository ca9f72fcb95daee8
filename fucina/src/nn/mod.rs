//! Neural-network building blocks: the [`Module`] trait behind `#[derive(Module)]`, and losses.

pub mod loss;
mod module;

pub use loss::{bce_with_logits, cross_entropy, mse_loss};
pub use module::{join_name, Module, ParamMut};
