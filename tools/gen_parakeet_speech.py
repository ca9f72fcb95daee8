#!/usr/bin/env python3
"""A short speech WAV for Parakeet's end-to-end tests, and the reference models' outputs on it.

Writes fucina-models/tests/goldens/speech_cat.wav: "the cat sat on the mat" spoken by espeak-ng
(Debian's espeak-ng 1.51, voice en-us, 150 words per minute; 22050 Hz, 16-bit mono: what
espeak-ng writes, so the test also exercises resampling), and
fucina-models/tests/goldens/speech_cat.safetensors:

- `samples16k`: the WAV resampled to 16 kHz by scipy's polyphase resampler
  (`resample_poly(x, 320, 441)`), the reference for fucina's resampler;
- `ctc_logits` / `ctc_greedy`: the tiny random ParakeetForCTC of fucina-models/assets on those
  samples (features by ParakeetFeatureExtractor), its logits and per-frame argmax;
- `tdt_tokens` / `tdt_durations`: the tiny random ParakeetForTDT of tests/goldens on those
  samples, `generate`'s steps (the duration logits masked for the token choice, as
  tools/gen_parakeet_transducers.py explains).

The models are random, so the transcripts are noise; the test checks the pipeline end to end.
"""
import json
import os
import subprocess
import tempfile
import wave

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from scipy.signal import resample_poly
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    ParakeetCTCConfig,
    ParakeetFeatureExtractor,
    ParakeetForCTC,
    ParakeetForTDT,
    ParakeetTDTConfig,
)

from parakeet_common import ctc_outputs

here = os.path.dirname(os.path.abspath(__file__))
root = os.path.join(here, "..", "fucina-models")
gold = os.path.join(root, "tests", "goldens")
torch.set_num_threads(1)

wav_path = os.path.join(gold, "speech_cat.wav")
with tempfile.TemporaryDirectory() as tmp:
    raw = os.path.join(tmp, "speech.wav")
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", raw, "the cat sat on the mat"], check=True)
    with wave.open(raw, "rb") as w:
        assert (w.getframerate(), w.getnchannels(), w.getsampwidth()) == (22050, 1, 2)
        pcm = w.readframes(w.getnframes())
# Rewritten with Python's wave module so the header is the same on every run.
with wave.open(wav_path, "wb") as w:
    w.setnchannels(1)
    w.setsampwidth(2)
    w.setframerate(22050)
    w.writeframes(pcm)
x = np.frombuffer(pcm, dtype="<i2").astype(np.float64) / 32768.0
x16 = resample_poly(x, 320, 441).astype(np.float32)
print(f"{wav_path}: {len(x)} samples at 22050 Hz, {len(x16)} at 16 kHz")

fe = ParakeetFeatureExtractor()
inp = fe(x16, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
out = {"samples16k": torch.from_numpy(x16.copy())}


def load(path, cls, cfg_cls):
    with safe_open(path, "pt") as f:
        meta = f.metadata()
        tensors = {k: f.get_tensor(k) for k in f.keys()}
    cfg = json.loads(meta["config"])
    cfg = cfg_cls(**{k: v for k, v in cfg.items() if k not in ("model_type", "transformers_version", "architectures")})
    model = cls(cfg).eval()
    state = model.state_dict()
    model.load_state_dict({k: tensors[k] for k in state if k in tensors}, strict=False)
    missing = [k for k in state if k not in tensors and not k.endswith("num_batches_tracked")]
    assert not missing, missing
    return cfg, model


_, ctc = load(os.path.join(root, "assets", "parakeet-ctc-tiny.safetensors"), ParakeetForCTC, ParakeetCTCConfig)
out["ctc_logits"], out["ctc_greedy"], n = ctc_outputs(ctc, inp)
print(f"CTC: {n} frames, greedy {out['ctc_greedy'].tolist()}")

cfg, tdt = load(os.path.join(gold, "parakeet-tdt-tiny.safetensors"), ParakeetForTDT, ParakeetTDTConfig)
tdt.generation_config.decoder_start_token_id = cfg.blank_token_id


class TokensOnly(LogitsProcessor):
    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, cfg.vocab_size:] = -float("inf")
        return scores


with torch.no_grad():
    g = tdt.generate(input_features=inp["input_features"], attention_mask=inp["attention_mask"], logits_processor=LogitsProcessorList([TokensOnly()]))
out["tdt_tokens"] = g.sequences[0, 1:].to(torch.int32).contiguous()
out["tdt_durations"] = g.durations[0, 1:].to(torch.int32).contiguous()
print(f"TDT: tokens {g.sequences[0, 1:].tolist()}, durations {g.durations[0, 1:].tolist()}")
path = os.path.join(gold, "speech_cat.safetensors")
save_file(out, path, metadata={"text": "the cat sat on the mat", "voice": "espeak-ng 1.51 en-us -s 150"})
print(f"wrote {path}")
