//! Routed experts read from the memory-mapped GGUF only when a token is routed to them.
//!
//! Each expert is three zero-copy [`QWeight`] views (gate, up, down) into the mapped
//! `ffn_*_exps` tensors: an expert no token picks is never touched, so its pages are never
//! read. With a byte budget, an LRU keeps the recently used experts resident and releases
//! the rest (`madvise(MADV_DONTNEED)` on their pages: the kernel may then drop them, and a
//! later use faults them back in from the file); [`ExpertStore::prefetch`] asks for the
//! pages of experts about to be used (`MADV_WILLNEED`, read-ahead in the background). This
//! is what lets a model whose file is larger than memory decode: only the working set of
//! experts has to fit.

use crate::llm::weights::ModelFile;
use crate::qwen3::model::Mlp;
use fucina::formats::gguf::GgufFile;
use fucina::prelude::*;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Counters of one store (or of all stores, summed by the caller).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExpertStats {
    /// Expert uses.
    pub uses: u64,
    /// Uses of an expert that was not resident (loaded from the map).
    pub loads: u64,
    /// Experts released to stay under the budget.
    pub evictions: u64,
}

struct Lru {
    /// Resident experts, least recently used first.
    order: VecDeque<usize>,
    resident: Vec<bool>,
    bytes: usize,
    stats: ExpertStats,
}

/// The routed experts of one layer.
pub struct ExpertStore {
    experts: Vec<Mlp>,
    /// File byte ranges of each expert (gate, up, down).
    ranges: Vec<[(usize, usize); 3]>,
    size: Vec<usize>,
    file: Arc<GgufFile>,
    budget: Option<usize>,
    lru: Mutex<Lru>,
}

impl ExpertStore {
    /// The `n` experts of layer `layer` (`[n, ffn, hidden]` gate/up and `[n, hidden, ffn]`
    /// down), with at most `budget` bytes of them kept resident (None: no limit, nothing is
    /// ever released).
    pub fn open(
        f: &ModelFile,
        layer: usize,
        n: usize,
        ffn: usize,
        hidden: usize,
        budget: Option<usize>,
    ) -> Result<ExpertStore> {
        let name = |w: &str| format!("blk.{layer}.ffn_{w}_exps.weight");
        let gates = f.matrices(&name("gate"), n, ffn, hidden)?;
        let ups = f.matrices(&name("up"), n, ffn, hidden)?;
        let downs = f.matrices(&name("down"), n, hidden, ffn)?;
        let base = f.gguf.bytes().as_ptr() as usize;
        let mut ranges = Vec::with_capacity(n);
        let mut size = Vec::with_capacity(n);
        let experts: Vec<Mlp> = gates
            .into_iter()
            .zip(ups)
            .zip(downs)
            .map(|((gate, up), down)| {
                let r = |q: &[u8]| (q.as_ptr() as usize - base, q.len());
                ranges.push([r(gate.bytes()), r(up.bytes()), r(down.bytes())]);
                size.push(gate.bytes().len() + up.bytes().len() + down.bytes().len());
                Mlp { gate, up, down }
            })
            .collect();
        Ok(ExpertStore {
            experts,
            ranges,
            size,
            file: f.gguf_shared(),
            budget,
            lru: Mutex::new(Lru {
                order: VecDeque::new(),
                resident: vec![false; n],
                bytes: 0,
                stats: ExpertStats::default(),
            }),
        })
    }

    /// Whether a budget bounds the resident experts (the streaming mode).
    pub fn streaming(&self) -> bool {
        self.budget.is_some()
    }

    /// Number of experts.
    pub fn len(&self) -> usize {
        self.experts.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.experts.is_empty()
    }

    /// Expert `e`, marked as used (and made to fit the budget by releasing the least
    /// recently used others).
    pub fn get(&self, e: usize) -> Result<&Mlp> {
        let mlp = self.experts.get(e).ok_or_else(|| FucinaError::OutOfRange {
            axis: "expert".into(),
            index: e,
            size: self.experts.len(),
        })?;
        let mut l =
            self.lru.lock().map_err(|_| FucinaError::InvalidArgument { op: "ExpertStore", msg: "poisoned".into() })?;
        l.stats.uses += 1;
        if l.resident[e] {
            if let Some(p) = l.order.iter().position(|&x| x == e) {
                l.order.remove(p);
            }
        } else {
            l.stats.loads += 1;
            l.resident[e] = true;
            l.bytes += self.size[e];
        }
        l.order.push_back(e);
        if let Some(budget) = self.budget {
            while l.bytes > budget && l.order.len() > 1 {
                let Some(old) = l.order.pop_front() else { break };
                l.resident[old] = false;
                l.bytes -= self.size[old];
                l.stats.evictions += 1;
                for &(off, len) in &self.ranges[old] {
                    self.file.release(off, len);
                }
            }
        }
        Ok(mlp)
    }

    /// Starts reading expert `e`'s pages in the background (no effect if resident).
    pub fn prefetch(&self, e: usize) {
        let resident = self.lru.lock().map(|l| l.resident.get(e).copied().unwrap_or(true)).unwrap_or(true);
        if !resident {
            for &(off, len) in &self.ranges[e] {
                self.file.prefetch(off, len);
            }
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> ExpertStats {
        self.lru.lock().map(|l| l.stats).unwrap_or_default()
    }

    /// Bytes of one expert.
    pub fn expert_bytes(&self) -> usize {
        self.size.first().copied().unwrap_or(0)
    }
}
