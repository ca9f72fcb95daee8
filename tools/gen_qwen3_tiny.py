#!/usr/bin/env python3
"""The tiny default Qwen3 and its goldens, from HF `tokenizers` and `transformers`.

1. Trains a small byte-level BPE offline with `tokenizers`, set up as Qwen2's tokenizer is
   (NFC normalizer, the Qwen2 split regex, byte-level, Qwen's special tokens).
2. Builds a random-initialised Qwen3ForCausalLM from a tiny config (seeded).
3. Writes fucina-models/assets/qwen3-tiny-f32.gguf with gguf-py, named as llama.cpp's
   convert_hf_to_gguf.py names a Qwen3 (qwen3 architecture, gpt2/qwen2 tokenizer metadata).
4. Writes fucina-models/tests/goldens/qwen3_tokenizer.json (token IDs from HF for a corpus
   of tricky strings) and qwen3_logits.json (transformers logits for fixed prompts: every
   prefill position and 16 greedy decode steps).
5. The same model in F16, BF16 and Q8_0 (converted by gguf-py) and qwen3_dtypes_logits.json:
   transformers' logits for the first prompt with each file's weights dequantized.
6. The same for a tiny Qwen3-MoE (Qwen3MoeForCausalLM, 8 experts, top 2, normalized top-k
   weights as llama.cpp's qwen3moe): assets/qwen3moe-tiny-f32.gguf, qwen3moe_logits.json
   (also the experts each layer routes each prompt token to).
"""
import json
import os

import numpy as np
import torch
import gguf
from golden_common import greedy_reference
from transformers import Qwen3Config, Qwen3ForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..")
assets = os.path.join(root, "fucina-models", "assets")
gold = os.path.join(root, "fucina-models", "tests", "goldens")
os.makedirs(assets, exist_ok=True)
os.makedirs(gold, exist_ok=True)

from tiny_tokenizer import SPECIALS, train_tokenizer

TRICKY = [
    "Hello world",
    "What is the capital of France?",
    "  leading spaces and trailing   ",
    "multiple\n\nnewlines\r\n and \ttabs\t\t",
    "numbers 1234567890 and 3.14159 and -42",
    "I'm can't won't they'll we've you'd she's HE'S",
    "naïve café Straße ÅÄÖ é (composed) é (decomposed)",
    "日本語のテキストと中文字符 한국어",
    "emoji 🙂🚀👍🏽 family 👨‍👩‍👧 flags 🇮🇹",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "<think>\n\n</think>\n\nanswer",
    "code: fn main() { let x = vec![1, 2, 3]; }",
    "a<|endoftext|>b<|im_end|>",
    "    indented\n        more",
    "",
    " ",
    "\n",
    "unknown chars: \u0000\u0007 ÿ þ ß ∂ ∆ ∞",
    "!!!???...,,,;;;",
    "mixedCASEwordsAndNumbers123abc456",
]


# HF parameter name -> llama.cpp tensor name, for the attention half of a Qwen3 block.
ATTN_TENSORS = [("input_layernorm", "attn_norm"), ("self_attn.q_proj", "attn_q"), ("self_attn.k_proj", "attn_k"),
                ("self_attn.v_proj", "attn_v"), ("self_attn.o_proj", "attn_output"),
                ("self_attn.q_norm", "attn_q_norm"), ("self_attn.k_norm", "attn_k_norm"),
                ("post_attention_layernorm", "ffn_norm")]


def write_header(w, cfg, tokens, merges, ids, moe, file_type=0):
    """The qwen3 / qwen3moe metadata and the tokenizer, as llama.cpp's converter writes them."""
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    if moe:
        w.add_expert_feed_forward_length(cfg.moe_intermediate_size)
        w.add_expert_count(cfg.num_experts)
        w.add_expert_used_count(cfg.num_experts_per_tok)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_file_type(file_type)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types([3 if t in SPECIALS else 1 for t in tokens])
    w.add_token_merges(merges)
    w.add_eos_token_id(ids["<|im_end|>"])
    w.add_pad_token_id(ids["<|endoftext|>"])
    w.add_bos_token_id(ids["<|endoftext|>"])
    w.add_add_bos_token(False)


def main():
    tok = train_tokenizer()
    vocab = tok.get_vocab()
    n_vocab = len(vocab)
    tokens = [None] * n_vocab
    for t, i in vocab.items():
        tokens[i] = t
    assert all(t is not None for t in tokens)
    merges = [" ".join(m) if isinstance(m, (list, tuple)) else m for m in json.loads(tok.to_str())["model"]["merges"]]
    ids = {s: vocab[s] for s in SPECIALS}

    with open(os.path.join(gold, "qwen3_tokenizer.json"), "w") as f:
        json.dump({"generator": "tools/gen_qwen3_tiny.py", "cases": [
            {"text": s, "ids": tok.encode(s, add_special_tokens=False).ids} for s in TRICKY
        ]}, f, ensure_ascii=False, indent=0)
        f.write("\n")

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=n_vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=2048,
                      rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}, rms_norm_eps=1e-6, tie_word_embeddings=True, initializer_range=0.2,
                      bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"], attn_implementation="eager")
    model = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():  # norms away from 1 so their weights matter
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))

    path = os.path.join(assets, "qwen3-tiny-f32.gguf")
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    write_dense(path, cfg, sd, tokens, merges, ids, None)

    prompts = ["What is the capital of France?", "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n"]
    cases = []
    for text in prompts:
        ids_in = tok.encode(text, add_special_tokens=False).ids
        _, prefill, greedy, decode = greedy_reference(model, ids_in)
        cases.append({"prompt": text, "ids": ids_in, "prefill": prefill.tolist(), "greedy": greedy,
                      "decode": decode.tolist()})
    with open(os.path.join(gold, "qwen3_logits.json"), "w") as f:
        json.dump({"generator": "tools/gen_qwen3_tiny.py", "model": "assets/qwen3-tiny-f32.gguf", "cases": cases}, f)
        f.write("\n")
    print(f"wrote {path} (vocab {n_vocab}) and the goldens")
    write_dtypes(cfg, model, sd, tokens, merges, ids, cases[0])
    write_moe(tok, tokens, merges, ids, prompts)


# The other dtypes of the tiny model: (file suffix, GGML type, llama.cpp file type). Matrices
# are converted by gguf-py (llama.cpp's own quantizer for Q8_0, round-to-nearest-even for
# F16/BF16); norms stay F32 as llama.cpp writes them. Hidden 64 is not a multiple of the
# 256-wide K-quant super-block, so K-quants are covered by the synthetic models instead.
DTYPES = [("f16", gguf.GGMLQuantizationType.F16, 1), ("bf16", gguf.GGMLQuantizationType.BF16, 32),
          ("q8_0", gguf.GGMLQuantizationType.Q8_0, 7)]


def write_dense(path, cfg, sd, tokens, merges, ids, qtype, file_type=0):
    """The dense tiny Qwen3 as GGUF; matrices in `qtype` (None: F32)."""
    def mat(a):
        if qtype is None:
            return a, {}
        if qtype == gguf.GGMLQuantizationType.F16:
            return a.astype(np.float16), {}
        return gguf.quants.quantize(a, qtype), {"raw_dtype": qtype}

    w = gguf.GGUFWriter(path, "qwen3")
    w.add_name("fucina qwen3-tiny (random weights)")
    write_header(w, cfg, tokens, merges, ids, moe=False, file_type=file_type)
    a, kw = mat(sd["model.embed_tokens.weight"])
    w.add_tensor("token_embd.weight", a, **kw)
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        for src, dst in ATTN_TENSORS + [("mlp.gate_proj", "ffn_gate"), ("mlp.up_proj", "ffn_up"),
                                         ("mlp.down_proj", "ffn_down")]:
            t = sd[p + src + ".weight"]
            a, kw = mat(t) if t.ndim == 2 else (t, {})
            w.add_tensor(f"blk.{i}.{dst}.weight", a, **kw)
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_dtypes(cfg, model, sd, tokens, merges, ids, case):
    """The tiny model in F16, BF16 and Q8_0, and transformers' logits for the first prompt
    with each file's weights (dequantized back to f32 and loaded into the same model)."""
    import copy
    out = {}
    for suffix, qtype, file_type in DTYPES:
        path = os.path.join(assets, f"qwen3-tiny-{suffix}.gguf")
        write_dense(path, cfg, sd, tokens, merges, ids, qtype, file_type)
        m = copy.deepcopy(model)
        with torch.no_grad():
            for name, prm in m.named_parameters():
                a = prm.detach().float().numpy()
                if a.ndim != 2:
                    continue
                if qtype == gguf.GGMLQuantizationType.F16:
                    back = a.astype(np.float16).astype(np.float32)
                else:
                    back = gguf.quants.dequantize(gguf.quants.quantize(a, qtype), qtype)
                prm.copy_(torch.from_numpy(np.ascontiguousarray(back, dtype=np.float32)))
        _, prefill, greedy, decode = greedy_reference(m, case["ids"])
        out[suffix] = {"model": f"assets/qwen3-tiny-{suffix}.gguf", "ids": case["ids"], "prefill": prefill.tolist(),
                       "greedy": greedy, "decode": decode.tolist()}
    with open(os.path.join(gold, "qwen3_dtypes_logits.json"), "w") as f:
        json.dump({"generator": "tools/gen_qwen3_tiny.py", "dtypes": out}, f)
        f.write("\n")
    print("wrote the F16/BF16/Q8_0 tiny models and their goldens")


def write_moe(tok, tokens, merges, ids, prompts):
    """A tiny Qwen3-MoE from the same tokenizer, its GGUF and its reference logits/routing."""
    n_vocab = len(tokens)
    torch.manual_seed(1)
    cfg = Qwen3MoeConfig(vocab_size=n_vocab, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         num_experts=8, num_experts_per_tok=2, norm_topk_prob=True, max_position_embeddings=256,
                         rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0}, rms_norm_eps=1e-6,
                         tie_word_embeddings=False, initializer_range=0.2, bos_token_id=ids["<|endoftext|>"],
                         eos_token_id=ids["<|im_end|>"], attn_implementation="eager")
    model = Qwen3MoeForCausalLM(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            if n.endswith("mlp.gate.weight"):  # routers spread wide: no near-ties in the top-k
                p.copy_(2.0 * torch.randn_like(p))
    path = os.path.join(assets, "qwen3moe-tiny-f32.gguf")
    w = gguf.GGUFWriter(path, "qwen3moe")
    w.add_name("fucina qwen3moe-tiny (random weights)")
    write_header(w, cfg, tokens, merges, ids, moe=True)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    inter = cfg.moe_intermediate_size
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        for src, dst in ATTN_TENSORS + [("mlp.gate", "ffn_gate_inp")]:
            w.add_tensor(f"blk.{i}.{dst}.weight", sd[p + src + ".weight"])
        gate_up = sd[p + "mlp.experts.gate_up_proj"]  # [experts, 2 * inter, hidden]: gate rows first
        w.add_tensor(f"blk.{i}.ffn_gate_exps.weight", np.ascontiguousarray(gate_up[:, :inter, :]))
        w.add_tensor(f"blk.{i}.ffn_up_exps.weight", np.ascontiguousarray(gate_up[:, inter:, :]))
        w.add_tensor(f"blk.{i}.ffn_down_exps.weight", sd[p + "mlp.experts.down_proj"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    cases = []
    for text in prompts:
        ids_in = tok.encode(text, add_special_tokens=False).ids
        first, prefill, greedy, decode = greedy_reference(model, ids_in, output_router_logits=True)
        # Each layer's top-k experts per prompt token (sorted ids, for comparison).
        routes = [torch.topk(r.float(), cfg.num_experts_per_tok, dim=-1).indices.sort(dim=-1).values.tolist()
                  for r in first.router_logits]
        cases.append({"prompt": text, "ids": ids_in, "prefill": prefill.tolist(), "greedy": greedy,
                      "decode": decode.tolist(), "routes": routes})
    with open(os.path.join(gold, "qwen3moe_logits.json"), "w") as f:
        json.dump({"generator": "tools/gen_qwen3_tiny.py", "model": "assets/qwen3moe-tiny-f32.gguf",
                   "cases": cases}, f)
        f.write("\n")
    print(f"wrote {path} and its goldens")


if __name__ == "__main__":
    main()
