//! Constrained decoding: grammars (JSON schema, regex, Lark) compiled by `llguidance`
//! against the model's own vocabulary, applied through the sampler's [`LogitProcessor`]
//! seam. Every token the sampler may pick is one the grammar allows next; when the grammar
//! is complete, only the end token is.
//!
//! ```
//! use fucina_models::llm::grammar::{Grammar, GrammarCompiler};
//! use fucina_models::llm::sampling::{LogitProcessor, Sampler, SamplingParams};
//! use fucina_models::llm::{assets::default_model, Tokenizer};
//!
//! let lm = fucina_models::lm::open(&default_model(), false)?;
//! let tok = std::sync::Arc::new(Tokenizer::from_gguf(&lm.header)?);
//! let end = tok.token_id("<|im_end|>").unwrap();
//! let compiler = GrammarCompiler::new(tok.clone(), tok.vocab_size(), end)?;
//! let digits = compiler.compile(&Grammar::Regex("[0-9]{2}".into()))?;
//! // Whatever the logits say, the sampler picks digits, then the end token.
//! let mut sampler = Sampler::new(SamplingParams::default()).with_processor(Box::new(digits));
//! let mut out = Vec::new();
//! loop {
//!     let t = sampler.next(&vec![0.0; tok.vocab_size()], &out)?;
//!     if t == end {
//!         break;
//!     }
//!     out.push(t);
//! }
//! let text = tok.decode(&out)?;
//! assert!(text.len() == 2 && text.bytes().all(|b| b.is_ascii_digit()), "{text}");
//! # Ok::<(), fucina::FucinaError>(())
//! ```

use super::sampling::LogitProcessor;
use super::tokenizer::Tokenizer;
use fucina::prelude::*;
use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use std::sync::Arc;
use toktrie::{TokRxInfo, TokTrie, TokenizerEnv};

/// A language the answer must belong to.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Grammar {
    /// JSON that validates against this JSON schema (`{"type": "object"}`: any object),
    /// written with `", "` and `": "` between items and no other whitespace unless the
    /// schema's `x-guidance` options say otherwise.
    JsonSchema(serde_json::Value),
    /// Text matching this regular expression (whole answer).
    Regex(String),
    /// A Lark grammar (llguidance's dialect: `start: ...`, `%json {...}` embeds a schema).
    Lark(String),
}

impl Grammar {
    /// Any JSON object (OpenAI's `response_format: {"type": "json_object"}`).
    pub fn json_object() -> Grammar {
        Grammar::JsonSchema(serde_json::json!({ "type": "object" }))
    }
}

fn bad(msg: String) -> FucinaError {
    FucinaError::InvalidArgument { op: "grammar", msg }
}

/// The vocabulary as llguidance sees it: a byte trie of every token, control tokens marked
/// so no grammar text can produce them, and the model's own BPE for text the grammar forces
/// (so forced text is allowed only as the model would have tokenized it).
struct VocabEnv {
    trie: TokTrie,
    tok: Arc<Tokenizer>,
}

impl TokenizerEnv for VocabEnv {
    fn tok_trie(&self) -> &TokTrie {
        &self.trie
    }

    /// The BPE's tokens for the valid UTF-8 prefix (no control token parsed), then the
    /// trie's greedy tokens for bytes that are not (yet) whole characters.
    fn tokenize_bytes(&self, s: &[u8]) -> Vec<u32> {
        let valid = std::str::from_utf8(s).map_or_else(|e| e.valid_up_to(), str::len);
        let text = std::str::from_utf8(&s[..valid]).unwrap_or_default();
        let mut out = self.tok.encode_literal(text).unwrap_or_else(|_| self.trie.greedy_tokenize(&s[..valid]));
        out.extend(self.trie.greedy_tokenize(&s[valid..]));
        out
    }
}

/// Compiles grammars for one vocabulary; built once per model (the trie and the token
/// slices are the expensive part), shared by requests.
#[derive(Clone)]
pub struct GrammarCompiler {
    factory: Arc<ParserFactory>,
    logits: usize,
    end: u32,
}

impl GrammarCompiler {
    /// The compiler for `tok`'s vocabulary, with `logits` entries per logits row (at least
    /// the vocabulary; rows past it are never allowed) and `end` as the token that ends a
    /// complete answer.
    pub fn new(tok: Arc<Tokenizer>, logits: usize, end: u32) -> Result<GrammarCompiler> {
        let n = tok.vocab_size();
        if logits < n {
            return Err(bad(format!("{logits} logits for a vocabulary of {n} tokens")));
        }
        if end as usize >= n {
            return Err(bad(format!("end token {end} is outside the vocabulary of {n}")));
        }
        let vocab = u32::try_from(n).map_err(|_| bad(format!("{n} tokens do not fit 32-bit ids")))?;
        let words: Vec<Vec<u8>> = (0..vocab)
            .map(|id| {
                let b = tok.token_bytes(id).unwrap_or_default();
                if tok.is_control(id) {
                    // llguidance's marker for special tokens: 0xff, then the text.
                    let mut w = Vec::with_capacity(b.len() + 1);
                    w.push(TokTrie::SPECIAL_TOKEN_MARKER);
                    w.extend_from_slice(b);
                    w
                } else {
                    b.to_vec()
                }
            })
            .collect();
        let trie = TokTrie::from(&TokRxInfo::new(vocab, end), &words);
        let env: toktrie::TokEnv = Arc::new(VocabEnv { trie, tok });
        let mut factory = ParserFactory::new_simple(&env).map_err(|e| bad(format!("{e:#}")))?;
        factory.quiet();
        Ok(GrammarCompiler { factory: Arc::new(factory), logits, end })
    }

    /// A fresh constraint for one answer, or an error naming what is wrong with `g` (an
    /// invalid schema, regex or grammar; one over llguidance's size limits).
    pub fn compile(&self, g: &Grammar) -> Result<GrammarConstraint> {
        let top = match g {
            Grammar::JsonSchema(s) => {
                let mut s = s.clone();
                // Whitespace as Python's json.dumps writes it (", " and ": ", nothing else),
                // so a model cannot pad an answer with blanks until the token budget runs
                // out; a schema's own `x-guidance` options win.
                if let Some(o) = s.as_object_mut() {
                    o.entry("x-guidance").or_insert_with(|| {
                        serde_json::json!({ "whitespace_flexible": false, "item_separator": ", ", "key_separator": ": " })
                    });
                }
                TopLevelGrammar::from_json_schema(s)
            }
            Grammar::Regex(r) => TopLevelGrammar::from_regex(r),
            Grammar::Lark(l) => TopLevelGrammar::from_lark(l.clone()),
        };
        let parser = self.factory.create_parser(top).map_err(|e| bad(format!("{e:#}")))?;
        let mut matcher = Matcher::new(Ok(parser));
        // The first mask, once: a grammar that compiles but allows nothing (a schema that
        // only refers to itself) is a bad request here, not a failure mid-answer.
        if let Err(e) = matcher.compute_mask() {
            let first = format!("{e:#}");
            let first = first.lines().next().unwrap_or_default();
            return Err(bad(format!("the grammar cannot produce any text ({first})")));
        }
        if let Some(e) = matcher.get_error() {
            return Err(bad(e));
        }
        Ok(GrammarConstraint { matcher, logits: self.logits, end: self.end, trigger: None })
    }

    /// A constraint that waits: the answer is free until the model picks `trigger`, a token
    /// `g` starts with; from that token on (the trigger included) `g` holds, as llama.cpp's
    /// lazy grammars do. Tool calls under `tool_choice: auto` use it: the model decides
    /// whether to call, and a call it starts is a valid one.
    pub fn compile_lazy(&self, g: &Grammar, trigger: u32) -> Result<GrammarConstraint> {
        let mut c = self.compile(g)?;
        let mask = c.matcher.compute_mask_or_eos().map_err(|e| bad(format!("{e:#}")))?;
        if !mask.is_allowed(trigger) {
            return Err(bad(format!("the lazy grammar's trigger token {trigger} is not how it starts")));
        }
        c.trigger = Some(trigger);
        Ok(c)
    }
}

/// One answer's grammar state: masks the logits, follows the chosen tokens.
pub struct GrammarConstraint {
    matcher: Matcher,
    logits: usize,
    end: u32,
    /// A lazy constraint's trigger token, until the model picks it (then `None`: active).
    trigger: Option<u32>,
}

impl GrammarConstraint {
    /// The ids the grammar allows next (the end token alone once it is complete).
    pub fn allowed(&mut self) -> Result<Vec<u32>> {
        let mask = self.matcher.compute_mask_or_eos().map_err(|e| bad(format!("{e:#}")))?;
        Ok((0..mask.len() as u32).filter(|&t| mask.is_allowed(t)).collect())
    }
}

impl LogitProcessor for GrammarConstraint {
    fn process(&mut self, logits: &mut [f32]) -> Result<()> {
        if logits.len() != self.logits {
            return Err(bad(format!("a logits row of {} for a grammar built for {}", logits.len(), self.logits)));
        }
        if self.trigger.is_some() {
            return Ok(());
        }
        let mask = self.matcher.compute_mask_or_eos().map_err(|e| bad(format!("{e:#}")))?;
        let mut any = false;
        for (t, x) in logits.iter_mut().enumerate() {
            if t < mask.len() && mask.is_allowed(t as u32) {
                any |= !x.is_nan();
            } else {
                *x = f32::NEG_INFINITY;
            }
        }
        if !any {
            return Err(bad("the grammar allows no token here".into()));
        }
        Ok(())
    }

    fn accept(&mut self, token: u32) -> Result<()> {
        match self.trigger {
            Some(t) if t == token => self.trigger = None,
            Some(_) => return Ok(()),
            None => {}
        }
        // The end token after a complete grammar: the only token its mask allowed.
        if token == self.end && self.matcher.is_stopped() && !self.matcher.is_error() {
            return Ok(());
        }
        self.matcher.consume_token(token).map_err(|e| bad(format!("token {token}: {e:#}")))
    }

    fn is_done(&self) -> bool {
        self.trigger.is_none() && self.matcher.is_stopped()
    }

    /// A lazy constraint lets tokens before its trigger through; from the trigger on (and
    /// for an active one, from the first token) the matcher checks them without moving.
    fn valid_prefix(&mut self, tokens: &[u32]) -> Result<usize> {
        let start = match self.trigger {
            Some(t) => match tokens.iter().position(|&x| x == t) {
                Some(i) => i,
                None => return Ok(tokens.len()),
            },
            None => 0,
        };
        let rest = &tokens[start..];
        if self.matcher.is_stopped() {
            // Complete: only the end token may follow.
            return Ok(start + usize::from(rest.first() == Some(&self.end)));
        }
        let n = self.matcher.validate_tokens(rest).map_err(|e| bad(format!("{e:#}")))?;
        Ok(start + n.min(rest.len()))
    }
}
