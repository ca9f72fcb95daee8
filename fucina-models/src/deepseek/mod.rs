//! DeepSeek-V2/V3 (`deepseek2` GGUFs): config from metadata, the model in the DSL with
//! multi-head latent attention and mixtures of experts, and the expert store that streams
//! routed experts from the mapped file under a memory budget.

pub mod config;
pub mod experts;
pub mod model;

pub use config::DeepSeekConfig;
pub use model::DeepSeek;
