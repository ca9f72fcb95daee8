//! SentencePiece-style vocabularies as llama.cpp stores them (`tokenizer.ggml.model =
//! "llama"`: Llama 1/2, Mistral, and others): tokens with `▁` for spaces, a score each,
//! `<0xXX>` byte tokens for what no token covers. Encoding is SentencePiece's BPE: a space
//! before the text (`add_space_prefix`), spaces as `▁`, then adjacent symbols merged while
//! their concatenation is a token, the highest-scoring pair first (leftmost on ties), and
//! any symbol left that is not a token spelled in byte tokens.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

/// The SentencePiece part of a tokenizer.
#[derive(Debug, Clone)]
pub(crate) struct Spm {
    /// Mergeable tokens (normal and user-defined, not control, unknown or byte tokens):
    /// their text and id.
    pieces: HashMap<String, u32>,
    /// Each token's score (higher merges first).
    scores: Vec<f32>,
    /// The `<0xXX>` token of each byte.
    byte_tokens: [Option<u32>; 256],
    /// The unknown token, for a byte with no byte token.
    unknown: Option<u32>,
    /// A space goes before the text (SentencePiece's dummy prefix).
    pub add_space_prefix: bool,
}

/// One candidate merge: the pair starting at symbol `left` and its score.
#[derive(Debug, PartialEq)]
struct Bigram {
    score: f32,
    left: usize,
    len: usize,
}

impl Eq for Bigram {}

impl Ord for Bigram {
    /// Highest score first, then the leftmost.
    fn cmp(&self, o: &Self) -> Ordering {
        self.score.total_cmp(&o.score).then(o.left.cmp(&self.left))
    }
}

impl PartialOrd for Bigram {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

/// The text of a `<0xXX>` byte token, if `t` is one.
pub(crate) fn byte_token(t: &str) -> Option<u8> {
    let hex = t.strip_prefix("<0x")?.strip_suffix('>')?;
    (hex.len() == 2).then(|| u8::from_str_radix(hex, 16).ok()).flatten()
}

impl Spm {
    /// The encoder of `tokens` (with `types`: 1 normal, 2 unknown, 3 control, 4 user-defined,
    /// 6 byte; missing types read as normal) and their `scores`.
    pub(crate) fn new(tokens: &[&str], types: &[i64], scores: Vec<f32>, add_space_prefix: bool) -> Spm {
        let mut pieces = HashMap::with_capacity(tokens.len());
        let mut byte_tokens = [None; 256];
        let mut unknown = None;
        for (i, t) in tokens.iter().enumerate() {
            let id = i as u32;
            match types.get(i).copied().unwrap_or(1) {
                6 => {
                    if let Some(b) = byte_token(t) {
                        byte_tokens[b as usize].get_or_insert(id);
                    }
                }
                2 => {
                    unknown.get_or_insert(id);
                }
                3 => {}
                _ => {
                    pieces.entry(t.to_string()).or_insert(id);
                }
            }
        }
        Spm { pieces, scores, byte_tokens, unknown, add_space_prefix }
    }

    /// Encodes one fragment of text (no special tokens in it) onto `out`; `first` when it
    /// starts the text or follows a special token (where llama.cpp puts the space prefix).
    pub(crate) fn encode(&self, text: &str, first: bool, out: &mut Vec<u32>) {
        let mut s = String::with_capacity(text.len() + 3);
        if self.add_space_prefix && first {
            s.push('▁');
        }
        for c in text.chars() {
            s.push(if c == ' ' { '▁' } else { c });
        }
        if s.is_empty() {
            return;
        }
        // Symbols: the characters, as byte ranges in a linked list.
        let start: Vec<usize> = s.char_indices().map(|(i, _)| i).collect();
        let n = start.len();
        let mut len: Vec<usize> = (0..n).map(|i| start.get(i + 1).copied().unwrap_or(s.len()) - start[i]).collect();
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut heap = BinaryHeap::new();
        let bigram = |heap: &mut BinaryHeap<Bigram>, l: usize, r: usize, start: &[usize], len: &[usize]| {
            let piece = &s[start[l]..start[r] + len[r]];
            if let Some(&id) = self.pieces.get(piece) {
                let score = self.scores.get(id as usize).copied().unwrap_or(0.0);
                heap.push(Bigram { score, left: l, len: piece.len() });
            }
        };
        for i in 1..n {
            bigram(&mut heap, i - 1, i, &start, &len);
        }
        while let Some(b) = heap.pop() {
            let l = b.left;
            let r = next[l];
            // Stale: a side merged away or grew since the pair was queued.
            if len[l] == 0 || r >= n || len[r] == 0 || len[l] + len[r] != b.len {
                continue;
            }
            len[l] += len[r];
            len[r] = 0;
            next[l] = next[r];
            if next[r] < n {
                prev[next[r]] = l;
            }
            if prev[l] < n {
                bigram(&mut heap, prev[l], l, &start, &len);
            }
            if next[l] < n {
                bigram(&mut heap, l, next[l], &start, &len);
            }
        }
        let mut i = 0;
        while i < n {
            let piece = &s[start[i]..start[i] + len[i]];
            match self.pieces.get(piece) {
                Some(&id) => out.push(id),
                None => {
                    for b in piece.bytes() {
                        if let Some(id) = self.byte_tokens[b as usize].or(self.unknown) {
                            out.push(id);
                        }
                    }
                }
            }
            i = next[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_by_score_and_falls_back_to_bytes() {
        // "▁a", "ab" and "▁ab": "ab" scores higher than "▁a", so "▁" + "ab" then "▁ab".
        let tokens = ["<unk>", "<0x21>", "▁", "a", "b", "▁a", "ab", "▁ab"];
        let types = [2, 6, 1, 1, 1, 1, 1, 1];
        let scores = vec![0.0, 0.0, -1.0, -1.0, -1.0, -3.0, -2.0, -4.0];
        let spm = Spm::new(&tokens, &types, scores, true);
        let mut out = Vec::new();
        spm.encode("ab!", true, &mut out);
        assert_eq!(out, [7, 1], "▁ab, then ! as its byte token");
        out.clear();
        spm.encode("a b", false, &mut out);
        assert_eq!(out, [3, 2, 4], "no prefix; a space before b that does not merge");
        out.clear();
        spm.encode("é", false, &mut out);
        assert_eq!(out, [0, 0], "bytes without byte tokens are unknown");
        assert_eq!(byte_token("<0x0A>"), Some(10));
        assert_eq!(byte_token("<0x0>"), None);
    }
}
