#!/usr/bin/env python3
"""A tiny GLM-4.5 (`Glm4MoeForCausalLM` from `transformers`), converted to GGUF by llama.cpp's
own converter, and its goldens.

1. Trains a small byte-level BPE offline with `tokenizers`, set up as GLM-4.5's: Llama 3's
   split pattern, no normalizer, `ignore_merges` (a pre-token that is a token stays whole),
   and GLM's turn and control tokens ([gMASK], <sop>, <|system|>, <|user|>, <|assistant|>,
   <|observation|>, <think>, </think>, ...).
2. Builds a seeded random Glm4MoeForCausalLM with everything GLM-4.5 has: q/k/v biases,
   per-head q/k RMSNorm, RoPE over half of each head (`partial_rotary_factor` 0.5), a leading
   dense layer, then mixtures of experts with DeepSeek-V3 routing (sigmoid scores, a selection
   bias, expert groups limited per token, renormalized and scaled weights) and a shared
   expert; untied output. Norms, biases and the selection bias are moved away from their
   defaults so they matter.
3. Adds the model's next-token-prediction (`nextn`) layer as GLM-4.5's checkpoints carry it
   (`model.layers.<n>.*` with eh_proj, enorm, hnorm, shared_head), random, so the file has
   the layer llama.cpp's converter writes (transformers itself never loads it).
4. Runs `convert_hf_to_gguf.py` from the pinned llama-cpp-python sdist on it (as in
   tools/gen_llama_family_tiny.py; the pre-tokenizer is named `glm4`, the one llama.cpp
   files GLM-4.5 under).
5. Writes fucina-models/assets/glm4moe-tiny-f32.gguf and
   fucina-models/tests/goldens/glm4moe.json: token ids for the tricky-string corpus, and
   logits for fixed prompts (every prefill position and 16 greedy decode steps), and the
   next-token-prediction layer's logits for the same prompts (`nextn_reference`: its
   decoder layer is transformers' own Glm4MoeDecoderLayer).
"""
import json
import os
import tempfile

import torch
from safetensors.torch import load_file, save_file
from transformers import Glm4MoeConfig, Glm4MoeForCausalLM, PreTrainedTokenizerFast

from gen_llama_family_tiny import LLAMA3_PATTERN, converter, randomize, reference
from tiny_tokenizer import train_tokenizer

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..")
assets = os.path.join(root, "fucina-models", "assets")
gold = os.path.join(root, "fucina-models", "tests", "goldens")

GLM_SPECIALS = ["<|endoftext|>", "[MASK]", "[gMASK]", "[sMASK]", "<sop>", "<eop>", "<|system|>", "<|user|>",
                "<|assistant|>", "<|observation|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
                "<tool_response>", "</tool_response>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]


def glm_tokenizer():
    tok = train_tokenizer(LLAMA3_PATTERN, nfc=False, specials=GLM_SPECIALS)
    tok.model.ignore_merges = True
    return tok


def with_nextn(d, cfg, seed):
    """Adds a random next-token-prediction layer `model.layers.<layers>.*` to the checkpoint
    in `d`: a decoder layer of the model's own kind plus eh_proj, enorm, hnorm and
    shared_head (GLM-4.5's names)."""
    torch.manual_seed(seed)
    n, h = cfg.num_hidden_layers, cfg.hidden_size
    bigger = Glm4MoeConfig(**{**cfg.to_dict(), "num_hidden_layers": n + 1})
    donor = Glm4MoeForCausalLM(bigger).eval()
    randomize(donor)
    path = os.path.join(d, "model.safetensors")
    weights = load_file(path)
    with tempfile.TemporaryDirectory() as dd:
        # Saved, so the experts come out under the checkpoint's per-expert names.
        donor.save_pretrained(dd)
        for name, p in load_file(os.path.join(dd, "model.safetensors")).items():
            if name.startswith(f"model.layers.{n}."):
                weights[name] = p.clone().contiguous()
    pre = f"model.layers.{n}."
    weights[pre + "eh_proj.weight"] = 0.2 * torch.randn(h, 2 * h)
    weights[pre + "enorm.weight"] = 1.0 + 0.3 * torch.randn(h)
    weights[pre + "hnorm.weight"] = 1.0 + 0.3 * torch.randn(h)
    weights[pre + "shared_head.norm.weight"] = 1.0 + 0.3 * torch.randn(h)
    weights[pre + "shared_head.head.weight"] = 0.2 * torch.randn(cfg.vocab_size, h)
    weights[pre + "embed_tokens.weight"] = weights["model.embed_tokens.weight"].clone()
    save_file(weights, path, metadata={"format": "pt"})
    return donor.model.layers[n], {k[len(pre):]: weights[k] for k in weights if k.startswith(pre)}


def nextn_reference(model, layer, w, ids, eps):
    """The next-token-prediction layer's logits as DeepSeek-V3 and GLM-4.5 define it (and
    llama.cpp's MTP graph computes it): row p reads the main model's final hidden state at p
    (after its output norm) and the embedding of the token at p + 1, joined as
    `eh_proj([enorm(e); hnorm(h)])`, runs the decoder layer (transformers' own
    Glm4MoeDecoderLayer with the checkpoint's weights) causally at positions 0.., and predicts
    the token at p + 2 through `shared_head`."""
    def rms(x, weight):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))
    with torch.no_grad():
        t = torch.tensor([ids])
        h = model.model(t).last_hidden_state[0, :-1]
        e = w["embed_tokens.weight"][t[0, 1:]]
        x = torch.cat([rms(e, w["enorm.weight"]), rms(h, w["hnorm.weight"])], dim=-1) @ w["eh_proj.weight"].T
        m = x.shape[0]
        pos = torch.arange(m)[None]
        cos_sin = model.model.rotary_emb(x[None], pos)
        mask = torch.full((m, m), float("-inf")).triu(1)[None, None]
        y = layer(x[None], attention_mask=mask, position_ids=pos, position_embeddings=cos_sin)
        y = y[0] if isinstance(y, tuple) else y
        return rms(y[0], w["shared_head.norm.weight"]) @ w["shared_head.head.weight"].T


def main():
    tok = glm_tokenizer()
    ids = {s: tok.token_to_id(s) for s in GLM_SPECIALS}
    torch.manual_seed(5)
    cfg = Glm4MoeConfig(vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128,
                        moe_intermediate_size=32, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                        head_dim=24, partial_rotary_factor=0.5, max_position_embeddings=2048,
                        rope_parameters={"rope_type": "default", "rope_theta": 1_000_000.0,
                                         "partial_rotary_factor": 0.5},
                        n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
                        n_group=2, topk_group=1, norm_topk_prob=True, routed_scaling_factor=2.5,
                        attention_bias=True, use_qk_norm=True, num_nextn_predict_layers=1, rms_norm_eps=1e-5,
                        tie_word_embeddings=False, initializer_range=0.2, bos_token_id=ids["[gMASK]"],
                        eos_token_id=[ids["<|endoftext|>"], ids["<|user|>"], ids["<|observation|>"]],
                        pad_token_id=ids["<|endoftext|>"], attn_implementation="eager")
    model = Glm4MoeForCausalLM(cfg).eval()
    randomize(model)
    with torch.no_grad():
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn_like(b))
    path = os.path.join(assets, "glm4moe-tiny-f32.gguf")
    conv, base = converter()
    base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "glm4"
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        nextn_layer, nextn_weights = with_nextn(d, cfg, 6)
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="[gMASK]", eos_token="<|endoftext|>")
        fast.save_pretrained(d)
        import sys
        argv = sys.argv
        sys.argv = ["convert_hf_to_gguf.py", d, "--outfile", path, "--outtype", "f32", "--model-name",
                    "fucina glm4moe-tiny (random weights)"]
        try:
            conv.main()
        finally:
            sys.argv = argv
    prompts = ["[gMASK]<sop>What is the capital of France? 12345 numbers",
               "[gMASK]<sop><|system|>\nbe brief<|user|>\nhello<|assistant|>\n<think></think>\n"]
    result = reference(model, tok, path, prompts, "glm4moe")
    result["nextn"] = [{"ids": c["ids"], "logits": nextn_reference(model, nextn_layer, nextn_weights, c["ids"],
                                                                   cfg.rms_norm_eps).tolist()}
                       for c in result["cases"]]
    out = os.path.join(gold, "glm4moe.json")
    with open(out, "w") as f:
        json.dump({"generator": "tools/gen_glm4moe_tiny.py", "models": {"glm4moe": result}}, f, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
