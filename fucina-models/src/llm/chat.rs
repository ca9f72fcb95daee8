//! The ChatML prompt format of Qwen (`<|im_start|>role\n…<|im_end|>\n`), with Qwen3's
//! thinking switch.

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Instructions for the assistant.
    System,
    /// The person.
    User,
    /// The model.
    Assistant,
}

impl Role {
    /// The role's name in the template.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
        }
    }

    /// Parses `system`, `user` or `assistant`.
    pub fn parse(s: &str) -> Option<Role> {
        Some(match s {
            // `developer` is the newer name OpenAI's API gives system instructions.
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            _ => return None,
        })
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The author.
    pub role: Role,
    /// The text.
    pub content: String,
}

impl Message {
    /// A message.
    pub fn new(role: Role, content: impl Into<String>) -> Message {
        Message { role, content: content.into() }
    }
}

/// The prompt format of a model's chat turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatFormat {
    /// ChatML (`<|im_start|>role ... <|im_end|>`), with Qwen3's thinking switch.
    ChatMl,
    /// DeepSeek-V3/R1: `<｜begin▁of▁sentence｜>system<｜User｜>...<｜Assistant｜>...<｜end▁of▁sentence｜>`.
    DeepSeekV3,
    /// DeepSeek-V2: `<｜begin▁of▁sentence｜>system\n\nUser: ...\n\nAssistant: ...<｜end▁of▁sentence｜>`.
    DeepSeekV2,
}

impl ChatFormat {
    /// The format a model's vocabulary implies: ChatML if it has `<|im_start|>`, DeepSeek-V3's
    /// if it has `<｜User｜>`, DeepSeek-V2's for other `deepseek2` files, ChatML otherwise.
    pub fn detect(has_token: impl Fn(&str) -> bool, arch: &str) -> ChatFormat {
        if has_token("<|im_start|>") {
            ChatFormat::ChatMl
        } else if has_token("<｜User｜>") {
            ChatFormat::DeepSeekV3
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
        const BOS: &str = "<｜begin▁of▁sentence｜>";
        const EOS: &str = "<｜end▁of▁sentence｜>";
        let mut p = Prompt::default();
        match self {
            ChatFormat::ChatMl => {
                for m in messages {
                    let content = match m.role {
                        Role::Assistant => strip_thinking(&m.content),
                        _ => m.content.as_str(),
                    };
                    p.control("<|im_start|>");
                    p.text(m.role.as_str());
                    p.text("\n");
                    p.text(content);
                    p.control("<|im_end|>");
                    p.text("\n");
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
            ChatFormat::DeepSeekV3 => {
                p.control(BOS);
                for m in messages.iter().filter(|m| m.role == Role::System) {
                    p.text(&m.content);
                }
                for m in messages.iter().filter(|m| m.role != Role::System) {
                    match m.role {
                        Role::User => {
                            p.control("<｜User｜>");
                            p.text(&m.content);
                        }
                        _ => {
                            p.control("<｜Assistant｜>");
                            p.text(strip_thinking(&m.content));
                            p.control(EOS);
                        }
                    }
                }
                p.control("<｜Assistant｜>");
            }
            ChatFormat::DeepSeekV2 => {
                p.control(BOS);
                for m in messages {
                    match m.role {
                        Role::System => {
                            p.text(&m.content);
                            p.text("\n\n");
                        }
                        Role::User => {
                            p.text("User: ");
                            p.text(&m.content);
                            p.text("\n\n");
                        }
                        Role::Assistant => {
                            p.text("Assistant: ");
                            p.text(&m.content);
                            p.control(EOS);
                        }
                    }
                }
                p.text("Assistant:");
            }
        }
        p
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
        assert_eq!(Role::parse("tool"), None);
        let m = [Message::new(Role::System, "S"), Message::new(Role::User, "Hi"), Message::new(Role::Assistant, "Yo")];
        assert_eq!(
            ChatFormat::DeepSeekV3.render(&m, true),
            "<｜begin▁of▁sentence｜>S<｜User｜>Hi<｜Assistant｜>Yo<｜end▁of▁sentence｜><｜Assistant｜>"
        );
        assert_eq!(ChatFormat::DeepSeekV2.render(&m[1..2], true), "<｜begin▁of▁sentence｜>User: Hi\n\nAssistant:");
        assert_eq!(ChatFormat::detect(|t| t == "<｜User｜>", "deepseek2"), ChatFormat::DeepSeekV3);
        assert_eq!(ChatFormat::detect(|_| false, "deepseek2"), ChatFormat::DeepSeekV2);
    }
}
