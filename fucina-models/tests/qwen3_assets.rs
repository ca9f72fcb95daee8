//! The committed tiny Qwen3 (`tools/gen_qwen3_tiny.py`) is a well-formed qwen3 GGUF whose
//! shapes and vocabulary agree with its config and with the committed goldens.

use fucina::formats::gguf::GgufFile;

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

#[test]
fn tiny_qwen3_gguf_is_consistent_with_its_metadata_and_goldens() {
    let f = GgufFile::open(root().join("assets/qwen3-tiny-f32.gguf")).unwrap();
    let h = f.header();
    let u = |k: &str| h.get(k).and_then(|v| v.as_u64()).unwrap_or_else(|| panic!("missing {k}")) as usize;
    assert_eq!(h.get("general.architecture").and_then(|v| v.as_str()), Some("qwen3"));
    let (n_layer, n_embd, n_ff) = (u("qwen3.block_count"), u("qwen3.embedding_length"), u("qwen3.feed_forward_length"));
    let (n_head, n_kv, hd) =
        (u("qwen3.attention.head_count"), u("qwen3.attention.head_count_kv"), u("qwen3.attention.key_length"));
    let (_, emb) = f.tensor_f32("token_embd.weight").unwrap();
    let n_vocab = emb.len() / n_embd;
    for l in 0..n_layer {
        for (name, want) in [
            ("attn_q", n_head * hd * n_embd),
            ("attn_k", n_kv * hd * n_embd),
            ("attn_v", n_kv * hd * n_embd),
            ("attn_output", n_embd * n_head * hd),
            ("attn_q_norm", hd),
            ("attn_k_norm", hd),
            ("attn_norm", n_embd),
            ("ffn_norm", n_embd),
            ("ffn_gate", n_ff * n_embd),
            ("ffn_up", n_ff * n_embd),
            ("ffn_down", n_embd * n_ff),
        ] {
            let (_, v) = f.tensor_f32(&format!("blk.{l}.{name}.weight")).unwrap();
            assert_eq!(v.len(), want, "blk.{l}.{name}");
        }
    }
    let logits: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("tests/goldens/qwen3_logits.json")).unwrap())
            .unwrap();
    for c in logits["cases"].as_array().unwrap() {
        let ids = c["ids"].as_array().unwrap();
        assert!(ids.iter().all(|i| (i.as_u64().unwrap() as usize) < n_vocab));
        assert_eq!(c["prefill"].as_array().unwrap().len(), ids.len());
        assert_eq!(c["prefill"][0].as_array().unwrap().len(), n_vocab);
        assert_eq!(c["decode"].as_array().unwrap().len(), 16);
    }
}
