//! Tool calling in the models' own formats, as [`ToolSyntax`]:
//!
//! - Qwen3's (hermes): `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` blocks;
//! - DeepSeek-V3/R1's: `<｜tool▁calls▁begin｜>` then, per call,
//!   `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>`
//!   (several separated by newlines), then `<｜tool▁calls▁end｜>`.
//!
//! This module finds the calls in an answer (whole or streamed) and builds the grammar that
//! forces them when a call is required.
//!
//! ```
//! use fucina_models::llm::tools::{parse_tool_calls, ToolSyntax};
//! let text = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
//! let (content, calls) = parse_tool_calls(text);
//! assert_eq!(content, "Checking.");
//! assert_eq!((calls[0].name.as_str(), calls[0].arguments.as_str()), ("get_weather", r#"{"city":"Rome"}"#));
//! let text = "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>now\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
//! let (content, calls) = ToolSyntax::DeepSeek.parse(text);
//! assert_eq!((content.as_str(), calls[0].name.as_str()), ("", "now"));
//! ```

use super::chat::ToolCall;
use super::grammar::Grammar;
use super::reasoning::partial_tag;
use serde_json::{json, Value};

/// The tag that opens a call.
pub const CALL_OPEN: &str = "<tool_call>";
/// The tag that closes it.
pub const CALL_CLOSE: &str = "</tool_call>";

/// DeepSeek's tags: the block of calls opens and closes with the first two, each call with
/// the next two, and the third separates its type from its name.
pub const DEEPSEEK_TAGS: [&str; 5] = [
    "<｜tool▁calls▁begin｜>",
    "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>",
];

/// A function the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    /// Its name.
    pub name: String,
    /// The JSON schema of its arguments (an object schema).
    pub parameters: Value,
}

/// Which calls the answer must make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides (its answer is parsed for calls, nothing is forced).
    Auto,
    /// At least one call, to any tool (forced by a grammar).
    Required,
    /// A call to this tool (forced by a grammar).
    Named(String),
}

/// How a model writes its tool calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ToolSyntax {
    /// Qwen3's: one `<tool_call>` JSON block per call.
    Hermes,
    /// DeepSeek-V3/R1's: one `<｜tool▁calls▁begin｜>` block holding every call.
    DeepSeek,
}

impl ToolSyntax {
    /// The tag that opens a block of calls (the lazy grammar's trigger).
    pub fn open(self) -> &'static str {
        match self {
            ToolSyntax::Hermes => CALL_OPEN,
            ToolSyntax::DeepSeek => DEEPSEEK_TAGS[0],
        }
    }

    /// The tag that closes a block.
    pub fn close(self) -> &'static str {
        match self {
            ToolSyntax::Hermes => CALL_CLOSE,
            ToolSyntax::DeepSeek => DEEPSEEK_TAGS[1],
        }
    }

    /// The tags the vocabulary must have as single tokens for the prompt to show calls
    /// (hermes tags work as text too: Qwen3's template writes them into message text).
    pub fn tags(self) -> &'static [&'static str] {
        match self {
            ToolSyntax::Hermes => &[],
            ToolSyntax::DeepSeek => &DEEPSEEK_TAGS,
        }
    }

    /// The calls inside one block (between its open and close tags), or `None` when it does
    /// not parse as calls (the block then stays text).
    fn parse_block(self, inner: &str) -> Option<Vec<ToolCall>> {
        match self {
            ToolSyntax::Hermes => parse_hermes_call(inner).map(|c| vec![c]),
            ToolSyntax::DeepSeek => {
                let [_, _, begin, end, sep] = DEEPSEEK_TAGS;
                let mut calls = Vec::new();
                let mut rest = inner.trim();
                while !rest.is_empty() {
                    let body = rest.strip_prefix(begin)?;
                    let stop = body.find(end)?;
                    let (kind, call) = body[..stop].split_once(sep)?;
                    if kind.trim() != "function" {
                        return None;
                    }
                    let (name, args) = call.split_once('\n')?;
                    let args = args.trim().strip_prefix("```json")?.strip_suffix("```")?;
                    calls.push(ToolCall { name: name.trim().to_string(), arguments: arguments(args)? });
                    rest = body[stop + end.len()..].trim_start();
                }
                (!calls.is_empty()).then_some(calls)
            }
        }
    }

    /// Splits a whole answer into its text (calls removed, trimmed) and its calls, in order.
    /// A block that does not parse as calls stays in the text.
    pub fn parse(self, text: &str) -> (String, Vec<ToolCall>) {
        let mut s = ToolCallSplitter::new(self);
        let (mut content, mut calls) = s.push(text);
        let (c, k) = s.finish();
        content.push_str(&c);
        calls.extend(k);
        (content.trim().to_string(), calls)
    }

    /// The grammar for a required call: a block of one call (several, with `parallel`) to
    /// one of `tools` (only `only`, if given) whose arguments follow that tool's schema.
    /// `control` gives the id of a tag that is a control token of the vocabulary (those are
    /// referenced by id: no text produces them), `None` for one written as text.
    pub fn call_grammar(
        self,
        tools: &[ToolDef],
        only: Option<&str>,
        parallel: bool,
        control: &dyn Fn(&str) -> Option<u32>,
    ) -> Grammar {
        // A sequence of tags and text as Lark: control tags by id, and every run of text
        // (tags written as text included) as one literal.
        let seq = |parts: &[&str]| -> String {
            let (mut out, mut run) = (Vec::new(), String::new());
            for part in parts {
                match control(part) {
                    Some(id) => {
                        if !run.is_empty() {
                            out.push(Value::String(std::mem::take(&mut run)).to_string());
                        }
                        out.push(format!("<[{id}]>"));
                    }
                    None => run.push_str(part),
                }
            }
            if !run.is_empty() {
                out.push(Value::String(run).to_string());
            }
            out.join(" ")
        };
        let chosen = tools.iter().filter(|t| only.is_none_or(|n| n == t.name));
        let x_guidance = json!({ "whitespace_flexible": false, "item_separator": ", ", "key_separator": ": " });
        let repeat = if parallel { " (\"\\n\" call)*" } else { "" };
        match self {
            ToolSyntax::Hermes => {
                let bodies: Vec<String> = chosen
                    .map(|t| {
                        let schema = json!({
                            "type": "object",
                            "properties": { "name": { "const": t.name }, "arguments": t.parameters },
                            "required": ["name", "arguments"],
                            "additionalProperties": false,
                            "x-guidance": x_guidance
                        });
                        format!("%json {schema}")
                    })
                    .collect();
                Grammar::Lark(format!(
                    "start: call{repeat}\ncall: {} body {}\nbody: {}\n",
                    seq(&[CALL_OPEN, "\n"]),
                    seq(&["\n", CALL_CLOSE]),
                    bodies.join("\n    | ")
                ))
            }
            ToolSyntax::DeepSeek => {
                let [open, close, begin, end, sep] = DEEPSEEK_TAGS;
                let bodies: Vec<String> = chosen
                    .map(|t| {
                        let mut schema = t.parameters.clone();
                        if let Some(o) = schema.as_object_mut() {
                            o.entry("x-guidance").or_insert_with(|| x_guidance.clone());
                        }
                        format!("{} %json {schema}", seq(&[begin, "function", sep, &t.name, "\n```json\n"]))
                    })
                    .collect();
                Grammar::Lark(format!(
                    "start: {} call{repeat} {}\ncall: body {}\nbody: {}\n",
                    seq(&[open]),
                    seq(&[close]),
                    seq(&["\n```", end]),
                    bodies.join("\n    | ")
                ))
            }
        }
    }
}

/// Arguments as JSON object text (an object, or a JSON string holding one, which some
/// models write), or `None`.
fn arguments(text: &str) -> Option<String> {
    match serde_json::from_str::<Value>(text.trim()).ok()? {
        a @ Value::Object(_) => Some(a.to_string()),
        Value::String(s) if serde_json::from_str::<Value>(&s).is_ok_and(|a| a.is_object()) => Some(s),
        _ => None,
    }
}

/// [`ToolSyntax::call_grammar`] for Qwen3's hermes blocks, whose tags are text.
pub fn call_grammar(tools: &[ToolDef], only: Option<&str>, parallel: bool) -> Grammar {
    ToolSyntax::Hermes.call_grammar(tools, only, parallel, &|_| None)
}

/// Parses the JSON inside one hermes block: `{"name": string, "arguments": object}`.
fn parse_hermes_call(inner: &str) -> Option<ToolCall> {
    let v: Value = serde_json::from_str(inner.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let arguments = match v.get("arguments") {
        None => "{}".to_string(),
        Some(a) => arguments(&a.to_string())?,
    };
    Some(ToolCall { name, arguments })
}

/// [`ToolSyntax::parse`] for Qwen3's hermes blocks.
pub fn parse_tool_calls(text: &str) -> (String, Vec<ToolCall>) {
    ToolSyntax::Hermes.parse(text)
}

/// The streaming splitter: text outside call blocks is released as it comes (a possible
/// start of the opening tag held back); a block is released as calls once it closes.
#[derive(Debug, Clone)]
pub struct ToolCallSplitter {
    syntax: ToolSyntax,
    buf: String,
    in_call: bool,
}

impl Default for ToolCallSplitter {
    fn default() -> Self {
        ToolCallSplitter::new(ToolSyntax::Hermes)
    }
}

impl ToolCallSplitter {
    /// A splitter for calls written in `syntax`.
    pub fn new(syntax: ToolSyntax) -> ToolCallSplitter {
        ToolCallSplitter { syntax, buf: String::new(), in_call: false }
    }

    /// Adds a piece; returns the text and the calls now complete.
    pub fn push(&mut self, piece: &str) -> (String, Vec<ToolCall>) {
        let (open, close) = (self.syntax.open(), self.syntax.close());
        self.buf.push_str(piece);
        let (mut text, mut calls) = (String::new(), Vec::new());
        loop {
            if self.in_call {
                let Some(end) = self.buf.find(close) else {
                    return (text, calls);
                };
                let block: String = self.buf.drain(..end + close.len()).collect();
                match self.syntax.parse_block(&block[..end]) {
                    Some(c) => calls.extend(c),
                    None => {
                        text.push_str(open);
                        text.push_str(&block);
                    }
                }
                self.in_call = false;
            } else if let Some(at) = self.buf.find(open) {
                text.push_str(&self.buf[..at]);
                self.buf.drain(..at + open.len());
                self.in_call = true;
            } else {
                let upto = self.buf.len() - partial_tag(&self.buf, open);
                text.push_str(&self.buf[..upto]);
                self.buf.drain(..upto);
                return (text, calls);
            }
        }
    }

    /// The end: an unclosed block is text.
    pub fn finish(&mut self) -> (String, Vec<ToolCall>) {
        let rest = std::mem::take(&mut self.buf);
        let text = if self.in_call { format!("{}{rest}", self.syntax.open()) } else { rest };
        self.in_call = false;
        (text, Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_found_across_any_cut() {
        let text = "Let me look.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n\
                    <tool_call>\n{\"name\": \"b\", \"arguments\": \"{}\"}\n</tool_call>\n<tool_call>\nnot json\n</tool_call> <tool";
        let want_calls = vec![
            ToolCall { name: "a".into(), arguments: r#"{"x":1}"#.into() },
            ToolCall { name: "b".into(), arguments: "{}".into() },
        ];
        let (content, calls) = parse_tool_calls(text);
        assert_eq!(calls, want_calls);
        assert_eq!(content, "Let me look.\n\n\n<tool_call>\nnot json\n</tool_call> <tool");
        for i in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            let mut s = ToolCallSplitter::default();
            let (mut c, mut k) = s.push(&text[..i]);
            let (c2, k2) = s.push(&text[i..]);
            let (c3, k3) = s.finish();
            c += &c2;
            c += &c3;
            k.extend(k2);
            k.extend(k3);
            assert_eq!((c.trim(), &k), (content.as_str(), &want_calls), "cut at {i}");
        }
    }

    #[test]
    fn the_call_grammar_names_the_tools() {
        let tools = [
            ToolDef { name: "a".into(), parameters: json!({"type": "object"}) },
            ToolDef { name: "b".into(), parameters: json!({"type": "object"}) },
        ];
        let Grammar::Lark(g) = call_grammar(&tools, Some("b"), false) else { panic!() };
        assert!(g.contains("\"const\":\"b\"") && !g.contains("\"const\":\"a\"") && !g.contains('*'), "{g}");
        let Grammar::Lark(g) = call_grammar(&tools, None, true) else { panic!() };
        assert!(g.contains("\"const\":\"a\"") && g.contains("\"const\":\"b\"") && g.contains('*'), "{g}");
    }
}
