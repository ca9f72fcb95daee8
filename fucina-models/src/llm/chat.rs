//! The ChatML prompt format of Qwen (`<|im_start|>role\n…<|im_end|>\n`), with Qwen3's
//! thinking switch and its tool calling (hermes `<tool_call>` JSON, tool results as
//! `<tool_response>` user turns), and DeepSeek's formats (V3 and R1 with their tool calls
//! and tool outputs; V2), Llama 3.1's headers and Mistral's `[INST]` turns.

use super::tools::{ToolSyntax, DEEPSEEK_TAGS};

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Instructions for the assistant.
    System,
    /// The person.
    User,
    /// The model.
    Assistant,
    /// A tool's result, answering one of the assistant's tool calls.
    Tool,
}

impl Role {
    /// The role's name in the template.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    /// Parses `system` (or `developer`), `user`, `assistant` or `tool`.
    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            // `developer` is the newer name OpenAI's API gives system instructions.
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            _ => return None,
        })
    }
}

/// A function call the assistant made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The function's name.
    pub name: String,
    /// Its arguments, as JSON text.
    pub arguments: String,
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The author.
    pub role: Role,
    /// The text.
    pub content: String,
    /// The assistant's tool calls (after its text).
    pub tool_calls: Vec<ToolCall>,
}

impl Message {
    /// A message.
    pub fn new(role: Role, content: impl Into<String>) -> Message {
        Message { role, content: content.into(), tool_calls: Vec::new() }
    }
}

/// `v` as Python's `json.dumps(v, ensure_ascii=False)` writes it (`", "` and `": "`, keys in
/// their order): what chat templates' `tojson` produces.
pub fn py_json(v: &serde_json::Value) -> String {
    use serde_json::Value;
    match v {
        Value::Array(a) => format!("[{}]", a.iter().map(py_json).collect::<Vec<_>>().join(", ")),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("{}: {}", Value::String(k.clone()), py_json(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        other => other.to_string(),
    }
}

/// `s` without `chars` at either end, as Python's `str.strip(chars)`.
fn strip_nl(s: &str) -> &str {
    s.trim_matches('\n')
}

/// The prompt format of a model's chat turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatFormat {
    /// ChatML (`<|im_start|>role ... <|im_end|>`), with Qwen3's thinking switch.
    ChatMl,
    /// DeepSeek-V3: `<｜begin▁of▁sentence｜>system<｜User｜>...<｜Assistant｜>...<｜end▁of▁sentence｜>`.
    DeepSeekV3,
    /// DeepSeek-R1: V3's turns, with the answer's `<think>` opened by the prompt (and closed
    /// at once without thinking).
    DeepSeekR1,
    /// DeepSeek-V2: `<｜begin▁of▁sentence｜>system\n\nUser: ...\n\nAssistant: ...<｜end▁of▁sentence｜>`.
    DeepSeekV2,
    /// Llama 3.1/3.2/3.3: `<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>`, the system
    /// turn first with the template's knowledge and date lines.
    Llama3,
    /// Mistral's (v0.3, Nemo): `<s>[INST]user[/INST]answer</s>`, the system prompt before the
    /// last user message.
    Mistral,
    /// GLM-4.5/4.6: `[gMASK]<sop><|system|>\n...<|user|>\n...<|assistant|>`, thinking turned
    /// off by `/nothink` on each user turn and an empty `<think></think>` after the prompt.
    Glm4,
    /// nanochat: `<|bos|><|user_start|>...<|user_end|><|assistant_start|>...<|assistant_end|>`,
    /// a system message joined to the first user message as nanochat does.
    NanoChat,
    /// Gemma 4: `<bos><|turn>user\n...<turn|>\n<|turn>model\n`, the thinking switch as
    /// `<|think|>` in the system turn, and an empty thought channel opening the answer when
    /// thinking is off.
    Gemma4,
}

impl ChatFormat {
    /// The format a model's vocabulary implies: ChatML if it has `<|im_start|>`, Llama 3's if
    /// it has `<|start_header_id|>`, Mistral's if the file's chat `template` writes `[INST]`,
    /// DeepSeek's
    /// if it has `<｜User｜>` (R1's when the file's chat `template` opens `<think>` after
    /// `<｜Assistant｜>`, V3's otherwise), DeepSeek-V2's for other `deepseek2` files, GLM's
    /// if it has `[gMASK]` and `<|assistant|>`, nanochat's if it has `<|user_start|>` and
    /// `<|assistant_start|>`, Gemma 4's if it has `<|turn>` and `<turn|>`, ChatML otherwise.
    pub fn detect(has_token: impl Fn(&str) -> bool, arch: &str, template: Option<&str>) -> ChatFormat {
        if has_token("[gMASK]") && has_token("<|assistant|>") {
            ChatFormat::Glm4
        } else if has_token("<|turn>") && has_token("<turn|>") {
            ChatFormat::Gemma4
        } else if has_token("<|assistant_start|>") && has_token("<|user_start|>") {
            ChatFormat::NanoChat
        } else if has_token("<|im_start|>") {
            ChatFormat::ChatMl
        } else if has_token("<|start_header_id|>") {
            ChatFormat::Llama3
        } else if template.is_some_and(|t| t.contains("[INST]")) {
            ChatFormat::Mistral
        } else if has_token("<｜User｜>") {
            if template.is_some_and(|t| t.contains("<｜Assistant｜><think>")) {
                ChatFormat::DeepSeekR1
            } else {
                ChatFormat::DeepSeekV3
            }
        } else if arch == "deepseek2" {
            ChatFormat::DeepSeekV2
        } else {
            ChatFormat::ChatMl
        }
    }

    /// Renders `messages` and opens the assistant's turn (`think` applies to ChatML only),
    /// as one string (control tokens written out; for display and tests — tokenize a
    /// [`ChatFormat::prompt`] instead, which keeps message text from becoming control tokens).
    pub fn render(self, messages: &[Message], think: bool) -> String {
        self.prompt(messages, think).text_form()
    }

    /// Renders `messages` as a [`Prompt`]: the template's control tokens marked as such,
    /// message text as plain text that is never parsed for control tokens.
    pub fn prompt(self, messages: &[Message], think: bool) -> Prompt {
        self.prompt_with_tools(messages, &[], think)
    }

    /// How the format writes tool calls, if it has them ([`ChatFormat::prompt_with_tools`]
    /// renders tools, calls and results): Qwen3's hermes blocks for ChatML, DeepSeek's for
    /// V3 and R1 (which need their tags in the vocabulary: [`ToolSyntax::tags`]).
    pub fn tool_syntax(self) -> Option<ToolSyntax> {
        match self {
            ChatFormat::ChatMl => Some(ToolSyntax::Hermes),
            ChatFormat::DeepSeekV3 | ChatFormat::DeepSeekR1 => Some(ToolSyntax::DeepSeek),
            ChatFormat::DeepSeekV2
            | ChatFormat::Llama3
            | ChatFormat::Mistral
            | ChatFormat::Glm4
            | ChatFormat::NanoChat
            | ChatFormat::Gemma4 => None,
        }
    }

    /// The tags around the format's reasoning: Gemma 4's thought channel, `<think>` for the
    /// others.
    pub fn reasoning_tags(self) -> crate::llm::reasoning::ReasoningTags {
        match self {
            ChatFormat::Gemma4 => crate::llm::reasoning::ReasoningTags::GEMMA4,
            _ => crate::llm::reasoning::ReasoningTags::THINK,
        }
    }

    /// Whether the prompt opens the answer's reasoning itself (R1 with thinking on), so
    /// the answer starts inside `<think>`.
    pub fn opens_reasoning(self, think: bool) -> bool {
        self == ChatFormat::DeepSeekR1 && think
    }

    /// [`ChatFormat::prompt`] with function `tools` (OpenAI's `{"type": "function",
    /// "function": {...}}` objects) and the messages' tool calls and tool results: as Qwen3's
    /// template renders them for ChatML (the tools as JSON in the system turn); for DeepSeek
    /// V3/R1 as their template renders calls and outputs, the tools (which their template
    /// leaves to the caller) described after the system prompt with the call syntax.
    /// Formats without tool calls ignore `tools` ([`ChatFormat::tool_syntax`]).
    pub fn prompt_with_tools(self, messages: &[Message], tools: &[serde_json::Value], think: bool) -> Prompt {
        let mut p = Prompt::default();
        match self {
            ChatFormat::ChatMl => {
                let first_system = messages.first().filter(|m| m.role == Role::System);
                if !tools.is_empty() {
                    p.control("<|im_start|>");
                    p.text("system\n");
                    if let Some(m) = first_system {
                        p.text(&m.content);
                        p.text("\n\n");
                    }
                    p.text("# Tools\n\nYou may call one or more functions to assist with the user query.\n\n");
                    p.text("You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
                    for t in tools {
                        p.text("\n");
                        p.text(&py_json(t));
                    }
                    p.text("\n</tools>\n\nFor each function call, return a json object with function name and ");
                    p.text("arguments within <tool_call></tool_call> XML tags:\n");
                    p.control("<tool_call>");
                    p.text("\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n");
                    p.control("</tool_call>");
                    p.control("<|im_end|>");
                    p.text("\n");
                } else if let Some(m) = first_system {
                    p.control("<|im_start|>");
                    p.text("system\n");
                    p.text(&m.content);
                    p.control("<|im_end|>");
                    p.text("\n");
                }
                // The last user message that is not a tool result: assistant turns after it
                // (a tool-calling loop in progress) keep their reasoning.
                let is_result = |c: &str| c.starts_with("<tool_response>") && c.ends_with("</tool_response>");
                let last_query = messages
                    .iter()
                    .rposition(|m| m.role == Role::User && !is_result(&m.content))
                    .unwrap_or(messages.len().saturating_sub(1));
                for (i, m) in messages.iter().enumerate() {
                    match m.role {
                        Role::System if i == 0 => {}
                        Role::System | Role::User => {
                            p.control("<|im_start|>");
                            p.text(m.role.as_str());
                            p.text("\n");
                            p.text(&m.content);
                            p.control("<|im_end|>");
                            p.text("\n");
                        }
                        Role::Assistant => {
                            let (mut content, mut reasoning) = (m.content.as_str(), "");
                            if let Some(end) = m.content.rfind("</think>") {
                                content = m.content[end + "</think>".len()..].trim_start_matches('\n');
                                let before =
                                    m.content[..m.content.find("</think>").unwrap_or(end)].trim_end_matches('\n');
                                reasoning = before.rsplit("<think>").next().unwrap_or("").trim_start_matches('\n');
                            }
                            p.control("<|im_start|>");
                            p.text("assistant\n");
                            if i > last_query && (i + 1 == messages.len() || !reasoning.is_empty()) {
                                p.control("<think>");
                                p.text("\n");
                                p.text(strip_nl(reasoning));
                                p.text("\n");
                                p.control("</think>");
                                p.text("\n\n");
                                p.text(content.trim_start_matches('\n'));
                            } else {
                                p.text(content);
                            }
                            for (k, c) in m.tool_calls.iter().enumerate() {
                                if k > 0 || !content.is_empty() {
                                    p.text("\n");
                                }
                                p.control("<tool_call>");
                                p.text("\n{\"name\": \"");
                                p.text(&c.name);
                                p.text("\", \"arguments\": ");
                                p.text(&c.arguments);
                                p.text("}\n");
                                p.control("</tool_call>");
                            }
                            p.control("<|im_end|>");
                            p.text("\n");
                        }
                        Role::Tool => {
                            if i == 0 || messages[i - 1].role != Role::Tool {
                                p.control("<|im_start|>");
                                p.text("user");
                            }
                            tool_response(&mut p, &m.content);
                            if i + 1 == messages.len() || messages[i + 1].role != Role::Tool {
                                p.control("<|im_end|>");
                                p.text("\n");
                            }
                        }
                    }
                }
                p.control("<|im_start|>");
                p.text("assistant\n");
                if !think {
                    p.control("<think>");
                    p.text("\n\n");
                    p.control("</think>");
                    p.text("\n\n");
                }
            }
            ChatFormat::DeepSeekV3 | ChatFormat::DeepSeekR1 => deepseek_prompt(self, &mut p, messages, tools, think),
            ChatFormat::Llama3 => llama3_prompt(&mut p, messages),
            ChatFormat::Mistral => mistral_prompt(&mut p, messages),
            ChatFormat::Glm4 => glm4_prompt(&mut p, messages, think),
            ChatFormat::NanoChat => nanochat_prompt(&mut p, messages),
            ChatFormat::Gemma4 => gemma4_prompt(&mut p, messages, think),
            ChatFormat::DeepSeekV2 => {
                p.control(DS_BOS);
                for m in messages {
                    match m.role {
                        Role::System => {
                            p.text(&m.content);
                            p.text("\n\n");
                        }
                        Role::User | Role::Tool => {
                            p.text("User: ");
                            p.text(&m.content);
                            p.text("\n\n");
                        }
                        Role::Assistant => {
                            p.text("Assistant: ");
                            p.text(&m.content);
                            p.control(DS_EOS);
                        }
                    }
                }
                p.text("Assistant:");
            }
        }
        p
    }
}

/// GLM-4.5/4.6 as their template renders them (without tools): every message in place —
/// `<|system|>\n` and `<|user|>\n` turns (`/nothink` appended to each user turn when
/// thinking is off, unless it ends so already); assistant turns as `<|assistant|>`, then
/// `\n<think>REASONING</think>` for turns after the last user message that have reasoning
/// and `\n<think></think>` otherwise, then `\n` and the trimmed answer if any, then each tool
/// call as `\n<tool_call>NAME` with `\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>` per
/// argument (strings as they are, other values as JSON) and `\n</tool_call>`; tool results
/// as `\n<tool_response>\n...\n</tool_response>` after one `<|observation|>` per run. The
/// answer's turn is `<|assistant|>`, with `\n<think></think>` when thinking is off.
fn glm4_prompt(p: &mut Prompt, messages: &[Message], think: bool) {
    p.control("[gMASK]");
    p.control("<sop>");
    let last_user = messages.iter().rposition(|m| m.role == Role::User);
    for (i, m) in messages.iter().enumerate() {
        match m.role {
            Role::System => {
                p.control("<|system|>");
                p.text("\n");
                p.text(&m.content);
            }
            Role::User => {
                p.control("<|user|>");
                p.text("\n");
                p.text(&m.content);
                if !think && !m.content.ends_with("/nothink") {
                    p.text("/nothink");
                }
            }
            Role::Assistant => {
                let (mut content, mut reasoning) = (m.content.as_str(), "");
                if let Some(end) = m.content.find("</think>") {
                    let before = m.content[..end].trim_end_matches('\n');
                    reasoning = before.rsplit("<think>").next().unwrap_or("").trim_start_matches('\n');
                    content = m.content.rsplit("</think>").next().unwrap_or("").trim_start_matches('\n');
                }
                p.control("<|assistant|>");
                p.text("\n");
                p.control("<think>");
                if last_user.is_none_or(|u| i > u) && !reasoning.is_empty() {
                    p.text(py_strip(reasoning));
                }
                p.control("</think>");
                if !py_strip(content).is_empty() {
                    p.text("\n");
                    p.text(py_strip(content));
                }
                for c in &m.tool_calls {
                    p.text("\n");
                    p.control("<tool_call>");
                    p.text(&c.name);
                    p.text("\n");
                    if let Ok(serde_json::Value::Object(args)) = serde_json::from_str(&c.arguments) {
                        for (k, v) in args {
                            p.control("<arg_key>");
                            p.text(&k);
                            p.control("</arg_key>");
                            p.text("\n");
                            p.control("<arg_value>");
                            match &v {
                                serde_json::Value::String(v) => p.text(v),
                                v => p.text(&py_json(v)),
                            }
                            p.control("</arg_value>");
                            p.text("\n");
                        }
                    }
                    p.control("</tool_call>");
                }
            }
            Role::Tool => {
                if i == 0 || messages[i - 1].role != Role::Tool {
                    p.control("<|observation|>");
                }
                tool_response(p, &m.content);
            }
        }
    }
    p.control("<|assistant|>");
    if !think {
        p.text("\n");
        p.control("<think>");
        p.control("</think>");
    }
}

/// A tool result as Qwen3's and GLM's templates write it: `\n<tool_response>\n...\n</tool_response>`.
fn tool_response(p: &mut Prompt, content: &str) {
    p.text("\n");
    p.control("<tool_response>");
    p.text("\n");
    p.text(content);
    p.text("\n");
    p.control("</tool_response>");
}

/// Python's `str.strip()`: whitespace off both ends.
fn py_strip(s: &str) -> &str {
    s.trim()
}

const DS_BOS: &str = "<｜begin▁of▁sentence｜>";
const DS_EOS: &str = "<｜end▁of▁sentence｜>";
const DS_OUTPUTS_BEGIN: &str = "<｜tool▁outputs▁begin｜>";
const DS_OUTPUTS_END: &str = "<｜tool▁outputs▁end｜>";
const DS_OUTPUT_BEGIN: &str = "<｜tool▁output▁begin｜>";
const DS_OUTPUT_END: &str = "<｜tool▁output▁end｜>";

/// Tool-call arguments as the template's `tojson` writes an object, or as given when they
/// are not JSON.
fn template_args(arguments: &str) -> String {
    serde_json::from_str::<serde_json::Value>(arguments).map_or_else(|_| arguments.to_string(), |v| py_json(&v))
}

/// One DeepSeek tool call: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\n```json\nARGS\n```<｜tool▁call▁end｜>`.
fn deepseek_call(p: &mut Prompt, name: &str, arguments: &str) {
    let [_, _, begin, end, sep] = DEEPSEEK_TAGS;
    p.control(begin);
    p.text("function");
    p.control(sep);
    p.text(name);
    p.text("\n```json\n");
    p.text(arguments);
    p.text("\n```");
    p.control(end);
}

/// DeepSeek V3/R1 as their template renders them: the system prompts (joined by blank
/// lines) after BOS; `<｜User｜>` turns; assistant turns (reasoning dropped) with their tool
/// calls in one `<｜tool▁calls▁begin｜>` block, each ended by EOS; tool results as
/// `<｜tool▁output▁begin｜>` items of a `<｜tool▁outputs▁begin｜>` run, which the next
/// assistant turn continues after `<｜tool▁outputs▁end｜>`. Two places where the template
/// misbehaves are rendered the sane way: every run of tool results opens its own block (the
/// template opens only the first of a conversation), and a turn after a run closes it.
fn deepseek_prompt(format: ChatFormat, p: &mut Prompt, messages: &[Message], tools: &[serde_json::Value], think: bool) {
    p.control(DS_BOS);
    let system: Vec<&str> = messages.iter().filter(|m| m.role == Role::System).map(|m| m.content.as_str()).collect();
    p.text(&system.join("\n\n"));
    if !tools.is_empty() {
        let [open, close, ..] = DEEPSEEK_TAGS;
        if !system.is_empty() {
            p.text("\n\n");
        }
        p.text("## Tools\n\nYou can call these functions (their parameters are JSON schemas):\n");
        for t in tools {
            p.text(&py_json(t.get("function").unwrap_or(t)));
            p.text("\n");
        }
        p.text("\nTo call functions, answer with one block holding each call, its arguments as JSON:\n");
        p.control(open);
        deepseek_call(p, "function_name", "{\"parameter\": \"value\"}");
        p.control(close);
        p.text("\n");
    }
    let mut in_outputs = false;
    for m in messages.iter().filter(|m| m.role != Role::System) {
        match m.role {
            Role::Tool => {
                if in_outputs {
                    p.text("\n");
                } else {
                    p.control(DS_OUTPUTS_BEGIN);
                    in_outputs = true;
                }
                p.control(DS_OUTPUT_BEGIN);
                p.text(&m.content);
                p.control(DS_OUTPUT_END);
                continue;
            }
            Role::Assistant if in_outputs => p.control(DS_OUTPUTS_END),
            Role::Assistant => p.control("<｜Assistant｜>"),
            _ => {
                if in_outputs {
                    p.control(DS_OUTPUTS_END);
                }
                p.control("<｜User｜>");
                p.text(&m.content);
            }
        }
        in_outputs = false;
        if m.role == Role::Assistant {
            // What follows the last `</think>`, as it is (the template's `split('</think>')[-1]`).
            p.text(m.content.rsplit("</think>").next().unwrap_or_default());
            if !m.tool_calls.is_empty() {
                let [open, close, ..] = DEEPSEEK_TAGS;
                p.control(open);
                for (k, c) in m.tool_calls.iter().enumerate() {
                    if k > 0 {
                        p.text("\n");
                    }
                    deepseek_call(p, &c.name, &template_args(&c.arguments));
                }
                p.control(close);
            }
            p.control(DS_EOS);
        }
    }
    if in_outputs {
        // The model goes on after the results, in the assistant's turn.
        p.control(DS_OUTPUTS_END);
        return;
    }
    p.control("<｜Assistant｜>");
    if format == ChatFormat::DeepSeekR1 {
        p.control("<think>");
        p.text("\n");
        if !think {
            p.control("</think>");
        }
    }
}

/// Llama 3.1's template without tools: BOS, the system turn (always there: the template's
/// knowledge-cutoff and date lines, then the first system message, trimmed), then each turn
/// as a header and its trimmed text, tool results as `ipython` turns (JSON strings) and an assistant's
/// (single) tool call as the template's `{"name": ..., "parameters": ...}` JSON, then the
/// assistant's header. The date is the template's default (no `date_string` is passed).
/// nanochat's conversation: `<|bos|>`, then `<|user_start|>TEXT<|user_end|>` and
/// `<|assistant_start|>TEXT<|assistant_end|>` turns (tool results as user turns), a leading
/// system message joined to the next user message by a blank line, then `<|assistant_start|>`.
fn nanochat_prompt(p: &mut Prompt, messages: &[Message]) {
    p.control("<|bos|>");
    let mut system: Option<&str> = None;
    for (i, m) in messages.iter().enumerate() {
        match m.role {
            Role::System if i == 0 => system = Some(&m.content),
            Role::System | Role::User | Role::Tool => {
                p.control("<|user_start|>");
                if let Some(s) = system.take() {
                    p.text(s);
                    p.text("\n\n");
                }
                p.text(&m.content);
                p.control("<|user_end|>");
            }
            Role::Assistant => {
                p.control("<|assistant_start|>");
                p.text(&m.content);
                p.control("<|assistant_end|>");
            }
        }
    }
    p.control("<|assistant_start|>");
}

fn llama3_prompt(p: &mut Prompt, messages: &[Message]) {
    let header = |p: &mut Prompt, role: &str| {
        p.control("<|start_header_id|>");
        p.text(role);
        p.control("<|end_header_id|>");
        p.text("\n\n");
    };
    p.control("<|begin_of_text|>");
    let (system, rest) = match messages.split_first() {
        Some((m, rest)) if m.role == Role::System => (m.content.trim(), rest),
        _ => ("", messages),
    };
    header(p, "system");
    p.text("Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
    p.text(system);
    p.control("<|eot_id|>");
    for m in rest {
        match (m.role, m.tool_calls.first()) {
            (Role::Tool, _) => {
                // The template's `tojson` on the result (a string is iterable to jinja).
                header(p, "ipython");
                p.text(&py_json(&serde_json::Value::String(m.content.clone())));
            }
            (Role::Assistant, Some(c)) => {
                header(p, "assistant");
                p.text(&format!("{{\"name\": \"{}\", \"parameters\": {}}}", c.name, template_args(&c.arguments)));
            }
            (role, _) => {
                header(p, role.as_str());
                p.text(m.content.trim());
            }
        }
        p.control("<|eot_id|>");
    }
    header(p, "assistant");
}

/// Mistral's template (v0.3, Nemo) without tools: BOS, then `[INST]user[/INST]` and
/// `answer</s>` turns, the first system message before the last user message's text; tool
/// results as its `[TOOL_RESULTS]` JSON are not built (a tool turn is written as a user turn).
fn mistral_prompt(p: &mut Prompt, messages: &[Message]) {
    let (system, rest) = match messages.split_first() {
        Some((m, rest)) if m.role == Role::System => (Some(m.content.as_str()), rest),
        _ => (None, messages),
    };
    let last_user = rest.iter().rposition(|m| m.role == Role::User);
    p.control("<s>");
    for (i, m) in rest.iter().enumerate() {
        if m.role == Role::Assistant {
            p.text(&m.content);
            p.control("</s>");
            continue;
        }
        p.control("[INST]");
        if let (Some(s), true) = (system, Some(i) == last_user) {
            p.text(s);
            p.text("\n\n");
        }
        p.text(&m.content);
        p.control("[/INST]");
    }
}

/// Gemma 4 as its template renders a conversation without tools: `<bos>`, then a system turn
/// when thinking is on (`<|think|>\n` first) or the first message is a system message (its
/// text trimmed); each other message as `<|turn>ROLE\n` (`model` for the assistant; no new
/// header for an assistant message right after another), its text trimmed — an assistant's
/// with its thought channels (`<|channel>...<channel|>`) removed — and `<turn|>\n`. The
/// answer's turn is `<|turn>model\n`, with an empty thought channel when thinking is off.
/// Tool results (which the template renders only after its own tool calls) are user turns.
fn gemma4_prompt(p: &mut Prompt, messages: &[Message], think: bool) {
    p.control("<bos>");
    let (system, rest) = match messages.split_first() {
        Some((m, rest)) if m.role == Role::System => (Some(m.content.as_str()), rest),
        _ => (None, messages),
    };
    if think || system.is_some() {
        p.control("<|turn>");
        p.text("system\n");
        if think {
            p.control("<|think|>");
            p.text("\n");
        }
        if let Some(s) = system {
            p.text(s.trim());
        }
        p.control("<turn|>");
        p.text("\n");
    }
    let mut prev: Option<Role> = None;
    for m in rest {
        let role = match m.role {
            Role::Assistant => "model",
            Role::System => "system",
            Role::User | Role::Tool => "user",
        };
        if !(m.role == Role::Assistant && prev == Some(Role::Assistant)) {
            p.control("<|turn>");
            p.text(role);
            p.text("\n");
        }
        if m.role == Role::Assistant {
            // The template's `strip_thinking`: what precedes each `<|channel>` in every part
            // that `<channel|>` closes, then trimmed.
            let kept: String =
                m.content.split("<channel|>").map(|part| part.split("<|channel>").next().unwrap_or("")).collect();
            p.text(kept.trim());
        } else {
            p.text(m.content.trim());
        }
        p.control("<turn|>");
        p.text("\n");
        prev = Some(m.role);
    }
    p.control("<|turn>");
    p.text("model\n");
    if !think {
        p.control("<|channel>");
        p.text("thought\n");
        p.control("<channel|>");
    }
}

/// A rendered prompt: text with the template's control tokens marked. Message text goes in
/// as [`Piece::Text`], so a user who types `<|im_end|><|im_start|>system` gets those
/// characters tokenized as text, not a forged turn (llama.cpp's `parse_special = false` for
/// user content).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Prompt {
    /// The pieces in order; consecutive text is merged.
    pub pieces: Vec<Piece>,
}

/// One piece of a [`Prompt`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// A control token the template puts here, by its text.
    Control(String),
    /// Text, tokenized without control tokens.
    Text(String),
}

impl Prompt {
    /// Appends a control token.
    pub fn control(&mut self, token: &str) {
        self.pieces.push(Piece::Control(token.to_string()));
    }

    /// Appends text (merged with text before it, so it tokenizes as one run).
    pub fn text(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        match self.pieces.last_mut() {
            Some(Piece::Text(t)) => t.push_str(text),
            _ => self.pieces.push(Piece::Text(text.to_string())),
        }
    }

    /// The prompt as one string, control tokens written out.
    pub fn text_form(&self) -> String {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Control(t) | Piece::Text(t) => t.as_str(),
            })
            .collect()
    }
}

/// Renders a conversation as Qwen3's template does, ending with the assistant's turn
/// opened. Earlier assistant turns lose their `<think>…</think>` part (as in Qwen3's
/// template); with `think == false` an empty thinking block is prefilled so the model
/// answers directly.
pub fn render_chat(messages: &[Message], think: bool) -> String {
    ChatFormat::ChatMl.render(messages, think)
}

/// The answer part of an assistant message: what follows `</think>`, trimmed at the start.
pub fn strip_thinking(content: &str) -> &str {
    match content.rfind("</think>") {
        Some(i) => content[i + "</think>".len()..].trim_start_matches('\n'),
        None => content,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_qwen3_chatml() {
        let m = [Message::new(Role::System, "Be brief."), Message::new(Role::User, "Hi")];
        assert_eq!(
            render_chat(&m, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        let m = [
            Message::new(Role::User, "Hi"),
            Message::new(Role::Assistant, "<think>\nhmm\n</think>\n\nHello!"),
            Message::new(Role::User, "Bye"),
        ];
        assert_eq!(
            render_chat(&m, false),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n\
             <|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
        );
        assert_eq!(Role::parse("tool"), Some(Role::Tool));
        let m = [Message::new(Role::System, "S"), Message::new(Role::User, "Hi"), Message::new(Role::Assistant, "Yo")];
        assert_eq!(
            ChatFormat::DeepSeekV3.render(&m, true),
            "<｜begin▁of▁sentence｜>S<｜User｜>Hi<｜Assistant｜>Yo<｜end▁of▁sentence｜><｜Assistant｜>"
        );
        assert_eq!(ChatFormat::DeepSeekV2.render(&m[1..2], true), "<｜begin▁of▁sentence｜>User: Hi\n\nAssistant:");
        assert_eq!(ChatFormat::detect(|t| t == "<｜User｜>", "deepseek2", None), ChatFormat::DeepSeekV3);
        let r1 = Some("{{'<｜Assistant｜><think>\\n'}}");
        assert_eq!(ChatFormat::detect(|t| t == "<｜User｜>", "deepseek2", r1), ChatFormat::DeepSeekR1);
        assert_eq!(ChatFormat::detect(|_| false, "deepseek2", None), ChatFormat::DeepSeekV2);
    }
}
