//! Qwen3's, DeepSeek-R1's, Llama 3.1's, Mistral's and GLM-4.6's chat templates against `transformers`:
//! conversations with tool definitions (Qwen3), assistant tool calls and tool results, parsed
//! from OpenAI's message shape as the server parses them and rendered by fucina's ChatFormat,
//! must give exactly the text transformers' jinja gives with the real templates (goldens
//! from tools/gen_chat_template_goldens.py; tolerance: none).

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

#[test]
fn deepseek_r1_conversations_render_as_its_template_does() {
    let golden: Value = serde_json::from_str(include_str!("goldens/chat_template_tools.json")).unwrap();
    let cases = golden["deepseek_cases"].as_array().unwrap();
    assert!(cases.len() >= 4);
    // The format is detected from the file's template, as `serve` and the CLI do.
    let template = "{% if add_generation_prompt %}{{'<｜Assistant｜><think>\\n'}}{% endif %}";
    let format = ChatFormat::detect(|t| t == "<｜User｜>", "deepseek2", Some(template));
    assert_eq!(format, ChatFormat::DeepSeekR1);
    for (i, case) in cases.iter().enumerate() {
        let msgs: Vec<ChatMessage> = serde_json::from_value(case["messages"].clone()).unwrap();
        let messages = parse_messages(&msgs).unwrap();
        let think = case["think"].as_bool().unwrap();
        let got = format.prompt_with_tools(&messages, &[], think).text_form();
        assert_eq!(got, case["text"].as_str().unwrap(), "case {i}");
    }
}

/// The tools DeepSeek's template leaves to the caller: each function's JSON and the call
/// syntax, after the system prompt, in the prompt's control tokens.
#[test]
fn deepseek_tools_are_described_after_the_system_prompt() {
    use fucina_models::llm::chat::{Message, Piece, Role};
    let tool = serde_json::json!({"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}});
    let m = [Message::new(Role::System, "Be brief."), Message::new(Role::User, "Time?")];
    let p = ChatFormat::DeepSeekV3.prompt_with_tools(&m, &[tool], true);
    let text = p.text_form();
    assert!(text.starts_with("<｜begin▁of▁sentence｜>Be brief.\n\n## Tools"), "{text}");
    assert!(text.contains(r#"{"name": "now", "parameters": {"type": "object"}}"#), "{text}");
    assert!(text.ends_with("<｜tool▁calls▁end｜>\n<｜User｜>Time?<｜Assistant｜>"), "{text}");
    let controls: Vec<&str> =
        p.pieces.iter().filter_map(|x| if let Piece::Control(c) = x { Some(c.as_str()) } else { None }).collect();
    assert!(controls.contains(&"<｜tool▁calls▁begin｜>") && controls.contains(&"<｜tool▁sep｜>"), "{controls:?}");
}

#[test]
fn llama3_conversations_render_as_its_template_does() {
    let golden: Value = serde_json::from_str(include_str!("goldens/chat_template_tools.json")).unwrap();
    let cases = golden["llama_cases"].as_array().unwrap();
    assert!(cases.len() >= 3);
    let format = ChatFormat::detect(|t| t == "<|start_header_id|>", "llama", None);
    assert_eq!(format, ChatFormat::Llama3);
    for (i, case) in cases.iter().enumerate() {
        let msgs: Vec<ChatMessage> = serde_json::from_value(case["messages"].clone()).unwrap();
        let messages = parse_messages(&msgs).unwrap();
        let got = format.prompt_with_tools(&messages, &[], true).text_form();
        assert_eq!(got, case["text"].as_str().unwrap(), "case {i}");
    }
}

#[test]
fn mistral_conversations_render_as_its_template_does() {
    let golden: Value = serde_json::from_str(include_str!("goldens/chat_template_tools.json")).unwrap();
    let cases = golden["mistral_cases"].as_array().unwrap();
    assert!(cases.len() >= 2);
    let template = golden["mistral_template"].as_str().unwrap();
    assert!(template.ends_with("Mistral-Nemo-Instruct-2407.jinja"));
    let format = ChatFormat::detect(|_| false, "llama", Some("{{- '[INST]' + message['content'] + '[/INST]' }}"));
    assert_eq!(format, ChatFormat::Mistral);
    for (i, case) in cases.iter().enumerate() {
        let msgs: Vec<ChatMessage> = serde_json::from_value(case["messages"].clone()).unwrap();
        let messages = parse_messages(&msgs).unwrap();
        let got = format.prompt_with_tools(&messages, &[], true).text_form();
        assert_eq!(got, case["text"].as_str().unwrap(), "case {i}");
    }
}

/// Every conversation under `key` of the goldens (rendered by the template whose file ends in
/// `template`) renders the same through `format` with the case's thinking switch.
fn renders_as_the_template(key: &str, template: &str, format: ChatFormat, at_least: usize) {
    let golden: Value = serde_json::from_str(include_str!("goldens/chat_template_tools.json")).unwrap();
    let cases = golden[format!("{key}_cases")].as_array().unwrap();
    assert!(cases.len() >= at_least);
    assert!(golden[format!("{key}_template")].as_str().unwrap().ends_with(template));
    for (i, case) in cases.iter().enumerate() {
        let msgs: Vec<ChatMessage> = serde_json::from_value(case["messages"].clone()).unwrap();
        let messages = parse_messages(&msgs).unwrap();
        let think = case["think"].as_bool().unwrap();
        let got = format.prompt(&messages, think).text_form();
        assert_eq!(got, case["text"].as_str().unwrap(), "{key} case {i}");
    }
}

#[test]
fn glm_conversations_render_as_its_template_does() {
    // Detected from the vocabulary, as `serve` and the CLI do.
    let format = ChatFormat::detect(|t| t == "[gMASK]" || t == "<|assistant|>", "glm4moe", None);
    assert_eq!(format, ChatFormat::Glm4);
    renders_as_the_template("glm", "GLM-4.6.jinja", format, 5);
}

#[test]
fn gemma4_conversations_render_as_its_template_does() {
    let format = ChatFormat::detect(|t| t == "<|turn>" || t == "<turn|>", "gemma4", None);
    assert_eq!(format, ChatFormat::Gemma4);
    renders_as_the_template("gemma4", "google-gemma-4-31B-it.jinja", format, 5);
}
