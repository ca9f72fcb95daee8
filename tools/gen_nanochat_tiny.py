#!/usr/bin/env python3
"""Goldens for nanochat's GPT (`NanoChatForCausalLM` from `transformers`) and its BPE trainer.

1. A seeded random tiny NanoChatForCausalLM (grouped-query attention, soft-capped logits),
   its weights, the logits of two sequences, the mean cross-entropy against targets with
   ignored positions (-1), and every parameter's gradient of that loss, into
   fucina-models/tests/goldens/nanochat_tiny.safetensors (HF names; `grad.<name>`,
   `logits`, `input_ids`, `targets`, `loss`).
2. The merges `rustbpe` (nanochat's trainer, pinned in tools/requirements.txt) learns from a
   fixed corpus with nanochat's split pattern, and the ids it encodes a held-out text to,
   into fucina-models/tests/goldens/nanochat_bpe.json.
"""
import json
import os

import rustbpe
import torch
from safetensors.torch import save_file
from transformers import NanoChatConfig, NanoChatForCausalLM

here = os.path.dirname(os.path.abspath(__file__))
gold = os.path.join(here, "..", "fucina-models", "tests", "goldens")

# nanochat's GPT-4-style split pattern (digits in runs of up to two).
SPLIT_PATTERN = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,2}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"""
)


def model_goldens():
    torch.manual_seed(0)
    cfg = NanoChatConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        final_logit_softcapping=15.0,
        rms_norm_eps=1e-6,
    )
    model = NanoChatForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.3)
    ids = torch.randint(0, 64, (2, 9))
    targets = torch.randint(0, 64, (2, 9))
    targets[0, :3] = -1
    targets[1, 5] = -1
    logits = model(input_ids=ids).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 64), targets.reshape(-1), ignore_index=-1)
    loss.backward()
    out = {n: p.detach().contiguous() for n, p in model.named_parameters()}
    for n, p in model.named_parameters():
        out["grad." + n] = p.grad.detach().contiguous()
    out["logits"] = logits.detach().contiguous()
    out["input_ids"] = ids.to(torch.float32).contiguous()
    out["targets"] = targets.to(torch.float32).contiguous()
    out["loss"] = loss.detach().reshape(1)
    save_file(out, os.path.join(gold, "nanochat_tiny.safetensors"))


CORPUS = [
    "The capital of France is Paris. The capital of Italy is Rome.",
    "In the beginning God created the heaven and the earth. And the earth was without form, and void.",
    "12 + 34 = 46. 7 meters is 700 centimeters! It's 2026; we'll see, they're here.",
    "  indented\n\n\ttabs and    spaces   \r\n unicode: café, naïve, Zürich, 東京, ❤️ 🙂",
    "What is the capital of Spain? Madrid. What is 19 + 23? 42.",
] * 3


def bpe_goldens():
    tok = rustbpe.Tokenizer()
    tok.train_from_iterator(iter(CORPUS), 420, pattern=SPLIT_PATTERN)
    ranks = tok.get_mergeable_ranks()
    merges = sorted(((bytes(b), r) for b, r in ranks if r >= 256), key=lambda x: x[1])
    held_out = "The capital of Germany is Berlin. 1234 + 5 = 1239; don't panic!"
    json.dump(
        {
            "pattern": SPLIT_PATTERN,
            "corpus": CORPUS,
            "vocab_size": 420,
            "tokens": [list(b) for b, _ in merges],
            "held_out": held_out,
            "ids": tok.encode(held_out),
        },
        open(os.path.join(gold, "nanochat_bpe.json"), "w"),
        indent=0,
    )


if __name__ == "__main__":
    model_goldens()
    bpe_goldens()
