#!/usr/bin/env python3
"""Converts a `transformers` Parakeet checkpoint directory (ParakeetForCTC, ParakeetForTDT or
ParakeetForRNNT: what `save_pretrained` writes, or a downloaded `nvidia/parakeet-{ctc,tdt,rnnt}-*`
snapshot: config.json, model.safetensors or pytorch_model.bin, and tokenizer.json when present)
into the single safetensors file fucina's `asr` reads:

- every tensor under its `transformers` name, in f32 (`num_batches_tracked` dropped);
- metadata `config`: the model's config as JSON (its `model_type` says which head), with the
  generation config's `decoder_start_token_id` for a transducer when it has one;
- metadata `vocab`: the tokenizer's pieces by id as a JSON list, the blank last (the
  tokenizer.json vocabulary, SentencePiece's `▁` kept), when the directory has a tokenizer.

    tools/.venv/bin/python tools/convert_parakeet.py CHECKPOINT_DIR out.safetensors
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoConfig, ParakeetForCTC, ParakeetForRNNT, ParakeetForTDT

CLASSES = {"parakeet_ctc": ParakeetForCTC, "parakeet_tdt": ParakeetForTDT, "parakeet_rnnt": ParakeetForRNNT}


def vocab_of(directory, size):
    path = os.path.join(directory, "tokenizer.json")
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        model = json.load(fh)["model"]
    v = model["vocab"]
    pieces = [p for p, _ in v] if isinstance(v, list) else [p for p, _ in sorted(v.items(), key=lambda kv: kv[1])]
    pieces = pieces[:size]
    while len(pieces) < size:
        pieces.append("<blank>" if len(pieces) == size - 1 else f"<unused{len(pieces)}>")
    return pieces


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, out = sys.argv[1], sys.argv[2]
    kind = AutoConfig.from_pretrained(src).model_type
    if kind not in CLASSES:
        sys.exit(f"{src}: model_type {kind!r} is not a Parakeet CTC, TDT or RNN-T model")
    model = CLASSES[kind].from_pretrained(src, torch_dtype=torch.float32).eval()
    cfg = model.config
    tensors = {
        k: v.detach().to(torch.float32).contiguous()
        for k, v in model.state_dict().items()
        if not k.endswith("num_batches_tracked")
    }
    config = cfg.to_dict()
    start = getattr(model.generation_config, "decoder_start_token_id", None)
    if kind != "parakeet_ctc" and start is not None:
        config["decoder_start_token_id"] = int(start)
    meta = {"config": json.dumps(config, sort_keys=True)}
    vocab = vocab_of(src, cfg.vocab_size)
    if vocab is not None:
        meta["vocab"] = json.dumps(vocab)
    save_file(tensors, out, metadata=meta)
    print(f"wrote {out}: {len(tensors)} tensors, vocabulary {'yes' if vocab else 'none'}")


if __name__ == "__main__":
    main()
