//! A preallocated key/value cache: per layer, one buffer of `[kv_head, capacity, head_dim]`
//! for keys and one for values, in f32 or f16. Appending writes in place; attention reads
//! zero-copy views of the filled prefix.

use fucina::prelude::*;
use fucina::storage::{alloc, Buffer, Storage};
use fucina::tensor::{Layout, RawTensor};
use half::f16;
use std::sync::Arc;

/// One layer's cache of one kind (keys or values).
#[derive(Debug)]
struct Slab {
    storage: Arc<Storage>,
}

/// Keys and values for every layer, for up to `capacity` positions.
#[derive(Debug)]
pub struct KvCache {
    keys: Vec<Slab>,
    values: Vec<Slab>,
    heads: usize,
    capacity: usize,
    key_dim: usize,
    value_dim: usize,
    len: usize,
    dtype: DType,
}

impl KvCache {
    /// A cache for `layers` layers of `heads` heads, `key_dim`/`value_dim` wide, holding up
    /// to `capacity` positions in `dtype` (F32 or F16). The memory is taken up front.
    pub fn new(
        layers: usize,
        heads: usize,
        key_dim: usize,
        value_dim: usize,
        capacity: usize,
        dtype: DType,
    ) -> Result<KvCache> {
        // The whole cache is checked against the memory the machine has before any of it is
        // taken, so `--ctx 100000000` is an error that says what it needs, not an abort.
        let elem = dtype.size_in_bytes();
        let per_layer = heads.checked_mul(capacity).and_then(|x| x.checked_mul(key_dim.checked_add(value_dim)?));
        let total = per_layer.and_then(|x| x.checked_mul(layers)).and_then(|x| x.checked_mul(elem));
        let what = format!("a KV cache of {capacity} positions ({layers} layers, {heads} heads)");
        let total =
            total.ok_or_else(|| FucinaError::OutOfMemory { what: what.clone(), bytes: usize::MAX, available: 0 })?;
        alloc::check_available(&what, total)?;
        let slab = |dim: usize| -> Result<Slab> {
            let n = heads * capacity * dim; // bounded by `total` above
            let buf = match dtype {
                DType::F32 => Buffer::F32(alloc::try_vec(&what, n, 0.0)?),
                DType::F16 => Buffer::F16(alloc::try_vec(&what, n, f16::ZERO)?),
                other => return Err(FucinaError::UnsupportedDType { op: "KvCache", dtype: other }),
            };
            Ok(Slab { storage: Arc::new(Storage::new(buf)) })
        };
        Ok(KvCache {
            keys: (0..layers).map(|_| slab(key_dim)).collect::<Result<_>>()?,
            values: (0..layers).map(|_| slab(value_dim)).collect::<Result<_>>()?,
            heads,
            capacity,
            key_dim,
            value_dim,
            len: 0,
            dtype,
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

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Forgets every position (the memory is kept).
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Drops positions from `len` on (e.g. to reuse a shared prompt prefix).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
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
        let (heads, cap, at) = (self.heads, self.capacity, self.len);
        let (kd, vd) = (self.key_dim, self.value_dim);
        let n = k.size::<seq>();
        self.check_room(n)?;
        check_shape("keys", k.shape(), &[heads, n, kd])?;
        check_shape("values", v.shape(), &[heads, n, vd])?;
        for (slab, t, dim) in [(&mut self.keys[layer], k, kd), (&mut self.values[layer], v, vd)] {
            let data = t.to_f32_vec();
            let store = Arc::get_mut(&mut slab.storage).ok_or_else(|| FucinaError::InvalidArgument {
                op: "KvCache::write",
                msg: "a view of the cache is still alive".into(),
            })?;
            for h in 0..heads {
                let src = &data[h * n * dim..(h + 1) * n * dim];
                let dst = (h * cap + at) * dim;
                match store.buffer_mut() {
                    Buffer::F32(b) => b[dst..dst + n * dim].copy_from_slice(src),
                    Buffer::F16(b) => {
                        for (o, x) in b[dst..dst + n * dim].iter_mut().zip(src) {
                            *o = f16::from_f32(*x);
                        }
                    }
                    _ => unreachable!("the cache is built as F32 or F16"),
                }
            }
        }
        Ok(())
    }

    /// Writes only keys (a cache built with `value_dim` 0, such as a latent cache where the
    /// values are a prefix of each key row).
    pub fn write_keys(&mut self, layer: usize, k: &Tensor<axes![kv_head, seq, head_dim]>) -> Result<()> {
        let n = k.size::<seq>();
        let empty = Tensor::<axes![kv_head, seq, head_dim]>::from_vec(Vec::<f32>::new(), &[self.heads, n, 0])?;
        if self.value_dim != 0 {
            return Err(FucinaError::InvalidArgument {
                op: "KvCache::write_keys",
                msg: format!("this cache also stores values ({} wide)", self.value_dim),
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
    /// [`KvCache::write`] but not yet committed), as a zero-copy view.
    pub fn keys(&self, layer: usize, extra: usize) -> Result<Tensor<axes![kv_head, kv_seq, head_dim]>> {
        self.view(&self.keys[layer], self.key_dim, extra)
    }

    /// Values of `layer`, as [`KvCache::keys`].
    pub fn values(&self, layer: usize, extra: usize) -> Result<Tensor<axes![kv_head, kv_seq, head_dim]>> {
        self.view(&self.values[layer], self.value_dim, extra)
    }

    fn view(&self, slab: &Slab, dim: usize, extra: usize) -> Result<Tensor<axes![kv_head, kv_seq, head_dim]>> {
        let n = self.len + extra;
        if n > self.capacity {
            return Err(FucinaError::OutOfRange { axis: "kv_seq".into(), index: n, size: self.capacity });
        }
        let layout = Layout::from_parts(vec![self.heads, n, dim], vec![self.capacity * dim, dim, 1], 0);
        Tensor::from_raw(RawTensor::from_storage(slab.storage.clone(), layout)?)
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
        for dtype in [DType::F32, DType::F16] {
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
}
