//! Tool calling in Qwen3's (hermes) format: the model writes
//! `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` blocks. This module finds
//! them in an answer (whole or streamed) and builds the grammar that forces them when a
//! call is required.
//!
//! ```
//! use fucina_models::llm::tools::parse_tool_calls;
//! let text = "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
//! let (content, calls) = parse_tool_calls(text);
//! assert_eq!(content, "Checking.");
//! assert_eq!((calls[0].name.as_str(), calls[0].arguments.as_str()), ("get_weather", r#"{"city":"Rome"}"#));
//! ```

use super::chat::ToolCall;
use super::grammar::Grammar;
use super::reasoning::partial_tag;
use serde_json::{json, Value};

/// The tag that opens a call.
pub const CALL_OPEN: &str = "<tool_call>";
/// The tag that closes it.
pub const CALL_CLOSE: &str = "</tool_call>";

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

/// The grammar for a required call: one `<tool_call>` block (or several, one per line, with
/// `parallel`) whose JSON names one of `tools` (only `only`, if given) and whose arguments
/// follow that tool's schema.
pub fn call_grammar(tools: &[ToolDef], only: Option<&str>, parallel: bool) -> Grammar {
    let bodies: Vec<String> = tools
        .iter()
        .filter(|t| only.is_none_or(|n| n == t.name))
        .map(|t| {
            let schema = json!({
                "type": "object",
                "properties": { "name": { "const": t.name }, "arguments": t.parameters },
                "required": ["name", "arguments"],
                "additionalProperties": false,
                "x-guidance": { "whitespace_flexible": false, "item_separator": ", ", "key_separator": ": " }
            });
            format!("%json {schema}")
        })
        .collect();
    let repeat = if parallel { " (\"\\n\" call)*" } else { "" };
    Grammar::Lark(format!(
        "start: call{repeat}\ncall: \"{CALL_OPEN}\\n\" body \"\\n{CALL_CLOSE}\"\nbody: {}\n",
        bodies.join("\n    | ")
    ))
}

/// Parses the JSON inside one call block: `{"name": string, "arguments": object}`.
fn parse_call(inner: &str) -> Option<ToolCall> {
    let v: Value = serde_json::from_str(inner.trim()).ok()?;
    let name = v.get("name")?.as_str()?.to_string();
    let arguments = match v.get("arguments") {
        Some(a @ Value::Object(_)) => a.to_string(),
        // Some models write the arguments as a JSON string.
        Some(Value::String(s)) if serde_json::from_str::<Value>(s).is_ok_and(|a| a.is_object()) => s.clone(),
        None => "{}".to_string(),
        _ => return None,
    };
    Some(ToolCall { name, arguments })
}

/// Splits an answer into its text (calls removed, trimmed) and its calls, in order. A
/// block whose JSON does not parse as a call stays in the text.
pub fn parse_tool_calls(text: &str) -> (String, Vec<ToolCall>) {
    let mut s = ToolCallSplitter::default();
    let (mut content, mut calls) = s.push(text);
    let (c, k) = s.finish();
    content.push_str(&c);
    calls.extend(k);
    (content.trim().to_string(), calls)
}

/// The streaming splitter: text outside call blocks is released as it comes (a possible
/// start of `<tool_call>` held back); a block is released as a call once it closes.
#[derive(Debug, Clone, Default)]
pub struct ToolCallSplitter {
    buf: String,
    in_call: bool,
}

impl ToolCallSplitter {
    /// Adds a piece; returns the text and the calls now complete.
    pub fn push(&mut self, piece: &str) -> (String, Vec<ToolCall>) {
        self.buf.push_str(piece);
        let (mut text, mut calls) = (String::new(), Vec::new());
        loop {
            if self.in_call {
                let Some(end) = self.buf.find(CALL_CLOSE) else {
                    return (text, calls);
                };
                let block: String = self.buf.drain(..end + CALL_CLOSE.len()).collect();
                match parse_call(&block[..end]) {
                    Some(c) => calls.push(c),
                    None => {
                        text.push_str(CALL_OPEN);
                        text.push_str(&block);
                    }
                }
                self.in_call = false;
            } else if let Some(at) = self.buf.find(CALL_OPEN) {
                text.push_str(&self.buf[..at]);
                self.buf.drain(..at + CALL_OPEN.len());
                self.in_call = true;
            } else {
                let upto = self.buf.len() - partial_tag(&self.buf, CALL_OPEN);
                text.push_str(&self.buf[..upto]);
                self.buf.drain(..upto);
                return (text, calls);
            }
        }
    }

    /// The end: an unclosed block is text.
    pub fn finish(&mut self) -> (String, Vec<ToolCall>) {
        let rest = std::mem::take(&mut self.buf);
        let text = if self.in_call { format!("{CALL_OPEN}{rest}") } else { rest };
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
