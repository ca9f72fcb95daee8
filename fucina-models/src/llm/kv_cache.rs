//! A preallocated key/value cache: per layer, one buffer of `[kv_head, capacity, head_dim]`
//! for keys and one for values, in f32, f16 or Q8_0 blocks. Appending writes in place
//! (quantizing for Q8_0); attention ([`KvCache::attend`]) reads the filled prefix in place.

use fucina::ops::{attention, attention_q8_0, ConvState, DeltaState, Mask, Q8Rows};
use fucina::prelude::*;
use fucina::quant::{quantize_q8_0, GgmlType};
use fucina::storage::{alloc, Buffer, Storage};
use fucina::tensor::axes::Axis;
use fucina::tensor::{Layout, RawTensor};
use half::f16;
use half::slice::HalfFloatSliceExt;
use std::sync::Arc;

/// Bytes of a Q8_0 block of 32 values.
const Q8_0_BYTES: usize = 34;

/// How a KV cache stores keys and values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum KvType {
    /// f32: exact.
    #[default]
    F32,
    /// f16: half the memory.
    F16,
    /// Q8_0 blocks (34 bytes per 32 values, ~0.27 of f32), as llama.cpp's `-ctk q8_0 -ctv
    /// q8_0`; scores are integer dot products with the query quantized to Q8_0. Rows must
    /// be whole blocks (head widths that are multiples of 32).
    Q8_0,
}

impl KvType {
    /// Bytes per value, rounded up (for Q8_0: 34/32).
    fn bytes_per_32(self) -> usize {
        match self {
            KvType::F32 => 128,
            KvType::F16 => 64,
            KvType::Q8_0 => Q8_0_BYTES,
        }
    }
}

impl std::str::FromStr for KvType {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<KvType, String> {
        match s.to_ascii_lowercase().as_str() {
            "f32" => Ok(KvType::F32),
            "f16" => Ok(KvType::F16),
            "q8_0" => Ok(KvType::Q8_0),
            other => Err(format!("unknown KV cache type '{other}' (f32, f16 or q8_0)")),
        }
    }
}

impl From<DType> for KvType {
    /// F16 is [`KvType::F16`]; every other dtype stores as f32.
    fn from(d: DType) -> KvType {
        if d == DType::F16 {
            KvType::F16
        } else {
            KvType::F32
        }
    }
}

/// Where a cache's values come from in [`KvCache::attend`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    /// Their own buffer.
    Own,
    /// The first `n` elements of each key row (a latent cache, where keys are `[latent,
    /// rotary key]` and the latent is also the value).
    KeyPrefix(usize),
}

/// One layer's cache of one kind (keys or values).
#[derive(Debug)]
enum Slab {
    /// f32 or f16 elements.
    Dense(Arc<Storage>),
    /// Q8_0 blocks.
    Blocks(Vec<u8>),
}

/// The geometry of one layer's cache: heads and the widths of a key and a value row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerShape {
    /// Key/value heads.
    pub heads: usize,
    /// Width of a key row.
    pub key_dim: usize,
    /// Width of a value row (0: the layer stores keys only).
    pub value_dim: usize,
}

/// What a model that drafts its own tokens (GLM-4.5's next-token-prediction layer) keeps
/// beside a sequence's cache: the drafter's own keys and values, and the main model's last
/// hidden states (the drafter's input for the positions whose next token was not known when
/// they ran).
#[derive(Debug)]
pub struct DraftState {
    /// The drafter's keys and values: one layer, one entry per position it has read.
    pub cache: KvCache,
    /// The position of each entry of `cache`, increasing (a position may be missing: the
    /// drafter then attends without it, which only makes its drafts worse).
    pub positions: Vec<usize>,
    /// The main model's final hidden states (after its output norm) from its last pass,
    /// `hidden_width` values per position from `hidden_at` on.
    pub hidden: Vec<f32>,
    /// The position of the first row of `hidden`.
    pub hidden_at: usize,
    /// Values per row of `hidden`.
    pub hidden_width: usize,
}

impl DraftState {
    /// The main model's hidden state at `position`, if the last pass computed it.
    pub fn hidden_row(&self, position: usize) -> Option<&[f32]> {
        let w = self.hidden_width;
        let i = position.checked_sub(self.hidden_at)?;
        self.hidden.get(i * w..(i + 1) * w)
    }

    /// Keeps the drafter's entries of positions before `position`.
    pub fn keep_before(&mut self, position: usize) {
        let n = self.positions.partition_point(|&p| p < position);
        self.positions.truncate(n);
        self.cache.truncate(n);
    }

    /// Forgets every entry and hidden state.
    fn reset(&mut self) {
        self.positions.clear();
        self.cache.clear();
        self.hidden.clear();
        self.hidden_at = 0;
    }
}

/// Keys and values for every layer, for up to `capacity` positions.
#[derive(Debug)]
pub struct KvCache {
    keys: Vec<Slab>,
    values: Vec<Slab>,
    /// Per layer: heads and row widths (Gemma 4's layers differ).
    shapes: Vec<LayerShape>,
    capacity: usize,
    len: usize,
    kind: KvType,
    /// The carried states of recurrent layers (Qwen3.5's Gated DeltaNet), one per such layer.
    recurrent: Vec<(ConvState, DeltaState)>,
    /// A self-drafting model's state ([`KvCache::set_draft`]).
    draft: Option<Box<DraftState>>,
}

impl KvCache {
    /// A cache for `layers` layers of `heads` heads, `key_dim`/`value_dim` wide, holding up
    /// to `capacity` positions stored as `kind`. The memory is taken up front.
    pub fn new(
        layers: usize,
        heads: usize,
        key_dim: usize,
        value_dim: usize,
        capacity: usize,
        kind: impl Into<KvType>,
    ) -> Result<KvCache> {
        KvCache::with_shapes(&vec![LayerShape { heads, key_dim, value_dim }; layers], capacity, kind)
    }

    /// A cache whose layers each have their own geometry (`shapes[layer]`), holding up to
    /// `capacity` positions stored as `kind`. The memory is taken up front, after checking
    /// the whole of it against what the machine has.
    pub fn with_shapes(shapes: &[LayerShape], capacity: usize, kind: impl Into<KvType>) -> Result<KvCache> {
        let kind = kind.into();
        debug_assert_eq!(Q8_0_BYTES, GgmlType::Q8_0.block_bytes());
        if let Some(s) = shapes
            .iter()
            .find(|s| kind == KvType::Q8_0 && !(s.key_dim.is_multiple_of(32) && s.value_dim.is_multiple_of(32)))
        {
            return Err(FucinaError::InvalidArgument {
                op: "KvCache",
                msg: format!(
                    "a q8_0 cache stores whole 32-value blocks; this model's rows are {} and {} wide",
                    s.key_dim, s.value_dim
                ),
            });
        }
        // The whole cache is checked against the memory the machine has before any of it is
        // taken, so `--ctx 100000000` is an error that says what it needs, not an abort.
        let layer_bytes = |s: &LayerShape| {
            s.heads.checked_mul(capacity).and_then(|x| x.checked_mul(s.key_dim.checked_add(s.value_dim)?))
        };
        let total = shapes
            .iter()
            .try_fold(0usize, |acc, s| acc.checked_add(layer_bytes(s)?))
            .and_then(|x| x.checked_mul(kind.bytes_per_32()))
            .map(|x| x.div_ceil(32));
        let heads = shapes.iter().map(|s| s.heads).max().unwrap_or(0);
        let what = format!("a KV cache of {capacity} positions ({} layers, {heads} heads)", shapes.len());
        let total =
            total.ok_or_else(|| FucinaError::OutOfMemory { what: what.clone(), bytes: usize::MAX, available: 0 })?;
        alloc::check_available(&what, total)?;
        let slab = |heads: usize, dim: usize| -> Result<Slab> {
            let n = heads * capacity * dim; // bounded by `total` above
            Ok(match kind {
                KvType::F32 => Slab::Dense(Arc::new(Storage::new(Buffer::F32(alloc::try_vec(&what, n, 0.0)?)))),
                KvType::F16 => Slab::Dense(Arc::new(Storage::new(Buffer::F16(alloc::try_vec(&what, n, f16::ZERO)?)))),
                KvType::Q8_0 => Slab::Blocks(alloc::try_vec(&what, n / 32 * Q8_0_BYTES, 0u8)?),
            })
        };
        Ok(KvCache {
            keys: shapes.iter().map(|s| slab(s.heads, s.key_dim)).collect::<Result<_>>()?,
            values: shapes.iter().map(|s| slab(s.heads, s.value_dim)).collect::<Result<_>>()?,
            shapes: shapes.to_vec(),
            capacity,
            len: 0,
            kind,
            recurrent: Vec::new(),
            draft: None,
        })
    }

    /// Layer `layer`'s geometry, or an error naming the layer.
    fn shape(&self, layer: usize) -> Result<LayerShape> {
        self.shapes.get(layer).copied().ok_or_else(|| FucinaError::InvalidArgument {
            op: "KvCache",
            msg: format!("layer {layer} of a cache holding {}", self.shapes.len()),
        })
    }

    /// Positions filled so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no position is filled.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The most positions the cache holds.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// How keys and values are stored.
    pub fn kind(&self) -> KvType {
        self.kind
    }

    /// Adds the carried states of a model's recurrent layers (a convolution and a delta-rule
    /// state each); the cache then holds a whole sequence's state, not only its keys and
    /// values, and cannot go back to an earlier position ([`KvCache::rewinds`]).
    #[must_use]
    pub fn with_recurrent(mut self, states: Vec<(ConvState, DeltaState)>) -> KvCache {
        self.recurrent = states;
        self
    }

    /// Whether [`KvCache::truncate`] can keep a prefix: false when the cache carries
    /// recurrent states, which hold no earlier position.
    pub fn rewinds(&self) -> bool {
        self.recurrent.is_empty()
    }

    /// The carried states of recurrent layer `i` (in the model's order of such layers).
    pub fn recurrent_mut(&mut self, i: usize) -> Result<(&mut ConvState, &mut DeltaState)> {
        let n = self.recurrent.len();
        self.recurrent.get_mut(i).map(|(c, d)| (c, d)).ok_or_else(|| FucinaError::InvalidArgument {
            op: "KvCache",
            msg: format!("recurrent layer {i} of a cache holding {n}"),
        })
    }

    /// Forgets every position (the memory is kept; recurrent states return to zero).
    pub fn clear(&mut self) {
        self.len = 0;
        for (c, d) in &mut self.recurrent {
            c.reset();
            d.reset();
        }
        if let Some(d) = &mut self.draft {
            d.reset();
        }
    }

    /// Attaches a self-drafting model's state (see [`DraftState`]), which then follows the
    /// cache: [`KvCache::truncate`] drops the drafter's entries whose next token is gone.
    pub fn set_draft(&mut self, state: DraftState) {
        self.draft = Some(Box::new(state));
    }

    /// The self-drafting model's state, if one is attached.
    pub fn draft_mut(&mut self) -> Option<&mut DraftState> {
        self.draft.as_deref_mut()
    }

    /// Whether a self-drafting model's state is attached.
    pub fn has_draft(&self) -> bool {
        self.draft.is_some()
    }

    /// Drops positions from `len` on (e.g. to reuse a shared prompt prefix) and returns how
    /// many it keeps: `len` (or fewer, if fewer are filled) — or 0 when the cache carries
    /// recurrent states and `len` is short of its length, since those states cannot go back
    /// (the cache is cleared and the caller feeds the whole sequence again).
    pub fn truncate(&mut self, len: usize) -> usize {
        if len < self.len && !self.rewinds() {
            self.clear();
        }
        self.len = self.len.min(len);
        if let Some(d) = &mut self.draft {
            // A drafter's entry at position p read the token at p + 1: it stays while that
            // token does.
            d.keep_before(self.len.saturating_sub(1));
            let keep = self.len.saturating_sub(d.hidden_at) * d.hidden_width;
            d.hidden.truncate(keep.min(d.hidden.len()));
        }
        self.len
    }

    /// Checks that `n` more positions fit, with an error that states the limit.
    pub fn check_room(&self, n: usize) -> Result<()> {
        if self.len.checked_add(n).is_none_or(|e| e > self.capacity) {
            return Err(FucinaError::InvalidArgument {
                op: "generate",
                msg: format!(
                    "{} tokens in context plus {n} new exceed the context length of {}",
                    self.len, self.capacity
                ),
            });
        }
        Ok(())
    }

    /// Writes the keys and values of the next `seq` positions of `layer` (at positions
    /// `len..len+seq`; [`KvCache::advance`] commits them once every layer has written).
    pub fn write(
        &mut self,
        layer: usize,
        k: &Tensor<axes![kv_head, seq, head_dim]>,
        v: &Tensor<axes![kv_head, seq, head_dim]>,
    ) -> Result<()> {
        let LayerShape { heads, key_dim: kd, value_dim: vd } = self.shape(layer)?;
        let (cap, at) = (self.capacity, self.len);
        let n = k.size::<seq>();
        self.check_room(n)?;
        check_shape("keys", k.shape(), &[heads, n, kd])?;
        check_shape("values", v.shape(), &[heads, n, vd])?;
        for (slab, t, dim) in [(&mut self.keys[layer], k, kd), (&mut self.values[layer], v, vd)] {
            let data = t.to_f32_vec();
            match slab {
                Slab::Dense(storage) => {
                    let store = Arc::get_mut(storage).ok_or_else(|| FucinaError::InvalidArgument {
                        op: "KvCache::write",
                        msg: "a view of the cache is still alive".into(),
                    })?;
                    for h in 0..heads {
                        let src = &data[h * n * dim..(h + 1) * n * dim];
                        let dst = (h * cap + at) * dim;
                        match store.buffer_mut() {
                            Buffer::F32(b) => b[dst..dst + n * dim].copy_from_slice(src),
                            // The slice conversion (F16C where the CPU has it), same rounding.
                            Buffer::F16(b) => b[dst..dst + n * dim].convert_from_f32_slice(src),
                            _ => unreachable!("the cache is built as F32 or F16"),
                        }
                    }
                }
                Slab::Blocks(b) => {
                    // Row (h, position) starts at element (h * cap + position) * dim, a whole
                    // number of blocks since dim is.
                    for h in 0..heads {
                        let src = &data[h * n * dim..(h + 1) * n * dim];
                        let dst = (h * cap + at) * dim / 32 * Q8_0_BYTES;
                        let q = quantize_q8_0(src);
                        b[dst..dst + q.len()].copy_from_slice(&q);
                    }
                }
            }
        }
        Ok(())
    }

    /// Writes only keys (a cache built with `value_dim` 0, such as a latent cache where the
    /// values are a prefix of each key row).
    pub fn write_keys(&mut self, layer: usize, k: &Tensor<axes![kv_head, seq, head_dim]>) -> Result<()> {
        let n = k.size::<seq>();
        let shape = self.shape(layer)?;
        let empty = Tensor::<axes![kv_head, seq, head_dim]>::from_vec(Vec::<f32>::new(), &[shape.heads, n, 0])?;
        if shape.value_dim != 0 {
            return Err(FucinaError::InvalidArgument {
                op: "KvCache::write_keys",
                msg: format!("this cache also stores values ({} wide)", shape.value_dim),
            });
        }
        self.write(layer, k, &empty)
    }

    /// Commits `n` positions written to every layer.
    pub fn advance(&mut self, n: usize) -> Result<()> {
        self.check_room(n)?;
        self.len += n;
        Ok(())
    }

    /// Keys of `layer` for positions `0..len+extra` (`extra`: positions written by
    /// [`KvCache::write`] but not yet committed), as a zero-copy view (f32 and f16 caches).
    pub fn keys(&self, layer: usize, extra: usize) -> Result<Tensor<axes![kv_head, kv_seq, head_dim]>> {
        let s = self.shape(layer)?;
        self.view(&self.keys[layer], s.heads, s.key_dim, s.key_dim, extra)
    }

    /// Values of `layer`, as [`KvCache::keys`].
    pub fn values(&self, layer: usize, extra: usize) -> Result<Tensor<axes![kv_head, kv_seq, head_dim]>> {
        let s = self.shape(layer)?;
        self.view(&self.values[layer], s.heads, s.value_dim, s.value_dim, extra)
    }

    fn filled(&self, extra: usize) -> Result<usize> {
        let n = self.len + extra;
        if n > self.capacity {
            return Err(FucinaError::OutOfRange { axis: "kv_seq".into(), index: n, size: self.capacity });
        }
        Ok(n)
    }

    /// The first `width` elements of the rows (`dim` apart, `heads` of them per position) of
    /// positions `0..len+extra`.
    fn view<X: Axis>(
        &self,
        slab: &Slab,
        heads: usize,
        dim: usize,
        width: usize,
        extra: usize,
    ) -> Result<Tensor<(kv_head, kv_seq, X)>> {
        let n = self.filled(extra)?;
        let Slab::Dense(storage) = slab else {
            return Err(FucinaError::InvalidArgument {
                op: "KvCache::keys",
                msg: "a q8_0 cache is read by KvCache::attend, not as a tensor".into(),
            });
        };
        let layout = Layout::from_parts(vec![heads, n, width], vec![self.capacity * dim, dim, 1], 0);
        Tensor::from_raw(RawTensor::from_storage(storage.clone(), layout)?)
    }

    fn blocks<'a, X: Axis>(
        &'a self,
        slab: &'a Slab,
        heads: usize,
        dim: usize,
        width: usize,
        n: usize,
    ) -> Result<Option<Q8Rows<'a, X>>> {
        match slab {
            Slab::Blocks(b) => Ok(Some(Q8Rows::new(b, heads, n, width, 0, self.capacity * dim, dim)?)),
            Slab::Dense(_) => Ok(None),
        }
    }

    /// Grouped-query attention of `q` over `layer`'s positions `0..len+extra` (see
    /// [`KvCache::keys`]), causal from position `start` for the first query, read in place
    /// in the cache's own format: float views through [`attention`], Q8_0 blocks through
    /// [`attention_q8_0`].
    pub fn attend<D: Axis, V: Axis>(
        &self,
        layer: usize,
        q: &Tensor<(seq, kv_head, group, D)>,
        values: Values,
        scale: f32,
        extra: usize,
        start: usize,
    ) -> Result<Tensor<(seq, kv_head, group, V)>> {
        self.attend_masked(layer, q, values, scale, extra, Mask::Causal(start))
    }

    /// [`KvCache::attend`] with any [`Mask`]: causal within a sliding window for
    /// sliding-window layers.
    pub fn attend_masked<D: Axis, V: Axis>(
        &self,
        layer: usize,
        q: &Tensor<(seq, kv_head, group, D)>,
        values: Values,
        scale: f32,
        extra: usize,
        mask: Mask,
    ) -> Result<Tensor<(seq, kv_head, group, V)>> {
        let n = self.filled(extra)?;
        let LayerShape { heads, key_dim: kd, value_dim } = self.shape(layer)?;
        let (vslab, vdim, vwidth) = match values {
            Values::Own => (&self.values[layer], value_dim, value_dim),
            Values::KeyPrefix(w) if w <= kd => (&self.keys[layer], kd, w),
            Values::KeyPrefix(w) => {
                return Err(FucinaError::InvalidArgument {
                    op: "KvCache::attend",
                    msg: format!("values of {w} from keys {kd} wide"),
                })
            }
        };
        if let (Some(k), Some(v)) =
            (self.blocks::<D>(&self.keys[layer], heads, kd, kd, n)?, self.blocks::<V>(vslab, heads, vdim, vwidth, n)?)
        {
            return attention_q8_0(q, &k, &v, scale, mask);
        }
        let keys: Tensor<(kv_head, kv_seq, D)> = self.view(&self.keys[layer], heads, kd, kd, extra)?;
        let values: Tensor<(kv_head, kv_seq, V)> = self.view(vslab, heads, vdim, vwidth, extra)?;
        attention(q, &keys, &values, scale, mask)
    }
}

fn check_shape(what: &str, got: &[usize], want: &[usize]) -> Result<()> {
    if got != want {
        return Err(FucinaError::InvalidArgument {
            op: "KvCache::write",
            msg: format!("{what} of shape {got:?}, the cache takes {want:?}"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_in_place_and_views_the_prefix() {
        for dtype in [KvType::F32, KvType::F16] {
            let mut c = KvCache::new(1, 2, 3, 3, 4, dtype).unwrap();
            let k = Tensor::<axes![kv_head, seq, head_dim]>::from_vec((0..12).map(|x| x as f32).collect(), &[2, 2, 3])
                .unwrap();
            c.write(0, &k, &k).unwrap();
            c.advance(2).unwrap();
            let one = Tensor::<axes![kv_head, seq, head_dim]>::from_vec(vec![100f32; 6], &[2, 1, 3]).unwrap();
            c.write(0, &one, &one).unwrap();
            let v = c.keys(0, 1).unwrap();
            assert_eq!(v.shape(), &[2, 3, 3]);
            let got = v.to_f32_vec();
            let want: Vec<f32> =
                [0., 1., 2., 3., 4., 5., 100., 100., 100., 6., 7., 8., 9., 10., 11., 100., 100., 100.].to_vec();
            assert_eq!(got, want, "{dtype:?}");
            // A live view blocks writes instead of racing them.
            assert!(c.write(0, &one, &one).is_err());
            drop(v);
            c.advance(1).unwrap();
            c.write(0, &one, &one).unwrap();
            c.advance(1).unwrap();
            let e = c.check_room(1).unwrap_err().to_string();
            assert!(e.contains("context length of 4"), "{e}");
        }
    }

    /// Layers of different geometry (Gemma 4's sliding and global layers) each keep their
    /// own heads and widths; a layer the cache lacks is an error, not a panic.
    #[test]
    fn layers_keep_their_own_shapes() {
        let shapes =
            [LayerShape { heads: 2, key_dim: 4, value_dim: 4 }, LayerShape { heads: 1, key_dim: 8, value_dim: 8 }];
        let mut c = KvCache::with_shapes(&shapes, 3, KvType::F32).unwrap();
        let a =
            Tensor::<axes![kv_head, seq, head_dim]>::from_vec((0..8).map(|x| x as f32).collect(), &[2, 1, 4]).unwrap();
        let b =
            Tensor::<axes![kv_head, seq, head_dim]>::from_vec((0..8).map(|x| -x as f32).collect(), &[1, 1, 8]).unwrap();
        c.write(0, &a, &a).unwrap();
        c.write(1, &b, &b).unwrap();
        assert!(c.write(1, &a, &a).is_err(), "layer 1 takes one head of 8");
        c.advance(1).unwrap();
        assert_eq!(c.keys(0, 0).unwrap().shape(), &[2, 1, 4]);
        assert_eq!(c.values(1, 0).unwrap().to_f32_vec(), b.to_f32_vec());
        assert!(c.keys(2, 0).is_err());
    }
}
