//! Tokenizers built from GGUF metadata: SentencePiece-style vocabularies
//! (`tokenizer.ggml.model = "llama"`, `llm/spm.rs`) and byte-level BPE (`"gpt2"`):
//! special tokens split out first, then the pre-tokenizer named by `tokenizer.ggml.pre`
//! (Qwen2's: NFC and one split regex; Llama 3's: one split regex, digits in runs of up to
//! three; DeepSeek-V3's: three split regexes in sequence), GPT-2's
//! byte-to-unicode mapping and rank-ordered merges — HF `tokenizers`' pipelines, checked token
//! for token against it.

use super::chat::{Piece, Prompt};
use aho_corasick::{AhoCorasick, MatchKind};
use fucina::formats::gguf::{Array, GgufHeader, Value};
use fucina::{FucinaError, Result};
use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use unicode_normalization::UnicodeNormalization;

/// Qwen2's pre-tokenizer split pattern (the same string as in its `tokenizer.json`).
pub const QWEN2_PATTERN: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Qwen3.5's pre-tokenizer split pattern (llama.cpp's `qwen35`): Qwen2's, with combining
/// marks (`\p{M}`) counted as letters, after NFC.
pub const QWEN35_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Llama 3's pre-tokenizer split pattern (llama.cpp's `llama-bpe`): Qwen2's, with digits in
/// runs of up to three, and no normalizer.
pub const LLAMA3_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// nanochat's split pattern (GPT-4's, with digits in runs of up to two; possessive
/// quantifiers as nanochat writes them).
pub const NANOCHAT_PATTERN: &str =
    r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+";

/// DeepSeek-V3's pre-tokenizer: three splits applied in sequence, each to every piece the
/// previous one left (digits in runs of up to three, CJK runs, then words and punctuation).
pub const DEEPSEEK_V3_PATTERNS: [&str; 3] = [
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
];

/// A byte-level BPE vocabulary with merges and special tokens.
pub struct Tokenizer {
    /// Each token's bytes (byte-level characters mapped back to raw bytes).
    bytes: Vec<Vec<u8>>,
    /// Token id by its byte-level string.
    by_str: HashMap<String, u32>,
    /// `(left, right) -> (rank, merged)`.
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// Control (type 3) and user-defined (type 4) tokens, matched leftmost-longest in
    /// text whose control tokens are parsed ([`Tokenizer::encode`]); empty ones are left out.
    specials: Option<Specials>,
    /// User-defined tokens only: matched in every text, as llama.cpp does.
    user_defined: Option<Specials>,
    /// The token of each byte's byte-level character.
    byte_id: [Option<u32>; 256],
    /// Which ids are control tokens (type 3): text never produces them.
    control: Vec<bool>,
    /// Pre-tokenizer splits, applied in order ("isolated": matches and the text between them
    /// both become pieces).
    splits: Vec<fancy_regex::Regex>,
    /// NFC-normalize before splitting (Qwen2).
    nfc: bool,
    /// A pre-token that is itself a (non-control) token is that token, whatever the merges
    /// would make of it (llama.cpp's `ignore_merges`, HF's `BPE.ignore_merges`: Llama 3,
    /// GLM-4.5).
    /// Holds the byte-level character of each byte (to spell a pre-token as a vocabulary
    /// entry) exactly when merges are ignored.
    ignore_merges: Option<[char; 256]>,
    /// A SentencePiece vocabulary's encoder (instead of the byte-level BPE).
    spm: Option<super::spm::Spm>,
    /// Gemma 4's BPE (`tokenizer.ggml.model = "gemma4"`): spaces become `▁`, the merges run
    /// over UTF-8 characters (not GPT-2's byte characters) of each line and each run of
    /// newlines, and a character outside the vocabulary falls back to `<0xXX>` byte tokens.
    chars: bool,
    /// The BOS token a raw completion prompt starts with (`tokenizer.ggml.add_bos_token`).
    bos: Option<u32>,
}

/// A symbol outside the vocabulary in [`Tokenizer::merge`] (no merge takes it).
const UNKNOWN: u32 = u32::MAX;

fn bad(msg: String) -> FucinaError {
    FucinaError::InvalidArgument { op: "tokenizer", msg }
}

/// GPT-2's reversible byte -> printable character table (how a byte-level vocabulary spells
/// bytes in GGUF and `tokenizer.json`).
pub fn byte_chars() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..256u32 {
        let printable = (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
        let c = if printable {
            b
        } else {
            next += 1;
            next - 1
        };
        table[b as usize] = char::from_u32(c).unwrap_or('\0');
    }
    table
}

/// A set of literal tokens found by one automaton (leftmost, longest on ties).
struct Specials {
    automaton: AhoCorasick,
    ids: Vec<u32>,
}

impl Specials {
    fn new(tokens: Vec<(String, u32)>) -> Result<Option<Specials>> {
        if tokens.is_empty() {
            return Ok(None);
        }
        let automaton = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(tokens.iter().map(|t| t.0.as_str()))
            .map_err(|e| bad(format!("special tokens: {e}")))?;
        Ok(Some(Specials { automaton, ids: tokens.into_iter().map(|t| t.1).collect() }))
    }
}

fn string_array<'a>(h: &'a GgufHeader, key: &str) -> Result<Vec<&'a str>> {
    match h.get(key) {
        Some(Value::Array(Array::String(items))) => items
            .iter()
            .enumerate()
            .map(|(i, v)| std::str::from_utf8(v).map_err(|_| bad(format!("{key}[{i}] is not a UTF-8 string"))))
            .collect(),
        Some(_) => Err(bad(format!("{key} is not an array of strings"))),
        None => Err(bad(format!("the GGUF has no {key}"))),
    }
}

impl Tokenizer {
    /// Builds the tokenizer from `tokenizer.ggml.{model,tokens,merges,token_type}`.
    pub fn from_gguf(h: &GgufHeader) -> Result<Tokenizer> {
        let (spm, chars) = match h.get("tokenizer.ggml.model").and_then(|v| v.as_str()) {
            Some("gpt2") => (false, false),
            Some("llama") => (true, false),
            Some("gemma4") => (false, true),
            Some(other) => {
                return Err(bad(format!(
                    "tokenizer model `{other}` is not supported (gpt2 byte-level BPE, llama SentencePiece and gemma4 BPE are)"
                )))
            }
            None => return Err(bad("the GGUF has no tokenizer.ggml.model".into())),
        };
        let tokens = string_array(h, "tokenizer.ggml.tokens")?;
        let merges = if spm { Vec::new() } else { string_array(h, "tokenizer.ggml.merges")? };
        if tokens.len() > u32::MAX as usize {
            return Err(bad(format!("{} tokens do not fit 32-bit ids", tokens.len())));
        }
        let types: Vec<i64> = match h.get("tokenizer.ggml.token_type") {
            Some(Value::Array(a)) => {
                a.to_i64s().ok_or_else(|| bad("tokenizer.ggml.token_type is not an array of integers".into()))?
            }
            Some(_) => return Err(bad("tokenizer.ggml.token_type is not an array".into())),
            None => Vec::new(),
        };
        if !types.is_empty() && types.len() != tokens.len() {
            return Err(bad(format!("{} token types for {} tokens", types.len(), tokens.len())));
        }
        let byte_char = byte_chars();
        let mut char_byte = HashMap::new();
        for (b, c) in byte_char.iter().enumerate() {
            char_byte.insert(*c, b as u8);
        }
        let mut by_str = HashMap::with_capacity(tokens.len());
        let mut bytes = Vec::with_capacity(tokens.len());
        let (mut specials, mut user_defined) = (Vec::new(), Vec::new());
        let mut control = vec![false; tokens.len()];
        for (i, t) in tokens.iter().enumerate() {
            // The first of duplicate strings keeps the id, as HF's vocabulary map does.
            by_str.entry(t.to_string()).or_insert(i as u32);
            // Control (3) and user-defined (4) tokens are matched literally in the text (an
            // empty one cannot be matched: it would match everywhere and consume nothing).
            match types.get(i) {
                Some(t3 @ (3 | 4)) => {
                    control[i] = *t3 == 3;
                    if !t.is_empty() {
                        specials.push((t.to_string(), i as u32));
                        if *t3 == 4 {
                            user_defined.push((t.to_string(), i as u32));
                        }
                    }
                    bytes.push(t.as_bytes().to_vec());
                }
                // SentencePiece and Gemma 4: `▁` is a space, `<0xXX>` a byte.
                Some(6) if spm || chars => {
                    bytes.push(super::spm::byte_token(t).map_or_else(|| t.as_bytes().to_vec(), |b| vec![b]))
                }
                _ if spm || chars => bytes.push(t.replace('▁', " ").into_bytes()),
                _ => bytes.push(t.chars().map(|c| char_byte.get(&c).copied().unwrap_or(b'?')).collect()),
            }
        }
        let mut byte_id = [None; 256];
        for (b, c) in byte_char.iter().enumerate() {
            byte_id[b] = by_str.get(&c.to_string()).copied();
        }
        let mut merge_map = HashMap::with_capacity(merges.len());
        for (rank, m) in merges.iter().enumerate() {
            let (a, b) = m.split_once(' ').ok_or_else(|| bad(format!("merge {rank} `{m}` has no space")))?;
            let id =
                |s: &str| by_str.get(s).copied().ok_or_else(|| bad(format!("merge {rank} uses unknown token `{s}`")));
            let merged = by_str
                .get(&format!("{a}{b}"))
                .copied()
                .ok_or_else(|| bad(format!("merge {rank} makes `{a}{b}`, which is not in the vocabulary")))?;
            merge_map.entry((id(a)?, id(b)?)).or_insert((rank as u32, merged));
        }
        let spm = if spm {
            let scores = match h.get("tokenizer.ggml.scores") {
                Some(Value::Array(a)) => {
                    a.to_f32s().ok_or_else(|| bad("tokenizer.ggml.scores is not numbers".into()))?
                }
                Some(_) => return Err(bad("tokenizer.ggml.scores is not an array".into())),
                None => Vec::new(),
            };
            if !scores.is_empty() && scores.len() != tokens.len() {
                return Err(bad(format!("{} scores for {} tokens", scores.len(), tokens.len())));
            }
            let prefix = !matches!(h.get("tokenizer.ggml.add_space_prefix"), Some(Value::Bool(false)));
            Some(super::spm::Spm::new(&tokens, &types, scores, prefix))
        } else {
            None
        };
        let pre = h.get("tokenizer.ggml.pre").and_then(|v| v.as_str()).unwrap_or("qwen2");
        let (patterns, nfc, ignore_merges): (Vec<&str>, bool, bool) = match pre {
            // A SentencePiece vocabulary has no pre-tokenizer.
            _ if spm.is_some() => (Vec::new(), false, false),
            // Gemma 4: lines and newline runs (the merges never cross a line end).
            _ if chars => (vec![r"[^\n]+|[\n]+"], false, false),
            "qwen2" | "default" => (vec![QWEN2_PATTERN], true, false),
            "qwen35" => (vec![QWEN35_PATTERN], true, false),
            "deepseek-v3" => (DEEPSEEK_V3_PATTERNS.to_vec(), false, false),
            "nanochat" => (vec![NANOCHAT_PATTERN], false, false),
            // Llama 3 and the families llama.cpp files under the same split.
            "llama-bpe" | "llama3" | "llama-v3" => (vec![LLAMA3_PATTERN], false, true),
            "smaug-bpe" => (vec![LLAMA3_PATTERN], false, false),
            // GLM-4 and GLM-4.5: Llama 3's split (llama.cpp's `chatglm4` pre-tokenizer).
            "glm4" | "chatglm-bpe" => (vec![LLAMA3_PATTERN], false, pre == "glm4"),
            other => {
                return Err(bad(format!(
                    "pre-tokenizer `{other}` is not supported (qwen2, qwen35, llama-bpe, glm4, deepseek-v3 and nanochat are)"
                )));
            }
        };
        let bos_by_default = spm.is_some() || chars || matches!(pre, "llama-bpe" | "llama3" | "llama-v3");
        let splits = patterns
            .into_iter()
            .map(|p| fancy_regex::Regex::new(p).map_err(|e| bad(format!("split pattern: {e}"))))
            .collect::<Result<Vec<_>>>()?;
        Ok(Tokenizer {
            bytes,
            by_str,
            merges: merge_map,
            specials: Specials::new(specials)?,
            user_defined: Specials::new(user_defined)?,
            byte_id,
            control,
            splits,
            nfc,
            ignore_merges: ignore_merges.then(byte_chars),
            spm,
            chars,
            // The file's `add_bos_token`; where it has none, llama.cpp's default for the
            // vocabulary: SentencePiece and Llama 3's pre-tokenizer add BOS, the rest do not.
            bos: match (h.get("tokenizer.ggml.add_bos_token"), h.get("tokenizer.ggml.bos_token_id")) {
                (Some(Value::Bool(true)), Some(id)) => {
                    id.as_u64().filter(|&i| i < tokens.len() as u64).map(|i| i as u32)
                }
                (None, Some(id)) if bos_by_default => {
                    id.as_u64().filter(|&i| i < tokens.len() as u64).map(|i| i as u32)
                }
                _ => None,
            },
        })
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.bytes.len()
    }

    /// The id of a token given by its exact text (special tokens included).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.by_str.get(token).copied()
    }

    /// Encodes `text`; control and user-defined tokens in it become their ids (HF
    /// `tokenizers`' default, llama.cpp's `parse_special = true`). For text from a user,
    /// use [`Tokenizer::encode_literal`] or [`Tokenizer::encode_prompt`].
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        self.encode_with(text, self.specials.as_ref(), &mut out)?;
        Ok(out)
    }

    /// Encodes a raw completion prompt as llama.cpp does: [`Tokenizer::encode`], after the
    /// BOS token when the file says to add one (`tokenizer.ggml.add_bos_token`, as Llama's
    /// and DeepSeek's do) and the text does not start with it already.
    pub fn encode_completion(&self, text: &str) -> Result<Vec<u32>> {
        let ids = self.encode(text)?;
        Ok(match self.bos {
            Some(b) if ids.first() != Some(&b) => std::iter::once(b).chain(ids).collect(),
            _ => ids,
        })
    }

    /// Encodes `text` with no control token parsed: `<|im_end|>` typed by a user is text.
    /// User-defined tokens (type 4) still match, as in llama.cpp.
    pub fn encode_literal(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        self.encode_with(text, self.user_defined.as_ref(), &mut out)?;
        Ok(out)
    }

    /// Encodes a rendered chat prompt: the template's control tokens by id, the text
    /// between them as [`Tokenizer::encode_literal`]. A control token the vocabulary lacks
    /// is encoded as literal text.
    pub fn encode_prompt(&self, prompt: &Prompt) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        for p in &prompt.pieces {
            match p {
                Piece::Control(t) => match self.token_id(t) {
                    Some(id) => out.push(id),
                    None => self.encode_with(t, self.user_defined.as_ref(), &mut out)?,
                },
                Piece::Text(t) => self.encode_with(t, self.user_defined.as_ref(), &mut out)?,
            }
        }
        Ok(out)
    }

    fn encode_with(&self, text: &str, specials: Option<&Specials>, out: &mut Vec<u32>) -> Result<()> {
        let Some(sp) = specials else {
            return self.encode_plain(text, out);
        };
        let mut last = 0;
        for m in sp.automaton.find_iter(text) {
            self.encode_plain(&text[last..m.start()], out)?;
            out.push(sp.ids[m.pattern().as_usize()]);
            last = m.end();
        }
        self.encode_plain(&text[last..], out)
    }

    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        if let Some(spm) = &self.spm {
            // Every fragment starts the text or follows a special token: llama.cpp puts the
            // space prefix before each.
            spm.encode(text, true, out);
            return Ok(());
        }
        let text: String = if self.chars {
            text.replace(' ', "▁")
        } else if self.nfc {
            text.nfc().collect()
        } else {
            text.to_string()
        };
        let mut pieces: Vec<&str> = vec![&text];
        for re in &self.splits {
            let mut next = Vec::with_capacity(pieces.len() * 2);
            for piece in pieces {
                let mut last = 0;
                for m in re.find_iter(piece) {
                    let m = m.map_err(|e| bad(format!("split failed: {e}")))?;
                    if m.start() > last {
                        next.push(&piece[last..m.start()]);
                    }
                    if !m.as_str().is_empty() {
                        next.push(m.as_str());
                    }
                    last = m.end();
                }
                if last < piece.len() {
                    next.push(&piece[last..]);
                }
            }
            pieces = next;
        }
        for p in pieces {
            if self.chars {
                self.bpe_chars(p, out);
                continue;
            }
            if let Some(chars) = &self.ignore_merges {
                let whole: String = p.bytes().map(|b| chars[b as usize]).collect();
                if let Some(&id) = self.by_str.get(&whole).filter(|&&id| !self.is_control(id)) {
                    out.push(id);
                    continue;
                }
            }
            self.bpe(p, out)?;
        }
        Ok(())
    }

    /// Merges one pre-token: always the lowest-ranked adjacent pair, leftmost first. The
    /// candidate pairs sit in a min-heap keyed by (rank, position) over a linked list of
    /// symbols, so a pre-token of n bytes costs O(n log n), not the O(n^2) of rescanning
    /// (100k spaces or a 120 KB word encode in milliseconds).
    fn bpe(&self, piece: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut id = Vec::with_capacity(piece.len());
        for b in piece.bytes() {
            id.push(self.byte_id[b as usize].ok_or_else(|| bad(format!("byte {b:#04x} has no token")))?);
        }
        out.extend(self.merge(id).into_iter().map(|(_, t)| t));
        Ok(())
    }

    /// Gemma 4's merges over the characters of one line (or newline run): a newline run
    /// that is itself a token is that token (as llama.cpp does); a character outside the
    /// vocabulary (which no merge can take) becomes its bytes' `<0xXX>` tokens, and is
    /// dropped, as by llama.cpp, when the vocabulary has no token for a byte.
    fn bpe_chars(&self, piece: &str, out: &mut Vec<u32>) {
        if piece.bytes().all(|b| b == b'\n') {
            if let Some(&t) = self.by_str.get(piece) {
                out.push(t);
                return;
            }
        }
        let chars: Vec<&str> = piece.char_indices().map(|(i, c)| &piece[i..i + c.len_utf8()]).collect();
        let id = chars.iter().map(|c| self.by_str.get(*c).copied().unwrap_or(UNKNOWN)).collect();
        for (at, t) in self.merge(id) {
            if t != UNKNOWN {
                out.push(t);
                continue;
            }
            for b in chars[at].bytes() {
                if let Some(&t) = self.by_str.get(&format!("<0x{b:02X}>")) {
                    out.push(t);
                }
            }
        }
    }

    /// Applies the merges to the symbols `id` (a symbol [`UNKNOWN`] to the vocabulary takes
    /// part in none) and returns the final symbols with the index of the first initial
    /// symbol each covers.
    fn merge(&self, mut id: Vec<u32>) -> Vec<(usize, u32)> {
        let n = id.len();
        if n < 2 {
            return id.into_iter().enumerate().collect();
        }
        // Doubly linked list over positions; `alive[i]` false once merged into its left.
        let mut next: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut alive = vec![true; n];
        let mut heap = BinaryHeap::new();
        let push = |heap: &mut BinaryHeap<_>, i: usize, j: usize, id: &[u32]| {
            if let Some(&(rank, merged)) = self.merges.get(&(id[i], id[j])) {
                heap.push(Reverse((rank, i, id[i], id[j], merged)));
            }
        };
        for i in 0..n - 1 {
            push(&mut heap, i, i + 1, &id);
        }
        while let Some(Reverse((_, i, left, right, merged))) = heap.pop() {
            // Skip stale entries: a side merged away or changed since the pair was queued.
            if !alive[i] || id[i] != left {
                continue;
            }
            let j = next[i];
            if j >= n || id[j] != right {
                continue;
            }
            id[i] = merged;
            alive[j] = false;
            next[i] = next[j];
            if next[j] < n {
                prev[next[j]] = i;
            }
            if prev[i] < n {
                push(&mut heap, prev[i], i, &id);
            }
            if next[i] < n {
                push(&mut heap, i, next[i], &id);
            }
        }
        let mut symbols = Vec::new();
        let mut i = 0;
        while i < n {
            symbols.push((i, id[i]));
            i = next[i];
        }
        symbols
    }

    /// The bytes of token `id` (a control token's are its text), or `None` out of range.
    pub fn token_bytes(&self, id: u32) -> Option<&[u8]> {
        self.bytes.get(id as usize).map(Vec::as_slice)
    }

    /// Whether `id` is a control token (type 3 in the GGUF: `<|im_end|>` and the like), which
    /// plain text never encodes to.
    pub fn is_control(&self, id: u32) -> bool {
        self.control.get(id as usize).copied().unwrap_or(false)
    }

    /// The raw bytes of `ids` (may end inside a UTF-8 sequence; see [`Tokenizer::decode`]).
    pub fn decode_bytes(&self, ids: &[u32]) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        for &id in ids {
            let b = self.bytes.get(id as usize).ok_or_else(|| bad(format!("token id {id} is out of range")))?;
            out.extend_from_slice(b);
        }
        Ok(out)
    }

    /// Decodes `ids` to text (invalid UTF-8 becomes U+FFFD).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        Ok(String::from_utf8_lossy(&self.decode_bytes(ids)?).into_owned())
    }
}
