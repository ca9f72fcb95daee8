//! A chat answer's text turned into OpenAI's message fields as it streams: the `<think>`
//! block into `reasoning_content` (when asked), tool-call blocks (in the model's syntax)
//! into `tool_calls` (when the request has tools), the rest into `content`. The whole answer goes through the
//! same splitters as the stream, so both say the same.

use crate::llm::chat::ToolCall;
use crate::llm::reasoning::{ReasoningSplitter, ReasoningTags};
use crate::llm::tools::{ToolCallSplitter, ToolSyntax};
use serde_json::{json, Map, Value};

/// What one piece of the answer adds to each field.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delta {
    /// Reasoning text.
    pub reasoning: String,
    /// Reply text.
    pub content: String,
    /// Calls completed in this piece, with their index in the answer and their id.
    pub calls: Vec<(usize, String, ToolCall)>,
}

impl Delta {
    /// Whether the piece adds nothing.
    pub fn is_empty(&self) -> bool {
        self.reasoning.is_empty() && self.content.is_empty() && self.calls.is_empty()
    }

    /// The fields of a streamed `delta` (or of a message, for a whole answer).
    pub fn fields(&self) -> Map<String, Value> {
        let mut d = Map::new();
        if !self.reasoning.is_empty() {
            d.insert("reasoning_content".into(), json!(self.reasoning));
        }
        if !self.content.is_empty() {
            d.insert("content".into(), json!(self.content));
        }
        if !self.calls.is_empty() {
            let calls: Vec<Value> = self
                .calls
                .iter()
                .map(|(index, id, c)| {
                    json!({ "index": index, "id": id, "type": "function",
                            "function": { "name": c.name, "arguments": c.arguments } })
                })
                .collect();
            d.insert("tool_calls".into(), Value::Array(calls));
        }
        d
    }
}

/// How a chat answer is split.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SplitSpec {
    /// Reasoning goes to `reasoning_content` (else it stays in `content`).
    pub separate_reasoning: bool,
    /// The prompt opened the reasoning (DeepSeek-R1's `<think>`): the answer starts inside it.
    pub opened_reasoning: bool,
    /// The request has tools, which the model calls in this syntax.
    pub tools: Option<ToolSyntax>,
    /// The tags around the model's reasoning.
    pub tags: ReasoningTags,
}

/// The splitter for one answer.
#[derive(Debug, Clone)]
pub struct ChatSplit {
    reasoning: Option<ReasoningSplitter>,
    tools: Option<ToolCallSplitter>,
    calls: usize,
    id: String,
}

impl ChatSplit {
    /// Splits as `spec` says; call ids are `call_{id}_{index}`.
    pub fn new(spec: SplitSpec, id: &str) -> ChatSplit {
        ChatSplit {
            reasoning: spec.separate_reasoning.then(|| ReasoningSplitter::with_tags(spec.opened_reasoning, spec.tags)),
            tools: spec.tools.map(ToolCallSplitter::new),
            calls: 0,
            id: id.to_string(),
        }
    }

    fn reply(&mut self, reasoning: String, content: String, last: bool) -> Delta {
        let Some(t) = self.tools.as_mut() else {
            return Delta { reasoning, content, calls: Vec::new() };
        };
        let (mut content, mut calls) = t.push(&content);
        if last {
            let (c, k) = t.finish();
            content.push_str(&c);
            calls.extend(k);
        }
        let calls = calls
            .into_iter()
            .map(|c| {
                self.calls += 1;
                (self.calls - 1, format!("call_{}_{}", self.id, self.calls - 1), c)
            })
            .collect();
        Delta { reasoning, content, calls }
    }

    /// Adds a piece of the answer.
    pub fn push(&mut self, text: &str) -> Delta {
        let (r, c) = match self.reasoning.as_mut() {
            Some(s) => s.push(text),
            None => (String::new(), text.to_string()),
        };
        self.reply(r, c, false)
    }

    /// The end of the answer: everything held back.
    pub fn finish(&mut self) -> Delta {
        let (r, c) = match self.reasoning.as_mut() {
            Some(s) => s.finish(),
            None => (String::new(), String::new()),
        };
        self.reply(r, c, true)
    }

    /// Whether any tool call was made (the finish reason is then `tool_calls`).
    pub fn made_calls(&self) -> bool {
        self.calls > 0
    }

    /// A whole answer as message fields: `content` (trimmed when tools are on; `null` when
    /// only calls were made), `reasoning_content` when there was reasoning, `tool_calls`.
    pub fn message(mut self, text: &str) -> Map<String, Value> {
        let a = self.push(text);
        let b = self.finish();
        let had_reasoning = self.reasoning.as_ref().is_some_and(ReasoningSplitter::had_reasoning);
        let mut content = a.content + &b.content;
        if self.tools.is_some() {
            content = content.trim().to_string();
        }
        let calls: Vec<_> = a.calls.into_iter().chain(b.calls).collect();
        let mut m = Delta { reasoning: String::new(), content: String::new(), calls }.fields();
        let content = if content.is_empty() && self.calls > 0 { Value::Null } else { json!(content) };
        m.insert("content".into(), content);
        if had_reasoning {
            m.insert("reasoning_content".into(), json!(a.reasoning + &b.reasoning));
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(separate_reasoning: bool, tools: Option<ToolSyntax>) -> SplitSpec {
        SplitSpec { separate_reasoning, opened_reasoning: false, tools, tags: ReasoningTags::THINK }
    }

    #[test]
    fn deepseek_calls_after_reasoning_the_prompt_opened() {
        let text = "plan\n</think>\n\nOn it.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n{\"a\": 1}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>g\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
        let s = SplitSpec {
            separate_reasoning: true,
            opened_reasoning: true,
            tools: Some(ToolSyntax::DeepSeek),
            tags: ReasoningTags::THINK,
        };
        let m = ChatSplit::new(s, "d").message(text);
        assert_eq!(m["reasoning_content"], "plan\n");
        assert_eq!(m["content"], "On it.");
        assert_eq!(m["tool_calls"][0]["function"]["name"], "f");
        assert_eq!(m["tool_calls"][0]["function"]["arguments"], r#"{"a":1}"#);
        assert_eq!(m["tool_calls"][1]["id"], "call_d_1");
        // Hermes blocks are text to a DeepSeek splitter.
        let m = ChatSplit::new(spec(false, Some(ToolSyntax::DeepSeek)), "e")
            .message("<tool_call>\n{\"name\": \"g\"}\n</tool_call>");
        assert!(m.get("tool_calls").is_none());
    }

    #[test]
    fn reasoning_then_text_then_calls() {
        let text = "<think>\nplan\n</think>\n\nOn it.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
        let m = ChatSplit::new(spec(true, Some(ToolSyntax::Hermes)), "x").message(text);
        assert_eq!(m["reasoning_content"], "\nplan\n");
        assert_eq!(m["content"], "On it.");
        assert_eq!(m["tool_calls"][0]["id"], "call_x_0");
        assert_eq!(m["tool_calls"][0]["function"]["name"], "f");
        // Streamed char by char: the same fields.
        let mut s = ChatSplit::new(spec(true, Some(ToolSyntax::Hermes)), "x");
        let mut all = Delta::default();
        for ch in text.chars().map(String::from).chain([String::new()]) {
            let d = if ch.is_empty() { s.finish() } else { s.push(&ch) };
            all.reasoning += &d.reasoning;
            all.content += &d.content;
            all.calls.extend(d.calls);
        }
        assert_eq!((all.reasoning.as_str(), all.content.trim(), all.calls.len()), ("\nplan\n", "On it.", 1));
        assert!(s.made_calls());
        // Only calls: content is null.
        let m = ChatSplit::new(spec(false, Some(ToolSyntax::Hermes)), "y")
            .message("<tool_call>\n{\"name\": \"g\"}\n</tool_call>");
        assert!(m["content"].is_null());
        assert_eq!(m["tool_calls"][0]["function"]["arguments"], "{}");
    }
}
