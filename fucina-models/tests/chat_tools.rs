//! Qwen3's chat template with tools against `transformers`: conversations with tool
//! definitions, assistant tool calls and tool results, parsed from OpenAI's message shape as
//! the server parses them and rendered by fucina's ChatFormat, must give exactly the text
//! `apply_chat_template` gives with the real Qwen3 template (goldens from
//! tools/gen_chat_template_goldens.py; tolerance: none).

use fucina_models::llm::chat::ChatFormat;
use fucina_models::serve::api::{parse_messages, ChatMessage};
use serde_json::Value;

#[test]
fn tool_conversations_render_as_transformers_does() {
    let golden: Value = serde_json::from_str(include_str!("goldens/chat_template_tools.json")).unwrap();
    let cases = golden["cases"].as_array().unwrap();
    assert!(cases.len() >= 5);
    for (i, case) in cases.iter().enumerate() {
        let msgs: Vec<ChatMessage> = serde_json::from_value(case["messages"].clone()).unwrap();
        let messages = parse_messages(&msgs).unwrap();
        let tools = case["tools"].as_array().unwrap();
        let think = case["think"].as_bool().unwrap();
        let got = ChatFormat::ChatMl.prompt_with_tools(&messages, tools, think).text_form();
        assert_eq!(got, case["text"].as_str().unwrap(), "case {i}");
    }
}
