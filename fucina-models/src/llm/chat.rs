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
            "system" => Role::System,
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

    /// Renders `messages` and opens the assistant's turn (`think` applies to ChatML only).
    pub fn render(self, messages: &[Message], think: bool) -> String {
        const BOS: &str = "<｜begin▁of▁sentence｜>";
        const EOS: &str = "<｜end▁of▁sentence｜>";
        match self {
            ChatFormat::ChatMl => render_chat(messages, think),
            ChatFormat::DeepSeekV3 => {
                let mut s = String::from(BOS);
                for m in messages.iter().filter(|m| m.role == Role::System) {
                    s.push_str(&m.content);
                }
                for m in messages.iter().filter(|m| m.role != Role::System) {
                    match m.role {
                        Role::User => {
                            s.push_str("<｜User｜>");
                            s.push_str(&m.content);
                        }
                        _ => {
                            s.push_str("<｜Assistant｜>");
                            s.push_str(strip_thinking(&m.content));
                            s.push_str(EOS);
                        }
                    }
                }
                s.push_str("<｜Assistant｜>");
                s
            }
            ChatFormat::DeepSeekV2 => {
                let mut s = String::from(BOS);
                for m in messages {
                    match m.role {
                        Role::System => {
                            s.push_str(&m.content);
                            s.push_str("\n\n");
                        }
                        Role::User => {
                            s.push_str("User: ");
                            s.push_str(&m.content);
                            s.push_str("\n\n");
                        }
                        Role::Assistant => {
                            s.push_str("Assistant: ");
                            s.push_str(&m.content);
                            s.push_str(EOS);
                        }
                    }
                }
                s.push_str("Assistant:");
                s
            }
        }
    }
}

/// Renders a conversation as Qwen3's template does, ending with the assistant's turn
/// opened. Earlier assistant turns lose their `<think>…</think>` part (as in Qwen3's
/// template); with `think == false` an empty thinking block is prefilled so the model
/// answers directly.
pub fn render_chat(messages: &[Message], think: bool) -> String {
    let mut s = String::new();
    for m in messages {
        let content = match m.role {
            Role::Assistant => strip_thinking(&m.content),
            _ => m.content.as_str(),
        };
        s.push_str("<|im_start|>");
        s.push_str(m.role.as_str());
        s.push('\n');
        s.push_str(content);
        s.push_str("<|im_end|>\n");
    }
    s.push_str("<|im_start|>assistant\n");
    if !think {
        s.push_str("<think>\n\n</think>\n\n");
    }
    s
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
