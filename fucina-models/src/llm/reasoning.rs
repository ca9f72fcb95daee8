//! Splits a thinking model's answer into its reasoning and its reply: the text between a
//! leading `<think>` and `</think>` (Qwen3, DeepSeek-R1, GLM-4.5; Gemma 4's
//! `<|channel>thought` and `<channel|>`: [`ReasoningTags`]) is reasoning, what follows
//! (leading whitespace dropped) is the reply. Works on streamed pieces: nothing is released
//! that a later piece could still turn into a tag.
//!
//! ```
//! use fucina_models::llm::reasoning::ReasoningSplitter;
//! let mut s = ReasoningSplitter::new(false);
//! let mut reasoning = String::new();
//! let mut reply = String::new();
//! for piece in ["<th", "ink>\nhmm, Paris", "</th", "ink>\n\nParis."] {
//!     let (r, c) = s.push(piece);
//!     reasoning += &r;
//!     reply += &c;
//! }
//! let (r, c) = s.finish();
//! reasoning += &r;
//! reply += &c;
//! assert_eq!((reasoning.as_str(), reply.as_str()), ("\nhmm, Paris", "Paris."));
//! ```

/// The tag that opens reasoning.
pub const THINK_OPEN: &str = "<think>";
/// The tag that closes it.
pub const THINK_CLOSE: &str = "</think>";

/// The tags around a model's reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReasoningTags {
    /// Opens the reasoning at the start of an answer.
    pub open: &'static str,
    /// Closes it.
    pub close: &'static str,
}

impl ReasoningTags {
    /// `<think>` ... `</think>` (Qwen3, DeepSeek-R1, GLM-4.5).
    pub const THINK: ReasoningTags = ReasoningTags { open: THINK_OPEN, close: THINK_CLOSE };
    /// Gemma 4's thought channel: `<|channel>thought` ... `<channel|>`.
    pub const GEMMA4: ReasoningTags = ReasoningTags { open: "<|channel>thought", close: "<channel|>" };
}

impl Default for ReasoningTags {
    fn default() -> ReasoningTags {
        ReasoningTags::THINK
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not yet known whether the answer opens with `<think>`.
    Start,
    /// Inside the reasoning.
    Reasoning,
    /// After `</think>`: whitespace before the reply is dropped.
    AfterClose,
    /// The reply.
    Reply,
}

/// The streaming splitter: feed pieces, get `(reasoning, reply)` text to release.
#[derive(Debug, Clone)]
pub struct ReasoningSplitter {
    phase: Phase,
    buf: String,
    opened: bool,
    tags: ReasoningTags,
}

/// The length of the longest suffix of `s` that is a proper prefix of `tag` (text that a
/// later piece could complete into the tag), on a character boundary.
pub(crate) fn partial_tag(s: &str, tag: &str) -> usize {
    (1..tag.len().min(s.len() + 1))
        .rev()
        .find(|&n| s.is_char_boundary(s.len() - n) && tag.starts_with(&s[s.len() - n..]))
        .unwrap_or(0)
}

impl ReasoningSplitter {
    /// A splitter; `in_reasoning` when the prompt itself opened the reasoning (a template
    /// that prefills `<think>`), so the answer starts inside it.
    pub fn new(in_reasoning: bool) -> ReasoningSplitter {
        ReasoningSplitter::with_tags(in_reasoning, ReasoningTags::THINK)
    }

    /// A splitter for reasoning between `tags`.
    pub fn with_tags(in_reasoning: bool, tags: ReasoningTags) -> ReasoningSplitter {
        let phase = if in_reasoning { Phase::Reasoning } else { Phase::Start };
        ReasoningSplitter { phase, buf: String::new(), opened: in_reasoning, tags }
    }

    /// Whether the answer had a reasoning part (so far).
    pub fn had_reasoning(&self) -> bool {
        self.opened
    }

    /// Adds a piece; returns the reasoning and the reply text now certain.
    pub fn push(&mut self, piece: &str) -> (String, String) {
        self.buf.push_str(piece);
        let (mut reasoning, mut reply) = (String::new(), String::new());
        loop {
            match self.phase {
                Phase::Start => {
                    let t = self.buf.trim_start();
                    if let Some(rest) = t.strip_prefix(self.tags.open) {
                        self.buf = rest.to_string();
                        self.phase = Phase::Reasoning;
                        self.opened = true;
                    } else if self.tags.open.starts_with(t) {
                        return (reasoning, reply); // only whitespace or a cut tag so far
                    } else {
                        self.phase = Phase::Reply;
                    }
                }
                Phase::Reasoning => {
                    if let Some(at) = self.buf.find(self.tags.close) {
                        reasoning.push_str(&self.buf[..at]);
                        self.buf.drain(..at + self.tags.close.len());
                        self.phase = Phase::AfterClose;
                    } else {
                        let keep = partial_tag(&self.buf, self.tags.close);
                        let upto = self.buf.len() - keep;
                        reasoning.push_str(&self.buf[..upto]);
                        self.buf.drain(..upto);
                        return (reasoning, reply);
                    }
                }
                Phase::AfterClose => {
                    let t = self.buf.trim_start();
                    if t.is_empty() {
                        self.buf.clear();
                        return (reasoning, reply);
                    }
                    self.buf = t.to_string();
                    self.phase = Phase::Reply;
                }
                Phase::Reply => {
                    reply.push_str(&self.buf);
                    self.buf.clear();
                    return (reasoning, reply);
                }
            }
        }
    }

    /// The end of the answer: whatever is held back is released (a cut tag as text of the
    /// part it is in).
    pub fn finish(&mut self) -> (String, String) {
        let rest = std::mem::take(&mut self.buf);
        match self.phase {
            Phase::Reasoning => (rest, String::new()),
            Phase::AfterClose => (String::new(), String::new()),
            Phase::Start | Phase::Reply => (String::new(), rest),
        }
    }
}

/// Splits a whole answer: `(reasoning, reply)`; `None` reasoning when there was none.
pub fn split_reasoning(text: &str, in_reasoning: bool) -> (Option<String>, String) {
    let mut s = ReasoningSplitter::new(in_reasoning);
    let (mut r, mut c) = s.push(text);
    let (r2, c2) = s.finish();
    r.push_str(&r2);
    c.push_str(&c2);
    (s.had_reasoning().then_some(r), c)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split_pieces(pieces: &[&str], open: bool) -> (String, String) {
        let mut s = ReasoningSplitter::new(open);
        let (mut r, mut c) = (String::new(), String::new());
        for p in pieces {
            let (a, b) = s.push(p);
            r += &a;
            c += &b;
        }
        let (a, b) = s.finish();
        (r + &a, c + &b)
    }

    #[test]
    fn every_cut_of_the_text_gives_the_same_split() {
        let text = "  <think>\nLet me think: 1 < 2 </thin and </think>\n\nThe answer: é <think> stays.";
        let want = ("\nLet me think: 1 < 2 </thin and ".to_string(), "The answer: é <think> stays.".to_string());
        assert_eq!(split_pieces(&[text], false), want);
        let chars: Vec<(usize, char)> = text.char_indices().collect();
        for &(i, _) in &chars {
            for &(j, _) in chars.iter().filter(|(j, _)| *j >= i) {
                assert_eq!(split_pieces(&[&text[..i], &text[i..j], &text[j..]], false), want, "cut at {i}, {j}");
            }
        }
    }

    #[test]
    fn gemma4_thought_channels_split_the_same_way() {
        let text = "<|channel>thought\nIt is Paris.<channel|>Paris.";
        let chars: Vec<usize> = text.char_indices().map(|(i, _)| i).collect();
        for &i in &chars {
            let mut s = ReasoningSplitter::with_tags(false, ReasoningTags::GEMMA4);
            let (mut r, mut c) = s.push(&text[..i]);
            let (r2, c2) = s.push(&text[i..]);
            let (r3, c3) = s.finish();
            r += &(r2 + &r3);
            c += &(c2 + &c3);
            assert_eq!((r.as_str(), c.as_str()), ("\nIt is Paris.", "Paris."), "cut at {i}");
        }
        let mut s = ReasoningSplitter::with_tags(false, ReasoningTags::GEMMA4);
        assert_eq!(s.push("<think>x</think>y"), (String::new(), "<think>x</think>y".to_string()));
    }

    #[test]
    fn no_think_tag_is_all_reply_and_an_unclosed_one_all_reasoning() {
        assert_eq!(split_reasoning("Paris.", false), (None, "Paris.".into()));
        assert_eq!(split_reasoning("<thi", false), (None, "<thi".into()));
        assert_eq!(split_reasoning("<think>still going", false), (Some("still going".into()), String::new()));
        assert_eq!(split_reasoning("prefilled</think>Rome", true), (Some("prefilled".into()), "Rome".into()));
        assert_eq!(split_reasoning("<think></think>", false), (Some(String::new()), String::new()));
    }
}
