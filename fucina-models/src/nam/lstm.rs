//! NAM's LSTM: stacked cells (PyTorch gate order i, f, g, o; one bias per gate) and a
//! linear head, one sample at a time, starting from the initial states stored in the file.
//! The recurrence is inherently sequential, so it is written as plain loops over small
//! matrices; `process` allocates nothing.

use fucina::formats::nam::LstmConfig;
use fucina::{FucinaError, Result};

/// One cell's parameters and state.
#[derive(Debug, Clone)]
struct Cell {
    /// `[4H, in + H]` row-major: rows i, f, g, o.
    w: Vec<f32>,
    /// `[4H]`.
    b: Vec<f32>,
    h0: Vec<f32>,
    c0: Vec<f32>,
    h: Vec<f32>,
    c: Vec<f32>,
    input: usize,
}

/// An LSTM amp model with its running state.
#[derive(Debug, Clone)]
pub struct Lstm {
    cells: Vec<Cell>,
    head_w: Vec<f32>,
    head_b: f32,
    /// Scratch: the concatenated `[x, h]` and the gate pre-activations.
    xh: Vec<f32>,
    gates: Vec<f32>,
    hidden: usize,
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

impl Lstm {
    /// Builds the model from NAM's flat weights (per cell: matrix, bias, initial hidden
    /// state, initial cell state; then the head weights and bias).
    pub fn from_weights(c: &LstmConfig, weights: &[f32]) -> Result<Lstm> {
        if weights.len() != c.weight_count() {
            return Err(FucinaError::Format {
                format: "nam",
                msg: format!("LSTM needs {} weights, got {}", c.weight_count(), weights.len()),
            });
        }
        let h = c.hidden_size;
        let mut at = 0;
        let mut take = |n: usize| {
            let v = weights[at..at + n].to_vec();
            at += n;
            v
        };
        let mut cells = Vec::with_capacity(c.num_layers);
        for l in 0..c.num_layers {
            let input = if l == 0 { c.input_size } else { h };
            let w = take(4 * h * (input + h));
            let b = take(4 * h);
            let h0 = take(h);
            let c0 = take(h);
            cells.push(Cell { w, b, h: h0.clone(), c: c0.clone(), h0, c0, input });
        }
        let head_w = take(h);
        let head_b = take(1)[0];
        Ok(Lstm { cells, head_w, head_b, xh: vec![0.0; 2 * h + 1], gates: vec![0.0; 4 * h], hidden: h })
    }

    /// Back to the initial states.
    pub fn reset(&mut self) {
        for c in &mut self.cells {
            c.h.copy_from_slice(&c.h0);
            c.c.copy_from_slice(&c.c0);
        }
    }

    /// Processes samples in order, carrying the state across calls (no allocation).
    pub fn process(&mut self, input: &[f32], output: &mut [f32]) {
        let hn = self.hidden;
        for (x, y) in input.iter().zip(output.iter_mut()) {
            // The first cell reads the sample; each later cell reads the previous cell's new
            // hidden state, which the previous iteration left in xh[..hn].
            self.xh[0] = *x;
            for cell in &mut self.cells {
                let n_in = cell.input;
                self.xh[n_in..n_in + hn].copy_from_slice(&cell.h);
                let cols = n_in + hn;
                for (r, g) in self.gates.iter_mut().enumerate() {
                    let row = &cell.w[r * cols..(r + 1) * cols];
                    *g = cell.b[r] + row.iter().zip(&self.xh[..cols]).map(|(a, b)| a * b).sum::<f32>();
                }
                for j in 0..hn {
                    let i = sigmoid(self.gates[j]);
                    let f = sigmoid(self.gates[hn + j]);
                    let g = self.gates[2 * hn + j].tanh();
                    let o = sigmoid(self.gates[3 * hn + j]);
                    cell.c[j] = f * cell.c[j] + i * g;
                    cell.h[j] = o * cell.c[j].tanh();
                }
                // The next cell reads this hidden state as its input.
                self.xh[..hn].copy_from_slice(&cell.h);
            }
            let last = &self.cells[self.cells.len() - 1].h;
            *y = self.head_b + last.iter().zip(&self.head_w).map(|(a, b)| a * b).sum::<f32>();
        }
    }
}
