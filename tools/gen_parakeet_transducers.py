#!/usr/bin/env python3
"""Tiny random Parakeet transducers (`transformers`' ParakeetForTDT and ParakeetForRNNT) and their
greedy decodes, for fucina's Parakeet TDT/RNN-T decoder.

Writes fucina-models/tests/goldens/parakeet-tdt-tiny.safetensors and parakeet-rnnt-tiny.safetensors:
the weights under their `transformers` names, the config as JSON in the metadata (`config`), the
vocabulary (`vocab`), and for three utterances (the two default-configuration cases of
parakeet_features.json and a 3.3 s chirp): `features.N` (the extractor's valid frames),
`projected.N` (the encoder's output through `encoder_projector`, at the valid positions),
`tokens.N` / `durations.N` (every greedy step: the token, blanks included, and the frames it
advanced) and `step_logits.N` (the joint network's output at every step).

The steps come from a loop over the model's own modules (decoder with its cache, joint network)
written here, and are checked against `generate` before they are written. `generate` picks each
step's token as the argmax over the token *and* duration logits together (GenerationMixin's greedy
search sees the joint output whole, while the TDT mixin reads tokens from the first vocab_size
entries): a duration logit above every token logit yields a token id past the vocabulary, which the
decoder's embedding then rejects. A logits processor that masks the duration entries for the token
choice makes `generate` decode as its own TDT mixin (and NeMo) intend; the check runs with it.
The joint head's duration rows are re-drawn with a larger scale and a bias so that durations vary
(1 and 3 occur; no 0: a larger duration-0 bias makes some frame emit forever, see greedy()).
"""
import json
import os

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    ParakeetFeatureExtractor,
    ParakeetForRNNT,
    ParakeetForTDT,
    ParakeetRNNTConfig,
    ParakeetTDTConfig,
)
from transformers.models.parakeet.generation_parakeet import ParakeetRNNTDecoderCache

from parakeet_common import randomize, tiny_encoder

here = os.path.dirname(os.path.abspath(__file__))
gold = os.path.join(here, "..", "fucina-models", "tests", "goldens")
torch.set_num_threads(1)

VOCAB = 17
BLANK = 16
VOCAB_PIECES = ["\u2581the", "\u2581a", "s", "\u2581cat", "\u2581dog", "e", "t", "\u2581sat", "\u2581on", "\u2581mat", "r", "n", "\u2581is", "\u2581here", "d", "'", "<blank>"]


class TokensOnly(LogitsProcessor):
    """The token choice over the token logits only (see the module docstring)."""

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, VOCAB:] = -float("inf")
        return scores


def build(kind):
    torch.manual_seed(21)
    enc = tiny_encoder()
    common = dict(encoder_config=enc.to_dict(), vocab_size=VOCAB, blank_token_id=BLANK, pad_token_id=BLANK, decoder_hidden_size=24, num_decoder_layers=2)
    if kind == "tdt":
        cfg = ParakeetTDTConfig(**common)
        model = ParakeetForTDT(cfg).eval()
    else:
        cfg = ParakeetRNNTConfig(max_symbols_per_step=3, **common)
        model = ParakeetForRNNT(cfg).eval()
    model.generation_config.decoder_start_token_id = BLANK
    randomize(model)
    with torch.no_grad():
        model.joint.head.weight.mul_(3.0)
        if kind == "tdt":
            g = torch.Generator().manual_seed(6)
            model.joint.head.weight[VOCAB:] = torch.randn(len(cfg.durations), cfg.decoder_hidden_size, generator=g) * 2.0
            model.joint.head.bias[VOCAB] += 1.5
        else:
            # Blanks between runs of one token that reach the per-frame limit (3).
            model.joint.head.bias[BLANK] += 9.0
    return cfg, model


def greedy(cfg, model, proj, kind):
    """Greedy transducer decoding of one utterance's projected encoder output [T, H]."""
    T = proj.shape[0]
    cache = ParakeetRNNTDecoderCache(cfg)
    dec = model.decoder(torch.tensor([[BLANK]]), cache=cache)
    t, symbols = 0, 0
    tokens, durations, logits = [], [], []
    # generate's output buffer holds max_symbols_per_step * T tokens, the start token included.
    while t < T and len(tokens) < cfg.max_symbols_per_step * T - 1:
        out = model.joint(decoder_hidden_states=dec[:, None, :, :], encoder_hidden_states=proj[t][None, None, None, :])[0, 0, 0]
        logits.append(out.clone())
        tok = int(out[:VOCAB].argmax())
        if kind == "tdt":
            d = int(out[VOCAB:].argmax())
            if tok == BLANK and d == 0:
                d = 1
            symbols = symbols + 1 if d == 0 else 0
            assert symbols < cfg.max_symbols_per_step, "a frame reached max_symbols_per_step (generate has no per-frame limit for TDT)"
        else:
            symbols = 0 if tok == BLANK else symbols + 1
            d = 1 if tok == BLANK or symbols >= cfg.max_symbols_per_step else 0
            if d:
                symbols = 0
        tokens.append(tok)
        durations.append(d)
        if tok != BLANK:
            dec = model.decoder(torch.tensor([[tok]]), cache=cache)
        t += d
    return tokens, durations, torch.stack(logits)


def chirp():
    sr = 16000
    t = np.arange(int(3.3 * sr)) / sr
    rs = np.random.RandomState(7)
    return (0.3 * np.sin(2 * np.pi * (200 * t + 300 * t * t)) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t)) + 0.05 * rs.randn(len(t))).astype(np.float32)


fe = ParakeetFeatureExtractor()
with open(os.path.join(gold, "parakeet_features.json")) as fh:
    audios = [np.asarray(c["audio"], dtype=np.float32) for c in json.load(fh)["cases"] if c["config"]["feature_size"] == 80]
audios.append(chirp())

for kind in ["tdt", "rnnt"]:
    cfg, model = build(kind)
    tensors = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    for i, audio in enumerate(audios):
        inp = fe(audio, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
        with torch.no_grad():
            enc = model.get_audio_features(input_features=inp["input_features"], attention_mask=inp["attention_mask"], output_attention_mask=True)
            n = int(enc.attention_mask[0].sum())
            proj = enc.pooler_output[0, :n]
            tokens, durations, logits = greedy(cfg, model, proj, kind)
            out = model.generate(
                input_features=inp["input_features"],
                attention_mask=inp["attention_mask"],
                logits_processor=LogitsProcessorList([TokensOnly()]) if kind == "tdt" else None,
            )
        gen_tokens = out.sequences[0, 1:].tolist()
        gen_durations = out.durations[0, 1:].tolist()
        assert gen_tokens == tokens and gen_durations == durations, (kind, i, gen_tokens, tokens, gen_durations, durations)
        valid = int(inp["attention_mask"][0].sum())
        tensors[f"features.{i}"] = inp["input_features"][0, :valid].contiguous()
        tensors[f"projected.{i}"] = proj.contiguous()
        tensors[f"tokens.{i}"] = torch.tensor(tokens, dtype=torch.int32)
        tensors[f"durations.{i}"] = torch.tensor(durations, dtype=torch.int32)
        tensors[f"step_logits.{i}"] = logits.contiguous()
        print(f"{kind} utterance {i}: {n} positions, tokens {tokens}, durations {durations}")
    path = os.path.join(gold, f"parakeet-{kind}-tiny.safetensors")
    save_file(tensors, path, metadata={"config": json.dumps(cfg.to_dict(), sort_keys=True), "vocab": json.dumps(VOCAB_PIECES)})
    print(f"wrote {path}")
