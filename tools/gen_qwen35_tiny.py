#!/usr/bin/env python3
"""A tiny Qwen3.5 (`Qwen3_5ForCausalLM` from `transformers`: hybrid Gated DeltaNet and gated
attention), converted to GGUF by llama.cpp's own converter, and its goldens.

1. Trains a small byte-level BPE offline with `tokenizers`, set up as Qwen3.5's: NFC, then
   Qwen3.5's split (Qwen2's with combining marks `\\p{M}` counted as letters), Qwen's turn and
   thinking tokens; llama.cpp files it under the `qwen35` pre-tokenizer.
2. Builds a seeded random Qwen3_5ForCausalLM with everything the text model has: linear
   (Gated DeltaNet) layers with a causal depthwise conv, L2-normalized queries and keys, more
   value heads than key heads (so the converter reorders the value heads), the decay and
   update gates, the gated RMSNorm; full-attention layers with the sigmoid output gate, q/k
   norms and partial RoPE; zero-centred norms moved away from 0, A and the dt bias random.
3. Runs `convert_hf_to_gguf.py` from the pinned llama-cpp-python sdist (`--no-mtp`: the
   checkpoint has no MTP layer).
   The same for a tiny Qwen3_5MoeForCausalLM (every feed-forward 8 routed experts, 2 per
   token, plus a shared expert of another width behind a sigmoid gate).
4. Writes fucina-models/assets/qwen35{,moe}-tiny-f32.gguf and fucina-models/tests/goldens/qwen35.json:
   token ids for the tricky-string corpus plus strings with combining marks, and logits for
   fixed prompts (every prefill position, computed by transformers' chunked delta rule, and 16
   greedy decode steps, by its recurrent one).
5. Writes fucina/tests/goldens/delta_rule.json: transformers' chunked and recurrent delta rule
   functions on random inputs of 150 positions from a random state (outputs, final states).
"""
import json
import os

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig, Qwen3_5TextConfig

from gen_llama_family_tiny import convert as convert_file, reference
from tiny_tokenizer import SPECIALS, train_tokenizer

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..")
assets = os.path.join(root, "fucina-models", "assets")
gold = os.path.join(root, "fucina-models", "tests", "goldens")

QWEN35_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|"
                  r"\s*[\r\n]+|\s+(?!\S)|\s+")

# Where Qwen3.5's split differs from Qwen2's: marks that NFC does not compose away.
MARKS = ["नमस्ते दुनिया", "x\u0301y\u0302 z\u20d7", "ประเทศไทย", "a\u0300\u0301\u0302!"]


def delta_rule_case():
    """transformers' own chunked and recurrent gated delta rule on random inputs longer than
    two chunks, from a random state (value heads grouped by key head, as HF orders them)."""
    from transformers.models.qwen3_5.modeling_qwen3_5 import (torch_chunk_gated_delta_rule,
                                                              torch_recurrent_gated_delta_rule)
    torch.manual_seed(7)
    s, kh, vh, dk, dv = 150, 2, 4, 16, 8
    q = torch.nn.functional.normalize(torch.randn(1, s, kh, dk), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(1, s, kh, dk), dim=-1)
    v = torch.randn(1, s, vh, dv)
    g = -0.3 * torch.exp(torch.randn(1, s, vh))
    beta = torch.sigmoid(torch.randn(1, s, vh))
    state = 0.5 * torch.randn(1, vh, dk, dv)
    out = {}
    for name, fn in [("chunked", torch_chunk_gated_delta_rule), ("recurrent", torch_recurrent_gated_delta_rule)]:
        o, st = fn(q, k, v, g=g, beta=beta, initial_state=state.clone(), output_final_state=True,
                   use_qk_l2norm_in_kernel=False)
        out[name] = {"out": o[0].flatten().tolist(), "state": st[0].flatten().tolist()}
    flat = lambda t: t[0].flatten().tolist()
    return {"sizes": [s, kh, vh, dk, dv], "q": flat(q), "k": flat(k), "v": flat(v), "g": flat(g),
            "beta": flat(beta), "state": state[0].flatten().tolist(), **out}


def randomize(model):
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("linear_attn.norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))  # plain weight (gated RMSNorm)
            elif "norm" in n:
                p.copy_(0.3 * torch.randn_like(p))  # zero-centred: the norm multiplies by 1 + w
            elif n.endswith("dt_bias"):
                p.copy_(torch.randn_like(p))
            elif n.endswith("conv1d.weight"):
                p.copy_(0.5 * torch.randn_like(p))
            elif n.endswith("mlp.gate.weight"):
                p.copy_(torch.randn_like(p))  # router rows apart, so no near-ties in the top-k


def convert(model, tok, path, name):
    """llama.cpp's converter on `model`, as Qwen3.5's tokenizer files name their specials (no
    BOS, `<|im_end|>` ends a turn); `--no-mtp`: the checkpoint has no MTP layer."""
    specials = {"bos": None, "eos": "<|im_end|>", "pad": "<|endoftext|>"}
    convert_file(model, tok, specials, "qwen35", path, name, extra_args=["--no-mtp"])


def main():
    # The marks join the training text (repeated), so merges across a letter and its mark exist.
    tok = train_tokenizer(QWEN35_PATTERN, nfc=True, specials=SPECIALS, extra=MARKS * 20)
    ids = {s: tok.token_to_id(s) for s in SPECIALS}
    common = dict(
        vocab_size=tok.get_vocab_size(), hidden_size=64, num_hidden_layers=4,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, max_position_embeddings=2048, rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
        tie_word_embeddings=False, initializer_range=0.2, bos_token_id=None,
        eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|endoftext|>"], attn_implementation="eager")
    torch.manual_seed(35)
    cfg = Qwen3_5TextConfig(intermediate_size=128, **common)
    model = Qwen3_5ForCausalLM(cfg).eval()
    randomize(model)
    path = os.path.join(assets, "qwen35-tiny-f32.gguf")
    convert(model, tok, path, "fucina qwen35-tiny (random weights)")
    torch.manual_seed(36)
    # Qwen3.5-MoE: every layer's feed-forward is 8 experts (2 per token, softmax, renormalized)
    # plus a shared expert of another width behind a sigmoid gate.
    mcfg = Qwen3_5MoeTextConfig(moe_intermediate_size=32, shared_expert_intermediate_size=48, num_experts=8,
                                num_experts_per_tok=2, **common)
    moe = Qwen3_5MoeForCausalLM(mcfg).eval()
    randomize(moe)
    moe_path = os.path.join(assets, "qwen35moe-tiny-f32.gguf")
    convert(moe, tok, moe_path, "fucina qwen35moe-tiny (random weights)")
    prompts = ["What is the capital of France? 12345 numbers, and a longer tail of text to decode after",
               "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"]
    result = reference(model, tok, path, prompts, "qwen35")
    result["tokenizer"] += [{"text": s, "ids": tok.encode(s, add_special_tokens=False).ids} for s in MARKS]
    moe_result = reference(moe, tok, moe_path, prompts, "qwen35moe")
    out = os.path.join(gold, "qwen35.json")
    with open(out, "w") as f:
        json.dump({"generator": "tools/gen_qwen35_tiny.py", "models": {"qwen35": result, "qwen35moe": moe_result}}, f,
                  ensure_ascii=False)
        f.write("\n")
    print(f"wrote {out}")
    out = os.path.join(root, "fucina", "tests", "goldens", "delta_rule.json")
    with open(out, "w") as f:
        json.dump({"generator": "tools/gen_qwen35_tiny.py", **delta_rule_case()}, f)
        f.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
