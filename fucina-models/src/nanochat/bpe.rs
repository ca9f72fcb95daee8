//! Training a byte-level BPE vocabulary as nanochat does (its `rustbpe` trainer): split the
//! text with a regex, count the distinct pieces, start every piece from its raw bytes
//! (ids 0..256), and repeatedly merge the most frequent adjacent pair into a new id
//! (256, 257, ...). Ties go to the smaller pair `(left, right)`; a merge replaces the
//! pair's occurrences in each piece from left to right. Pair counts are kept incrementally,
//! with a lazily corrected max-heap, so each merge touches only the pieces that hold the pair.

use fucina::{FucinaError, Result};
use std::collections::{BinaryHeap, HashMap, HashSet};

pub use crate::llm::tokenizer::NANOCHAT_PATTERN;

/// The most merges a training run may ask for.
pub const MAX_MERGES: usize = 1 << 20;

/// A trained vocabulary: the bytes of each id (256 single bytes, then one entry per merge)
/// and the merges in the order they were learned.
#[derive(Debug, Clone, PartialEq)]
pub struct Bpe {
    /// The split pattern the pieces were cut with.
    pub pattern: String,
    /// `(left, right)` of merge `i`, which made id `256 + i`.
    pub merges: Vec<(u32, u32)>,
    /// The bytes of every id.
    pub token_bytes: Vec<Vec<u8>>,
}

/// Pair counts of one piece.
fn pairs_of(w: &[u32]) -> impl Iterator<Item = (u32, u32)> + '_ {
    w.windows(2).map(|p| (p[0], p[1]))
}

/// Replaces the occurrences of `pair` in `w`, left to right, by `id`.
fn merge_in(w: &[u32], pair: (u32, u32), id: u32) -> Vec<u32> {
    let mut out = Vec::with_capacity(w.len());
    let mut i = 0;
    while i < w.len() {
        if i + 1 < w.len() && (w[i], w[i + 1]) == pair {
            out.push(id);
            i += 2;
        } else {
            out.push(w[i]);
            i += 1;
        }
    }
    out
}

/// Trains on `texts` until the vocabulary has `vocab_size` ids (256 bytes plus merges) or no
/// pair occurs any more. `progress(merges_done, total)` is called every 256 merges.
pub fn train<'a>(
    texts: impl IntoIterator<Item = &'a str>,
    vocab_size: usize,
    pattern: &str,
    mut progress: impl FnMut(usize, usize),
) -> Result<Bpe> {
    let bad = |msg: String| FucinaError::InvalidArgument { op: "bpe::train", msg };
    if vocab_size < 256 || vocab_size - 256 > MAX_MERGES {
        return Err(bad(format!("vocabulary of {vocab_size}: need 256 to {} ids", 256 + MAX_MERGES)));
    }
    let re = fancy_regex::Regex::new(pattern).map_err(|e| bad(format!("split pattern: {e}")))?;
    let mut counts: HashMap<&str, u64> = HashMap::new();
    for text in texts {
        for m in re.find_iter(text) {
            let m = m.map_err(|e| bad(format!("split pattern on the corpus: {e}")))?;
            *counts.entry(m.as_str()).or_default() += 1;
        }
    }
    // Pieces in a fixed order (the counts do not depend on it; the heap's ties are by pair).
    let mut pieces: Vec<(&str, u64)> = counts.into_iter().collect();
    pieces.sort_unstable();
    let mut words: Vec<Vec<u32>> = pieces.iter().map(|(s, _)| s.bytes().map(u32::from).collect()).collect();
    let weights: Vec<u64> = pieces.iter().map(|p| p.1).collect();
    let mut pair_count: HashMap<(u32, u32), u64> = HashMap::new();
    let mut holders: HashMap<(u32, u32), HashSet<usize>> = HashMap::new();
    for (i, w) in words.iter().enumerate() {
        for p in pairs_of(w) {
            *pair_count.entry(p).or_default() += weights[i];
            holders.entry(p).or_default().insert(i);
        }
    }
    // Max count first; among equal counts the smaller pair (`Reverse`).
    let mut heap: BinaryHeap<(u64, std::cmp::Reverse<(u32, u32)>)> =
        pair_count.iter().map(|(p, c)| (*c, std::cmp::Reverse(*p))).collect();
    let mut token_bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    let mut merges = Vec::new();
    let total = vocab_size - 256;
    while merges.len() < total {
        let Some((count, std::cmp::Reverse(pair))) = heap.pop() else { break };
        let now = pair_count.get(&pair).copied().unwrap_or(0);
        if now != count {
            if now > 0 {
                heap.push((now, std::cmp::Reverse(pair)));
            }
            continue;
        }
        if count == 0 {
            break;
        }
        let id = u32::try_from(256 + merges.len()).map_err(|_| bad("too many merges".into()))?;
        let mut touched: Vec<usize> = holders.remove(&pair).unwrap_or_default().into_iter().collect();
        touched.sort_unstable();
        let mut grown: HashSet<(u32, u32)> = HashSet::new();
        for i in touched {
            let before = &words[i];
            let after = merge_in(before, pair, id);
            if after.len() == before.len() {
                continue;
            }
            let wt = weights[i];
            for p in pairs_of(before) {
                if let Some(c) = pair_count.get_mut(&p) {
                    *c = c.saturating_sub(wt);
                }
            }
            for p in pairs_of(&after) {
                *pair_count.entry(p).or_default() += wt;
                if p.0 == id || p.1 == id {
                    grown.insert(p);
                }
                holders.entry(p).or_default().insert(i);
            }
            words[i] = after;
        }
        pair_count.remove(&pair);
        let mut grown: Vec<_> = grown.into_iter().collect();
        grown.sort_unstable();
        for p in grown {
            if let Some(&c) = pair_count.get(&p) {
                if c > 0 {
                    heap.push((c, std::cmp::Reverse(p)));
                }
            }
        }
        let mut bytes = token_bytes[pair.0 as usize].clone();
        bytes.extend_from_slice(&token_bytes[pair.1 as usize]);
        token_bytes.push(bytes);
        merges.push(pair);
        if merges.len().is_multiple_of(256) {
            progress(merges.len(), total);
        }
    }
    Ok(Bpe { pattern: pattern.to_string(), merges, token_bytes })
}

impl Bpe {
    /// Rebuilds a vocabulary from its merges (as saved), checking that each merge joins ids
    /// that exist before it.
    pub fn from_merges(pattern: &str, merges: Vec<(u32, u32)>) -> Result<Bpe> {
        if merges.len() > MAX_MERGES {
            return Err(FucinaError::InvalidArgument {
                op: "Bpe::from_merges",
                msg: format!("{} merges", merges.len()),
            });
        }
        let mut token_bytes: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
        for (i, &(l, r)) in merges.iter().enumerate() {
            let n = token_bytes.len();
            let (Some(a), Some(b)) = (token_bytes.get(l as usize), token_bytes.get(r as usize)) else {
                return Err(FucinaError::InvalidArgument {
                    op: "Bpe::from_merges",
                    msg: format!("merge {i} joins ({l}, {r}) but only {n} ids exist before it"),
                });
            };
            let joined = [a.as_slice(), b.as_slice()].concat();
            token_bytes.push(joined);
        }
        fancy_regex::Regex::new(pattern)
            .map_err(|e| FucinaError::InvalidArgument { op: "Bpe::from_merges", msg: format!("split pattern: {e}") })?;
        Ok(Bpe { pattern: pattern.to_string(), merges, token_bytes })
    }

    /// An encoder for the learned merges (lowest merge first in each piece), without special
    /// tokens: the reference encoding for the trained ranks.
    pub fn encoder(&self) -> Result<Encoder> {
        let re = fancy_regex::Regex::new(&self.pattern)
            .map_err(|e| FucinaError::InvalidArgument { op: "Bpe::encoder", msg: format!("split pattern: {e}") })?;
        let rank = self.merges.iter().enumerate().map(|(i, p)| (*p, 256 + i as u32)).collect();
        Ok(Encoder { re, rank, cache: HashMap::new() })
    }

    /// Encodes `text` (see [`Bpe::encoder`]).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.encoder()?.encode(text)
    }

    /// Ids in the vocabulary: bytes and merges.
    pub fn len(&self) -> usize {
        self.token_bytes.len()
    }

    /// Whether there are no ids (never: the 256 bytes are always there).
    pub fn is_empty(&self) -> bool {
        self.token_bytes.is_empty()
    }
}

/// Encodes text with a trained [`Bpe`], remembering each piece's ids.
pub struct Encoder {
    re: fancy_regex::Regex,
    rank: HashMap<(u32, u32), u32>,
    cache: HashMap<String, Vec<u32>>,
}

impl Encoder {
    /// The ids of `text`.
    pub fn encode(&mut self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        for m in self.re.find_iter(text) {
            let m =
                m.map_err(|e| FucinaError::InvalidArgument { op: "Bpe::encode", msg: format!("split pattern: {e}") })?;
            if let Some(ids) = self.cache.get(m.as_str()) {
                out.extend_from_slice(ids);
                continue;
            }
            let mut w: Vec<u32> = m.as_str().bytes().map(u32::from).collect();
            while let Some((id, pair)) = pairs_of(&w).filter_map(|p| self.rank.get(&p).map(|r| (*r, p))).min() {
                w = merge_in(&w, pair, id);
            }
            out.extend_from_slice(&w);
            self.cache.insert(m.as_str().to_string(), w);
        }
        Ok(out)
    }
}
