//! `LstmCell` and `Lstm`: PyTorch's `nn.LSTM` one step at a time, for recurrent decoders
//! (a transducer's prediction network) that feed each output back as the next input.

use super::init::Init;
use super::linear::Linear;
use crate::axis::{batch, gate, hidden, r#in};
use crate::error::{FucinaError, Result};
use crate::exec::ExecContext;
use crate::tensor::Tensor;
use crate::Module;

/// An LSTM's state for a batch: hidden `h` and cell `c`, both `[batch, hidden]`.
#[derive(Debug, Clone)]
pub struct LstmState {
    /// The hidden state (the layer's output).
    pub h: Tensor<(batch, hidden)>,
    /// The cell state.
    pub c: Tensor<(batch, hidden)>,
}

/// One LSTM layer, PyTorch's parameterization: gates `[i, f, g, o]` stacked along `gate`
/// (`4 * hidden`), `gates = W_ih x + b_ih + W_hh h + b_hh`, then `c' = σ(f) c + σ(i) tanh(g)`
/// and `h' = σ(o) tanh(c')`.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::nn::LstmCell;
/// let ctx = ExecContext::new(ExecConfig { seed: 3, ..ExecConfig::default() })?;
/// let cell = LstmCell::init(&ctx, 5, 4)?;
/// let s = cell.zero_state(2)?;
/// let x = Tensor::<axes![batch, in]>::ones(&[2, 5])?;
/// let s = cell.step(&x, &s)?;
/// assert_eq!(s.h.shape(), &[2, 4]);
/// assert!(s.h.to_f32_vec().iter().all(|v| v.abs() < 1.0), "h = σ(o) tanh(c) is inside (-1, 1)");
/// # Ok::<(), fucina::FucinaError>(())
/// ```
#[derive(Module, Debug, Clone)]
pub struct LstmCell {
    /// `W_ih [4 hidden, in]` and `b_ih` (`weight_ih_l{k}`, `bias_ih_l{k}`).
    pub input: Linear<gate, r#in>,
    /// `W_hh [4 hidden, hidden]` and `b_hh` (`weight_hh_l{k}`, `bias_hh_l{k}`).
    pub recurrent: Linear<gate, hidden>,
}

impl LstmCell {
    /// A layer from its two products; their gate rows must be four times the hidden size.
    pub fn new(input: Linear<gate, r#in>, recurrent: Linear<gate, hidden>) -> Result<LstmCell> {
        let (wi, wh) = (input.weight.shape(), recurrent.weight.shape());
        let h = wh[1];
        if wh[0] != 4 * h {
            return Err(FucinaError::ShapeMismatch { axis: "gate (4 x hidden)".into(), left: wh[0], right: 4 * h });
        }
        if wi[0] != wh[0] {
            return Err(FucinaError::ShapeMismatch { axis: "gate".into(), left: wi[0], right: wh[0] });
        }
        for (name, b) in [("input bias", &input.bias), ("recurrent bias", &recurrent.bias)] {
            if let Some(b) = b {
                if b.shape()[0] != wh[0] {
                    return Err(FucinaError::ShapeMismatch {
                        axis: format!("gate ({name})"),
                        left: b.shape()[0],
                        right: wh[0],
                    });
                }
            }
        }
        Ok(LstmCell { input, recurrent })
    }

    /// A new layer initialized as PyTorch's `nn.LSTM`: every weight and bias uniform in
    /// `±1/sqrt(hidden)`.
    pub fn init(ctx: &ExecContext, input_size: usize, hidden_size: usize) -> Result<LstmCell> {
        if hidden_size == 0 {
            return Err(FucinaError::InvalidArgument { op: "LstmCell::init", msg: "hidden size 0".into() });
        }
        let init = Init::Uniform { bound: 1.0 / (hidden_size as f32).sqrt() };
        let rows = hidden_size.checked_mul(4).ok_or_else(|| FucinaError::InvalidArgument {
            op: "LstmCell::init",
            msg: format!("hidden size {hidden_size} overflows"),
        })?;
        let input = Linear::new(init.tensor(ctx, &[rows, input_size])?, Some(init.tensor(ctx, &[rows])?));
        let recurrent = Linear::new(init.tensor(ctx, &[rows, hidden_size])?, Some(init.tensor(ctx, &[rows])?));
        LstmCell::new(input, recurrent)
    }

    /// The hidden size.
    pub fn hidden_size(&self) -> usize {
        self.recurrent.weight.shape()[1]
    }

    /// The input size.
    pub fn input_size(&self) -> usize {
        self.input.weight.shape()[1]
    }

    /// Zero `h` and `c` for `batch` sequences.
    pub fn zero_state(&self, batch: usize) -> Result<LstmState> {
        let h = self.hidden_size();
        Ok(LstmState { h: Tensor::zeros(&[batch, h])?, c: Tensor::zeros(&[batch, h])? })
    }

    /// One step: the state after reading `x [batch, in]` in state `s`.
    pub fn step(&self, x: &Tensor<(batch, r#in)>, s: &LstmState) -> Result<LstmState> {
        let h = self.hidden_size();
        let gates = self.input.forward(x)?.add(&self.recurrent.forward(&s.h)?)?;
        let part = |k: usize| gates.narrow::<gate>(k * h, h)?.rename::<gate, hidden>();
        let (i, f, g, o) = (part(0)?.sigmoid()?, part(1)?.sigmoid()?, part(2)?.tanh()?, part(3)?.sigmoid()?);
        let c = f.mul(&s.c)?.add(&i.mul(&g)?)?;
        let h = o.mul(&c.tanh()?)?;
        Ok(LstmState { h, c })
    }
}

/// Stacked LSTM layers, PyTorch's `nn.LSTM(num_layers = L)` without dropout: layer `k + 1`
/// reads layer `k`'s hidden state.
///
/// ```
/// use fucina::prelude::*;
/// use fucina::nn::Lstm;
/// let ctx = ExecContext::new(ExecConfig { seed: 3, ..ExecConfig::default() })?;
/// let lstm = Lstm::init(&ctx, 5, 4, 2)?;
/// let mut s = lstm.zero_state(1)?;
/// for _ in 0..3 {
///     let y = lstm.step(&Tensor::<axes![batch, in]>::ones(&[1, 5])?, &mut s)?;
///     assert_eq!(y.shape(), &[1, 4]);
/// }
/// # Ok::<(), fucina::FucinaError>(())
/// ```
#[derive(Module, Debug, Clone)]
pub struct Lstm {
    /// The layers, bottom first.
    pub layers: Vec<LstmCell>,
}

impl Lstm {
    /// A stack from its layers: at least one; each layer above the first reads the one below
    /// (its input size is the hidden size below).
    pub fn new(layers: Vec<LstmCell>) -> Result<Lstm> {
        if layers.is_empty() {
            return Err(FucinaError::InvalidArgument { op: "Lstm::new", msg: "no layers".into() });
        }
        for w in layers.windows(2) {
            if w[1].input_size() != w[0].hidden_size() {
                return Err(FucinaError::ShapeMismatch {
                    axis: "in (a layer's input is the hidden state below)".into(),
                    left: w[1].input_size(),
                    right: w[0].hidden_size(),
                });
            }
        }
        Ok(Lstm { layers })
    }

    /// A new stack initialized as PyTorch's `nn.LSTM`.
    pub fn init(ctx: &ExecContext, input_size: usize, hidden_size: usize, num_layers: usize) -> Result<Lstm> {
        let layers = (0..num_layers)
            .map(|k| LstmCell::init(ctx, if k == 0 { input_size } else { hidden_size }, hidden_size))
            .collect::<Result<Vec<_>>>()?;
        Lstm::new(layers)
    }

    /// Zero states of every layer for `batch` sequences.
    pub fn zero_state(&self, batch: usize) -> Result<Vec<LstmState>> {
        self.layers.iter().map(|l| l.zero_state(batch)).collect()
    }

    /// One step through every layer: updates `states` (one per layer) and returns the top
    /// layer's hidden state.
    pub fn step(&self, x: &Tensor<(batch, r#in)>, states: &mut [LstmState]) -> Result<Tensor<(batch, hidden)>> {
        if states.len() != self.layers.len() {
            return Err(FucinaError::ShapeMismatch {
                axis: "LSTM layers (states)".into(),
                left: states.len(),
                right: self.layers.len(),
            });
        }
        let mut input = x.clone();
        for (layer, s) in self.layers.iter().zip(states.iter_mut()) {
            *s = layer.step(&input, s)?;
            input = s.h.rename::<hidden, r#in>()?;
        }
        input.rename::<r#in, hidden>()
    }
}
