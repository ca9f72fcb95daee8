#!/usr/bin/env python3
"""A tiny random ParakeetForCTC (`transformers`) and its outputs, for fucina's Parakeet.

Writes fucina-models/assets/parakeet-ctc-tiny.safetensors (the `asr` binary's default model):
the model's weights under their `transformers` names, its configuration as JSON in the file's
metadata (`config`), a made-up SentencePiece-style vocabulary (`vocab`: a JSON list of pieces,
the blank last), and for each utterance of tests/goldens/parakeet_features.json's default-configuration cases:
`features.N` (the extractor's valid frames), `hidden.N` (the encoder's output at the valid
positions), `logits.N` and `greedy.N` (the per-frame argmax, as `generate` returns it).
The batch-norm statistics and the attention's position biases are randomized (they start as
zeros and ones).

Also fucina-models/tests/goldens/parakeet_tones.wav (the second utterance as 16-bit PCM at
16 kHz) and, in the model file, `wav_greedy` / `wav_logits`: the model's per-frame argmax and
logits on that WAV's samples as Python's `wave` reads them (int16 / 32768).
"""
import wave
import json
import os

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import ParakeetCTCConfig, ParakeetFeatureExtractor, ParakeetForCTC

from parakeet_common import ctc_outputs, randomize, tiny_encoder

here = os.path.dirname(os.path.abspath(__file__))
gold = os.path.join(here, "..", "fucina-models", "tests", "goldens")

torch.manual_seed(21)
torch.set_num_threads(1)
enc = tiny_encoder()
cfg = ParakeetCTCConfig(encoder_config=enc.to_dict(), vocab_size=17, pad_token_id=16)
model = ParakeetForCTC(cfg).eval()
randomize(model)

fe = ParakeetFeatureExtractor()
with open(os.path.join(gold, "parakeet_features.json")) as fh:
    cases = [c for c in json.load(fh)["cases"] if c["config"]["feature_size"] == 80]

tensors = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
for i, c in enumerate(cases):
    audio = np.asarray(c["audio"], dtype=np.float32)
    inp = fe(audio, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
    with torch.no_grad():
        out = model(input_features=inp["input_features"], attention_mask=inp["attention_mask"], output_hidden_states=True)
        enc_out = model.encoder(input_features=inp["input_features"], attention_mask=inp["attention_mask"])
        seq = model.generate(input_features=inp["input_features"], attention_mask=inp["attention_mask"])
    n = int(enc_out.attention_mask[0].sum())
    valid = int(inp["attention_mask"][0].sum())
    tensors[f"features.{i}"] = inp["input_features"][0, :valid].contiguous()
    tensors[f"hidden.{i}"] = enc_out.last_hidden_state[0, :n].contiguous()
    tensors[f"logits.{i}"] = out.logits[0, :n].contiguous()
    tensors[f"greedy.{i}"] = seq[0, :n].to(torch.int32).contiguous()
    print(f"utterance {i}: {len(audio)} samples, {valid} frames, {n} encoder positions, greedy {seq[0, :n].tolist()}")

# The second utterance as a 16-bit WAV, and the model's answer on exactly those samples.
wav_path = os.path.join(gold, "parakeet_tones.wav")
pcm = np.clip(np.round(np.asarray(cases[1]["audio"], dtype=np.float64) * 32768.0), -32768, 32767).astype("<i2")
with wave.open(wav_path, "wb") as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(16000)
    w.writeframes(pcm.tobytes())
with wave.open(wav_path, "rb") as w:
    back = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0
inp = fe(back, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
tensors["wav_logits"], tensors["wav_greedy"], _ = ctc_outputs(model, inp)
print(f"wrote {wav_path}: greedy {tensors['wav_greedy'].tolist()}")

vocab = ["\u2581the", "\u2581a", "s", "\u2581cat", "\u2581dog", "e", "t", "\u2581sat", "\u2581on", "\u2581mat", "r", "n", "\u2581is", "\u2581here", "d", "'", "<blank>"]
assert len(vocab) == cfg.vocab_size
path = os.path.join(here, "..", "fucina-models", "assets", "parakeet-ctc-tiny.safetensors")
save_file(tensors, path, metadata={"config": json.dumps(cfg.to_dict(), sort_keys=True), "vocab": json.dumps(vocab)})
print(f"wrote {path}")
