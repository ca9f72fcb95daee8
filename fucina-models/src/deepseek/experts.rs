//! Routed experts read from the memory-mapped GGUF only when a token is routed to them.
//!
//! Each expert is three zero-copy [`QWeight`](fucina::quant::QWeight) views (gate, up, down) into the mapped
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

/// Where a model's routed experts live, chosen once at load ([`ExpertPlacement::choose`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpertPlacement {
    /// Every expert prepared at load in the layout the backend wants for this CPU
    /// ([`ModelFile::prepare`]: a copy in the interleaved rows of the repacked kernels where
    /// the CPU has them, the file's bytes where it does not): no budget was asked for and the
    /// experts fit in the memory available.
    Resident,
    /// Experts read from the file's pages where routed, in the file's layout: no budget was
    /// asked for, but the experts do not fit in the memory available, so a copy of them could
    /// not be held (the page cache can still drop and re-read mapped pages).
    Mapped,
    /// Experts read from the file's pages where routed, at most this many bytes of them kept
    /// resident (the streaming mode).
    Streamed(usize),
}

impl ExpertPlacement {
    /// The placement for `expert_bytes` bytes of routed experts under an optional byte
    /// `budget`: streamed under a budget; otherwise resident (repacked) when they fit in
    /// four fifths of `available` bytes (the rest is left to the other weights, the caches and
    /// the file's pages while they are copied; the pages of a copied expert are released),
    /// mapped when they do not or `available` is unknown.
    ///
    /// ```
    /// use fucina_models::deepseek::experts::ExpertPlacement;
    /// assert_eq!(ExpertPlacement::choose(Some(1 << 30), 8 << 30, Some(16 << 30)), ExpertPlacement::Streamed(1 << 30));
    /// assert_eq!(ExpertPlacement::choose(None, 6 << 30, Some(16 << 30)), ExpertPlacement::Resident);
    /// assert_eq!(ExpertPlacement::choose(None, 12 << 30, Some(16 << 30)), ExpertPlacement::Resident);
    /// assert_eq!(ExpertPlacement::choose(None, 14 << 30, Some(16 << 30)), ExpertPlacement::Mapped);
    /// assert_eq!(ExpertPlacement::choose(None, 1 << 20, None), ExpertPlacement::Mapped);
    /// ```
    #[must_use]
    pub fn choose(budget: Option<usize>, expert_bytes: usize, available: Option<usize>) -> ExpertPlacement {
        match (budget, available) {
            (Some(b), _) => ExpertPlacement::Streamed(b),
            (None, Some(avail)) if expert_bytes <= avail - avail / 5 => ExpertPlacement::Resident,
            (None, _) => ExpertPlacement::Mapped,
        }
    }
}

/// The experts resident across every layer, least recently used first, and the byte budget
/// they must fit: one per model, shared by its layers' stores.
pub struct ExpertBudget {
    file: Arc<GgufFile>,
    placement: ExpertPlacement,
    state: Mutex<Lru>,
}

/// File byte ranges (offset, length) of an expert's gate, up and down matrices.
type Ranges = [(usize, usize); 3];

struct Lru {
    /// (layer, expert, bytes, ranges) of resident experts, least recently used first.
    order: VecDeque<(usize, usize, usize, Ranges)>,
    bytes: usize,
    stats: ExpertStats,
}

impl ExpertBudget {
    /// The experts of `file`, placed as `placement` says (a byte budget when streamed).
    pub fn new(file: Arc<GgufFile>, placement: ExpertPlacement) -> Arc<ExpertBudget> {
        Arc::new(ExpertBudget {
            file,
            placement,
            state: Mutex::new(Lru { order: VecDeque::new(), bytes: 0, stats: ExpertStats::default() }),
        })
    }

    /// Marks expert `e` of `layer` used; releases least recently used experts (of any
    /// layer) until the resident ones fit the budget again.
    fn touch(&self, layer: usize, e: usize, bytes: usize, ranges: Ranges) {
        let Ok(mut l) = self.state.lock() else { return };
        l.stats.uses += 1;
        match l.order.iter().position(|x| x.0 == layer && x.1 == e) {
            Some(p) => {
                let entry = l.order.remove(p);
                if let Some(entry) = entry {
                    l.order.push_back(entry);
                }
            }
            None => {
                l.stats.loads += 1;
                l.bytes += bytes;
                l.order.push_back((layer, e, bytes, ranges));
            }
        }
        if let ExpertPlacement::Streamed(budget) = self.placement {
            while l.bytes > budget && l.order.len() > 1 {
                let Some((_, _, b, r)) = l.order.pop_front() else { break };
                l.bytes -= b;
                l.stats.evictions += 1;
                for (off, len) in r {
                    self.file.release(off, len);
                }
            }
        }
    }

    fn is_resident(&self, layer: usize, e: usize) -> bool {
        self.state.lock().map(|l| l.order.iter().any(|x| x.0 == layer && x.1 == e)).unwrap_or(true)
    }

    /// The counters so far (all layers).
    pub fn stats(&self) -> ExpertStats {
        self.state.lock().map(|l| l.stats).unwrap_or_default()
    }

    /// Whether a budget is set (the streaming mode).
    pub fn bounded(&self) -> bool {
        matches!(self.placement, ExpertPlacement::Streamed(_))
    }

    /// Where the experts live.
    pub fn placement(&self) -> ExpertPlacement {
        self.placement
    }
}

/// The routed experts of one layer.
pub struct ExpertStore {
    layer: usize,
    experts: Vec<Mlp>,
    /// File byte ranges of each expert (gate, up, down).
    ranges: Vec<Ranges>,
    size: Vec<usize>,
    budget: Arc<ExpertBudget>,
}

impl ExpertStore {
    /// The `n` experts of layer `layer` (`[n, ffn, hidden]` gate/up and `[n, hidden, ffn]`
    /// down), placed as the shared `budget` says: repacked now when
    /// [`ExpertPlacement::Resident`], views of the file's bytes otherwise.
    pub fn open(
        f: &ModelFile,
        layer: usize,
        n: usize,
        ffn: usize,
        hidden: usize,
        budget: Arc<ExpertBudget>,
    ) -> Result<ExpertStore> {
        let name = |w: &str| format!("blk.{layer}.ffn_{w}_exps.weight");
        let gates = f.matrices(&name("gate"), n, ffn, hidden)?;
        let ups = f.matrices(&name("up"), n, ffn, hidden)?;
        let downs = f.matrices(&name("down"), n, hidden, ffn)?;
        let base = f.gguf.bytes().as_ptr() as usize;
        let resident = budget.placement() == ExpertPlacement::Resident;
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
                if resident {
                    // A copy in this CPU's layout; the file's pages are released.
                    Ok(Mlp { gate: f.prepare(gate)?, up: f.prepare(up)?, down: f.prepare(down)? })
                } else {
                    Ok(Mlp { gate, up, down })
                }
            })
            .collect::<Result<_>>()?;
        Ok(ExpertStore { layer, experts, ranges, size, budget })
    }

    /// Whether a budget bounds the resident experts (the streaming mode).
    pub fn streaming(&self) -> bool {
        self.budget.bounded()
    }

    /// Where the experts live (shared by every layer's store).
    pub fn placement(&self) -> ExpertPlacement {
        self.budget.placement()
    }

    /// Number of experts.
    pub fn len(&self) -> usize {
        self.experts.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.experts.is_empty()
    }

    /// Expert `e`, marked as used (the budget may release others to make room).
    pub fn get(&self, e: usize) -> Result<&Mlp> {
        let mlp = self.experts.get(e).ok_or_else(|| FucinaError::OutOfRange {
            axis: "expert".into(),
            index: e,
            size: self.experts.len(),
        })?;
        self.budget.touch(self.layer, e, self.size[e], self.ranges[e]);
        Ok(mlp)
    }

    /// Starts reading expert `e`'s pages in the background (no effect if resident).
    pub fn prefetch(&self, e: usize) {
        if e < self.experts.len() && !self.budget.is_resident(self.layer, e) {
            for &(off, len) in &self.ranges[e] {
                self.budget.file.prefetch(off, len);
            }
        }
    }

    /// The shared budget's counters (all layers).
    pub fn stats(&self) -> ExpertStats {
        self.budget.stats()
    }

    /// Bytes of one expert.
    pub fn expert_bytes(&self) -> usize {
        self.size.first().copied().unwrap_or(0)
    }
}
