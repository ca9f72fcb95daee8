//! Byte-level BPE tokenizer built from GGUF metadata (`tokenizer.ggml.model = "gpt2"`):
//! special tokens split out first, then the pre-tokenizer named by `tokenizer.ggml.pre`
//! (Qwen2's: NFC and one split regex; DeepSeek-V3's: three split regexes in sequence), GPT-2's
//! byte-to-unicode mapping and rank-ordered merges — HF `tokenizers`' pipelines, checked token
//! for token against it.

use fucina::formats::gguf::{GgufHeader, Value};
use fucina::{FucinaError, Result};
use std::collections::HashMap;
use unicode_normalization::UnicodeNormalization;

/// Qwen2's pre-tokenizer split pattern (the same string as in its `tokenizer.json`).
pub const QWEN2_PATTERN: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

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
    /// Special tokens, longest first (so that the longest match wins).
    specials: Vec<(String, u32)>,
    /// Pre-tokenizer splits, applied in order ("isolated": matches and the text between them
    /// both become pieces).
    splits: Vec<fancy_regex::Regex>,
    /// NFC-normalize before splitting (Qwen2).
    nfc: bool,
    byte_char: [char; 256],
}

fn bad(msg: String) -> FucinaError {
    FucinaError::InvalidArgument { op: "tokenizer", msg }
}

/// GPT-2's reversible byte -> printable character table.
fn byte_chars() -> [char; 256] {
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

fn string_array<'a>(h: &'a GgufHeader, key: &str) -> Result<Vec<&'a str>> {
    match h.get(key) {
        Some(Value::Array(_, items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| v.as_str().ok_or_else(|| bad(format!("{key}[{i}] is not a UTF-8 string"))))
            .collect(),
        Some(_) => Err(bad(format!("{key} is not an array"))),
        None => Err(bad(format!("the GGUF has no {key}"))),
    }
}

impl Tokenizer {
    /// Builds the tokenizer from `tokenizer.ggml.{model,tokens,merges,token_type}`.
    pub fn from_gguf(h: &GgufHeader) -> Result<Tokenizer> {
        match h.get("tokenizer.ggml.model").and_then(|v| v.as_str()) {
            Some("gpt2") => {}
            Some(other) => {
                return Err(bad(format!("tokenizer model `{other}` is not supported (gpt2 byte-level BPE is)")))
            }
            None => return Err(bad("the GGUF has no tokenizer.ggml.model".into())),
        }
        let tokens = string_array(h, "tokenizer.ggml.tokens")?;
        let merges = string_array(h, "tokenizer.ggml.merges")?;
        let types: Vec<i64> = match h.get("tokenizer.ggml.token_type") {
            Some(Value::Array(_, items)) => items
                .iter()
                .map(|v| match v {
                    Value::I32(x) => *x as i64,
                    other => other.as_u64().map_or(1, |x| x as i64),
                })
                .collect(),
            _ => vec![1; tokens.len()],
        };
        let byte_char = byte_chars();
        let mut char_byte = HashMap::new();
        for (b, c) in byte_char.iter().enumerate() {
            char_byte.insert(*c, b as u8);
        }
        let mut by_str = HashMap::with_capacity(tokens.len());
        let mut bytes = Vec::with_capacity(tokens.len());
        let mut specials = Vec::new();
        for (i, t) in tokens.iter().enumerate() {
            by_str.insert(t.to_string(), i as u32);
            // Control (3) and user-defined (4) tokens are matched literally in the text.
            if matches!(types.get(i), Some(3) | Some(4)) {
                specials.push((t.to_string(), i as u32));
                bytes.push(t.as_bytes().to_vec());
            } else {
                bytes.push(t.chars().map(|c| char_byte.get(&c).copied().unwrap_or(b'?')).collect());
            }
        }
        specials.sort_by_key(|s| std::cmp::Reverse(s.0.len()));
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
        let pre = h.get("tokenizer.ggml.pre").and_then(|v| v.as_str()).unwrap_or("qwen2");
        let (patterns, nfc): (Vec<&str>, bool) = match pre {
            "qwen2" | "default" => (vec![QWEN2_PATTERN], true),
            "deepseek-v3" => (DEEPSEEK_V3_PATTERNS.to_vec(), false),
            other => {
                return Err(bad(format!("pre-tokenizer `{other}` is not supported (qwen2 and deepseek-v3 are)")));
            }
        };
        let splits = patterns
            .into_iter()
            .map(|p| fancy_regex::Regex::new(p).map_err(|e| bad(format!("split pattern: {e}"))))
            .collect::<Result<Vec<_>>>()?;
        Ok(Tokenizer { bytes, by_str, merges: merge_map, specials, splits, nfc, byte_char })
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.bytes.len()
    }

    /// The id of a token given by its exact text (special tokens included).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.by_str.get(token).copied()
    }

    /// Encodes `text`; special tokens in it become their ids.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        let mut rest = text;
        while !rest.is_empty() {
            // The earliest special token, longest on ties.
            let hit = self
                .specials
                .iter()
                .filter_map(|(s, id)| rest.find(s.as_str()).map(|at| (at, s.len(), *id)))
                .min_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
            let (plain, special) = match hit {
                Some((at, len, id)) => (&rest[..at], Some((id, at + len))),
                None => (rest, None),
            };
            self.encode_plain(plain, &mut out)?;
            match special {
                Some((id, end)) => {
                    out.push(id);
                    rest = &rest[end..];
                }
                None => break,
            }
        }
        Ok(out)
    }

    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) -> Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let text: String = if self.nfc { text.nfc().collect() } else { text.to_string() };
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
            self.bpe(p, out)?;
        }
        Ok(())
    }

    /// Merges one pre-token: always the lowest-ranked adjacent pair, leftmost first.
    fn bpe(&self, piece: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut syms = Vec::with_capacity(piece.len());
        for b in piece.bytes() {
            let c = self.byte_char[b as usize].to_string();
            let id = self.by_str.get(&c).ok_or_else(|| bad(format!("byte {b:#04x} has no token")))?;
            syms.push(*id);
        }
        loop {
            let best = syms
                .windows(2)
                .enumerate()
                .filter_map(|(i, w)| self.merges.get(&(w[0], w[1])).map(|(r, m)| (*r, i, *m)))
                .min();
            match best {
                Some((_, i, merged)) => {
                    syms[i] = merged;
                    syms.remove(i + 1);
                }
                None => break,
            }
        }
        out.extend_from_slice(&syms);
        Ok(())
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
