//! Neural-network building blocks: the [`Module`] trait behind `#[derive(Module)]`, layers
//! over named axes ([`Linear`], [`Embedding`], [`LayerNorm`], [`RmsNorm`], [`Dropout`],
//! [`MultiHeadAttention`], [`BatchNorm`], [`Conv2d`], [`Lstm`]),
//! initializers ([`Init`]) and losses.

mod attention;
mod batch_norm;
mod conv;
mod dropout;
mod embedding;
mod init;
mod linear;
pub mod loss;
mod lstm;
mod module;
mod norm;

pub use attention::MultiHeadAttention;
pub use batch_norm::BatchNorm;
pub use conv::{Conv1d, Conv2d};
pub use dropout::{Dropout, Mode};
pub use embedding::Embedding;
pub use init::{fans, Init};
pub use linear::{Bias, Linear, Projected};
pub use lstm::{Lstm, LstmCell, LstmState};
pub use norm::{Affine, LayerNorm, RmsNorm};

pub use loss::{bce_with_logits, cross_entropy, mse_loss};
pub use module::{join_name, FrozenWeight, Module, ParamMut};
