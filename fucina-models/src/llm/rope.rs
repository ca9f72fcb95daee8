//! Rotary position embeddings, NeoX layout (the one Qwen, Llama-in-HF and DeepSeek use): the
//! head dimension is split in halves `[x1, x2]` and pair `(x1[i], x2[i])` is rotated by
//! `pos * theta^(-2i/d)`.

use fucina::prelude::*;

/// `(cos, sin)` angle tables, `[seq, head_dim / 2]` each.
pub type Tables = (Tensor<axes![seq, head_dim]>, Tensor<axes![seq, head_dim]>);

/// Precomputed inverse frequencies of a rotary embedding.
#[derive(Debug, Clone)]
pub struct Rope {
    inv_freq: Vec<f32>,
}

impl Rope {
    /// A rotation over `dim` (even) values with base `theta`.
    pub fn new(dim: usize, theta: f32) -> Result<Rope> {
        if dim == 0 || !dim.is_multiple_of(2) {
            return Err(FucinaError::InvalidArgument {
                op: "Rope",
                msg: format!("rotary dimension {dim} is not even"),
            });
        }
        // As transformers computes it: 1 / theta^(2i/d) in f32.
        let inv_freq = (0..dim / 2).map(|i| 1.0 / theta.powf((2 * i) as f32 / dim as f32)).collect();
        Ok(Rope { inv_freq })
    }

    /// Inverse frequencies scaled per pair (YaRN and similar), from `f(i, inv_freq_i)`.
    pub fn map_freqs(mut self, f: impl Fn(usize, f32) -> f32) -> Rope {
        for (i, x) in self.inv_freq.iter_mut().enumerate() {
            *x = f(i, *x);
        }
        self
    }

    /// The rotated dimension.
    pub fn dim(&self) -> usize {
        2 * self.inv_freq.len()
    }

    /// `(cos, sin)` tables `[seq, head_dim/2]` for positions `start..start+len`, each value
    /// multiplied by `mscale` (1 unless a scaling method asks otherwise).
    pub fn tables(&self, start: usize, len: usize, mscale: f32) -> Result<Tables> {
        let half = self.inv_freq.len();
        let (mut c, mut s) = (Vec::with_capacity(len * half), Vec::with_capacity(len * half));
        for p in start..start + len {
            for f in &self.inv_freq {
                let a = p as f32 * f;
                c.push(a.cos() * mscale);
                s.push(a.sin() * mscale);
            }
        }
        Ok((Tensor::from_vec(c, &[len, half])?, Tensor::from_vec(s, &[len, half])?))
    }
}

/// Rotates `x` (any tensor with `seq` and `head_dim` axes) by the tables of [`Rope::tables`]:
/// `[x1 cos - x2 sin, x2 cos + x1 sin]`, broadcast over every other axis by name.
pub fn apply_rope<A>(
    x: &Tensor<A>,
    cos: &Tensor<axes![seq, head_dim]>,
    sin: &Tensor<axes![seq, head_dim]>,
) -> Result<Tensor<A>>
where
    A: fucina::tensor::axes::Axes
        + fucina::tensor::axes::HasAxes<head_dim>
        + fucina::tensor::axes::BroadcastFrom<axes![seq, head_dim]>
        + fucina::tensor::axes::BroadcastFrom<A>,
{
    let half = x.size::<head_dim>() / 2;
    let x1 = x.narrow::<head_dim>(0, half)?;
    let x2 = x.narrow::<head_dim>(half, half)?;
    let r1 = x1.mul(cos)?.sub::<A>(&x2.mul(sin)?)?;
    let r2 = x2.mul(cos)?.add::<A>(&x1.mul(sin)?)?;
    Tensor::concat::<head_dim>(&[&r1, &r2])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_pairs_of_halves_and_keeps_norms() {
        let rope = Rope::new(4, 10000.0).unwrap();
        let x = Tensor::<axes![seq, head, head_dim]>::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[1, 1, 4]).unwrap();
        let (c, s) = rope.tables(3, 1, 1.0).unwrap();
        let y = apply_rope(&x, &c, &s).unwrap().to_f32_vec();
        let (a0, a1) = (3.0f32, 3.0f32 * 0.01);
        let want = [
            1.0 * a0.cos() - 3.0 * a0.sin(),
            2.0 * a1.cos() - 4.0 * a1.sin(),
            3.0 * a0.cos() + 1.0 * a0.sin(),
            4.0 * a1.cos() + 2.0 * a1.sin(),
        ];
        for (g, w) in y.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{y:?} vs {want:?}");
        }
        assert!(Rope::new(3, 1e4).is_err());
    }
}
