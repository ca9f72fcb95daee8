#!/usr/bin/env python3
"""Tiny Gemma 4 models (`Gemma4ForCausalLM` from `transformers`, dense and MoE), converted to
GGUF by llama.cpp's own converter, and their goldens.

1. Trains a small BPE offline with `tokenizers`, set up as Gemma 4's (transformers'
   `GemmaTokenizer`): spaces become `▁` before the merges, which run over raw UTF-8
   characters of the whole text (no byte-level mapping), characters outside the vocabulary
   fall back to `<0xXX>` byte tokens; Gemma's pad/eos/bos/unk/mask ids and its turn and
   channel tokens. Training splits at newline runs, so no merge crosses a line (as in
   llama.cpp's `gemma4` pre-tokenizer, which splits there).
2. Builds a seeded random Gemma4ForCausalLM with everything the text model has: sliding and
   full attention layers with their own head widths (16 and 32) and a 5-position window,
   proportional RoPE over a quarter of the full layers' heads (other theta), q/k norms and
   the weightless v norm, attention scale 1, sandwich norms, GELU-tanh GeGLU (twice as wide
   in the KV-sharing layers), per-layer embeddings, the last two layers reusing earlier
   layers' keys and values, per-layer output scalars, logit soft-capping, tied output.
   And a MoE one (as the 26B-A4B): a shared GeGLU beside 4 routed experts (2 per token,
   softmax over a scaled, normed router input, per-expert scales), full layers whose values
   are their keys (`attention_k_eq_v`) with their own kv-head count.
3. Runs `convert_hf_to_gguf.py` from the pinned llama-cpp-python sdist on each.
4. Writes fucina-models/assets/gemma4{,moe}-tiny-f32.gguf and
   fucina-models/tests/goldens/gemma4.json: token ids for the tricky-string corpus, and
   logits for fixed prompts (every prefill position and 16 greedy decode steps).
"""
import json
import os
import tempfile

import torch
from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import Gemma4ForCausalLM, Gemma4TextConfig
from transformers.models.gemma.tokenization_gemma import GemmaTokenizer

from gen_llama_family_tiny import converter
from gen_qwen3_tiny import TRICKY
from tiny_tokenizer import CORPUS

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..")
assets = os.path.join(root, "fucina-models", "assets")
gold = os.path.join(root, "fucina-models", "tests", "goldens")

SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
TURNS = ["<|turn>", "<turn|>", "<|channel>", "<channel|>"]
# Strings for the byte fallback and newline runs on top of the shared corpus.
EXTRA = ["line one\nline two\n\nline four\n\n\n\nend", " \n \n", "\n", "▁ literal bar ▁▁", "emoji 🦀 and 日本",
         "<|turn>user\nhi<turn|>\n<|turn>model\n", "x\n\n\ny", "  two leading, three trailing   "]


def gemma_tokenizer():
    """The BPE trained on the shared corpus, as a transformers `GemmaTokenizer`."""
    t = Tokenizer(models.BPE(byte_fallback=True, unk_token="<unk>"))
    t.normalizer = normalizers.Replace(" ", "▁")
    t.pre_tokenizer = pre_tokenizers.Split(Regex(r"\n+"), behavior="isolated")
    # Characters past Cyrillic (CJK, emoji, arrows) are left out of training, so the byte
    # fallback has work to do. (`limit_alphabet` would do it too, but picks among ties
    # differently from run to run.)
    plain = ["".join(ch for ch in s if ord(ch) < 0x500) for s in list(CORPUS) + EXTRA * 5]
    trainer = trainers.BpeTrainer(vocab_size=900, special_tokens=[], show_progress=False)
    t.train_from_iterator(plain, trainer=trainer)
    m = json.loads(t.to_str())["model"]
    vocab = {}
    for s in SPECIALS + TURNS + [f"<0x{b:02X}>" for b in range(256)]:
        vocab[s] = len(vocab)
    for s, _ in sorted(m["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(s, len(vocab))
    merges = [tuple(x) if isinstance(x, list) else tuple(x.split(" ")) for x in m["merges"]]
    tok = GemmaTokenizer(vocab=vocab, merges=merges, extra_special_tokens=TURNS)
    return tok


def randomize(model):
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.copy_(1.0 + 0.3 * torch.randn_like(p))  # plain weights (Gemma 4 has no 1 + w)
            elif n.endswith("router.scale") or n.endswith("per_expert_scale"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
            elif n.endswith("router.proj.weight"):
                p.copy_(torch.randn_like(p))  # router rows apart, so no near-ties in the top-k
        for layer in model.model.layers:
            layer.layer_scalar.copy_(0.6 + 0.8 * torch.rand(1))


def convert(model, tok, out, name):
    """Saves `model` with `tok` and runs the sdist's converter on the directory (F32)."""
    import sys
    conv, _ = converter()
    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d)
        tok.save_pretrained(d)
        argv = sys.argv
        sys.argv = ["convert_hf_to_gguf.py", d, "--outfile", out, "--outtype", "f32", "--model-name", name]
        try:
            conv.main()
        finally:
            sys.argv = argv


def greedy(model, ids_in, steps=16):
    with torch.no_grad():
        first = model(torch.tensor([ids_in]), use_cache=True)
        prefill = first.logits[0].float()
        past = first.past_key_values
        nxt = int(prefill[-1].argmax())
        logits, out = [], []
        for _ in range(steps):
            out.append(nxt)
            step = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
            past = step.past_key_values
            lg = step.logits[0, -1].float()
            logits.append(lg)
            nxt = int(lg.argmax())
    return prefill, out, torch.stack(logits)


def reference(model, tok, path, prompts, arch):
    # Token ids for the corpus without BOS (the tokenizer's own add_special_tokens would add it).
    tokens = [{"text": s, "ids": tok(s, add_special_tokens=False)["input_ids"]} for s in TRICKY + EXTRA]
    cases = []
    for text in prompts:
        ids_in = tok(text, add_special_tokens=True)["input_ids"]
        prefill, out, decode = greedy(model, ids_in)
        cases.append({"prompt": text, "ids": ids_in, "prefill": prefill.tolist(), "greedy": out,
                      "decode": decode.tolist()})
    print(f"wrote {path}")
    return {"model": "assets/" + os.path.basename(path), "arch": arch, "tokenizer": tokens, "cases": cases}


def main():
    tok = gemma_tokenizer()
    ids = {s: tok.convert_tokens_to_ids(s) for s in SPECIALS}
    common = dict(
        vocab_size=len(tok), hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        global_head_dim=32, hidden_activation="gelu_pytorch_tanh", max_position_embeddings=2048,
        rms_norm_eps=1e-6, sliding_window=5, final_logit_softcapping=30.0, tie_word_embeddings=True,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                         "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                            "rope_theta": 1_000_000.0}},
        pad_token_id=ids["<pad>"], eos_token_id=ids["<eos>"], bos_token_id=ids["<bos>"],
        initializer_range=0.2, attn_implementation="eager")
    torch.manual_seed(4)
    cfg = Gemma4TextConfig(
        num_hidden_layers=6, intermediate_size=96,
        # The last layer before the shared ones is global and the one before it sliding, as in
        # the released models (llama.cpp's cache assumes it when it maps the shared layers).
        layer_types=["sliding_attention", "sliding_attention", "sliding_attention", "full_attention",
                     "sliding_attention", "full_attention"],
        vocab_size_per_layer_input=len(tok), hidden_size_per_layer_input=8, num_kv_shared_layers=2,
        use_double_wide_mlp=True, **common)
    model = Gemma4ForCausalLM(cfg).eval()
    randomize(model)
    path = os.path.join(assets, "gemma4-tiny-f32.gguf")
    convert(model, tok, path, "fucina gemma4-tiny (random weights)")
    torch.manual_seed(5)
    mcfg = Gemma4TextConfig(
        num_hidden_layers=4, intermediate_size=64,
        layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
        hidden_size_per_layer_input=0, num_kv_shared_layers=0, enable_moe_block=True, num_experts=4,
        top_k_experts=2, moe_intermediate_size=32, attention_k_eq_v=True, num_global_key_value_heads=1, **common)
    moe = Gemma4ForCausalLM(mcfg).eval()
    randomize(moe)
    moe_path = os.path.join(assets, "gemma4moe-tiny-f32.gguf")
    convert(moe, tok, moe_path, "fucina gemma4moe-tiny (random weights)")
    prompts = ["What is the capital of France? 12345 numbers, and a longer tail of text to decode after",
               "<|turn>user\nhello there<turn|>\n<|turn>model\n"]
    result = reference(model, tok, path, prompts, "gemma4")
    moe_result = reference(moe, tok, moe_path, prompts, "gemma4")
    out = os.path.join(gold, "gemma4.json")
    with open(out, "w") as f:
        json.dump({"generator": "tools/gen_gemma4_tiny.py", "models": {"gemma4": result, "gemma4moe": moe_result}}, f,
                  ensure_ascii=False)
        f.write("\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
