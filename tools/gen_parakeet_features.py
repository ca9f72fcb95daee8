#!/usr/bin/env python3
"""Goldens for Parakeet's audio front-end: `transformers`' ParakeetFeatureExtractor (log-mel
features, per-feature normalized over the valid frames) and the mel filter banks of
`transformers.audio_utils.mel_filter_bank`, into
fucina-models/tests/goldens/parakeet_features.json.

Cases: seeded random signals (noise plus a few tones) of several lengths under the default
configuration (80 mels, n_fft 512, window 400, hop 160, pre-emphasis 0.97) and a second one
(64 mels, n_fft 256, window 200, hop 80, no pre-emphasis); filter banks with the Slaney and
HTK scales and norms.
"""
import json
import os

import numpy as np
import torch
from transformers import ParakeetFeatureExtractor
from transformers.audio_utils import mel_filter_bank

here = os.path.dirname(os.path.abspath(__file__))
gold = os.path.join(here, "..", "fucina-models", "tests", "goldens", "parakeet_features.json")

torch.set_num_threads(1)


def signal(rng, n, sr):
    t = np.arange(n) / sr
    x = 0.05 * rng.standard_normal(n)
    for f, a in [(220.0, 0.3), (1375.0, 0.2), (3100.0, 0.1)]:
        x += a * np.sin(2 * np.pi * f * t + rng.uniform(0, 2 * np.pi))
    return x.astype(np.float32)


def r(v):
    return [float(f"{x:.9g}") for x in np.asarray(v, dtype=np.float64).ravel()]


cases = []
rng = np.random.default_rng(20261206)
configs = [
    dict(feature_size=80, sampling_rate=16000, hop_length=160, n_fft=512, win_length=400, preemphasis=0.97),
    dict(feature_size=64, sampling_rate=16000, hop_length=80, n_fft=256, win_length=200, preemphasis=None),
]
for ci, cfg in enumerate(configs):
    fe = ParakeetFeatureExtractor(**cfg)
    lengths = [3217, 8000] if ci == 0 else [1999]
    for n in lengths:
        x = signal(rng, n, cfg["sampling_rate"])
        out = fe(x, sampling_rate=cfg["sampling_rate"], return_tensors="pt", return_attention_mask=True)
        feats = out["input_features"][0].numpy()
        valid = int(out["attention_mask"][0].sum())
        cases.append(
            dict(
                config=cfg,
                audio=r(x),
                frames=int(feats.shape[0]),
                valid=valid,
                features=r(feats),
            )
        )

banks = []
for scale, norm in [("slaney", "slaney"), ("htk", None)]:
    for bins, mels, fmin, fmax, sr in [(257, 80, 0.0, 8000.0, 16000), (129, 40, 20.0, 7600.0, 16000)]:
        f = mel_filter_bank(
            num_frequency_bins=bins,
            num_mel_filters=mels,
            min_frequency=fmin,
            max_frequency=fmax,
            sampling_rate=sr,
            norm=norm,
            mel_scale=scale,
            dtype=np.float32,
        )
        banks.append(
            dict(bins=bins, mels=mels, f_min=fmin, f_max=fmax, sample_rate=sr, scale=scale, norm=norm or "peak", filters=r(f.T))
        )

with open(gold, "w") as fh:
    json.dump(dict(cases=cases, banks=banks), fh, separators=(",", ":"))
    fh.write("\n")
print(f"wrote {gold}: {len(cases)} feature cases, {len(banks)} filter banks")
