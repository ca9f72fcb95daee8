#!/usr/bin/env python3
"""Parakeet speech recognition, fucina-rs vs transformers on the CPU: real-time factor.

Side by side in one run: one randomly initialized ParakeetForCTC of parakeet-ctc-0.6b's
shapes (24 FastConformer blocks, width 1024, 8 heads, feed-forward 4096, conv kernel 9, 8x
subsampling with 256 channels, 1025 tokens; f32), or with `--head tdt` a ParakeetForTDT of
parakeet-tdt-0.6b's shapes (the same encoder, a 2-layer LSTM prediction network and joint of
width 640, 1025 tokens and 5 durations), saved as safetensors with its config and a
placeholder vocabulary for fucina's `asr`, the same synthetic speech-band audio (a WAV at
16 kHz), the same thread count, interleaved rounds. Each side times features + encoder +
head + greedy decoding of the whole clip (transformers: ParakeetFeatureExtractor, then
the model's forward and argmax, or for TDT `generate` with the duration logits masked for the
token choice (see tools/gen_parakeet_transducers.py), under torch.inference_mode); the real-time factor is seconds
of audio per second of compute. Also prints fucina's peak resident memory.

    tools/.venv/bin/python benches/parakeet_vs_transformers.py --seconds 10 --threads 2,1 --rounds 3 [--head tdt]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import wave

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    ParakeetCTCConfig,
    ParakeetEncoderConfig,
    ParakeetFeatureExtractor,
    ParakeetForCTC,
    ParakeetForTDT,
    ParakeetTDTConfig,
)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from bench_common import cpu_model  # noqa: E402

OUT = os.path.join(ROOT, "target", "bench-models")


class TokensOnly(LogitsProcessor):
    """TDT's token choice over the token logits only."""

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, 1025:] = -float("inf")
        return scores


def build_model(head):
    enc = ParakeetEncoderConfig(
        hidden_size=1024,
        num_hidden_layers=24,
        num_attention_heads=8,
        intermediate_size=4096,
        conv_kernel_size=9,
        subsampling_factor=8,
        subsampling_conv_channels=256,
        num_mel_bins=80,
        scale_input=False,
    )
    torch.manual_seed(0)
    if head == "tdt":
        cfg = ParakeetTDTConfig(encoder_config=enc.to_dict(), vocab_size=1025, blank_token_id=1024, pad_token_id=1024, decoder_hidden_size=640, num_decoder_layers=2)
        model = ParakeetForTDT(cfg).eval()
        model.generation_config.decoder_start_token_id = 1024
    else:
        cfg = ParakeetCTCConfig(encoder_config=enc.to_dict(), vocab_size=1025, pad_token_id=1024)
        model = ParakeetForCTC(cfg).eval()
    path = os.path.join(OUT, f"parakeet-{head}-0.6b-shapes.safetensors")
    if not os.path.exists(path):
        os.makedirs(OUT, exist_ok=True)
        tensors = {k: v.contiguous() for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
        vocab = [f"\u2581t{i}" for i in range(1024)] + ["<blank>"]
        save_file(tensors, path, metadata={"config": json.dumps(cfg.to_dict()), "vocab": json.dumps(vocab)})
    else:
        from safetensors.torch import load_file

        model.load_state_dict(load_file(path), strict=False)
    return model, path


def write_audio(seconds):
    sr = 16000
    rng = np.random.default_rng(1)
    t = np.arange(int(seconds * sr)) / sr
    x = 0.02 * rng.standard_normal(t.size)
    for f, a in [(180.0, 0.3), (740.0, 0.2), (2300.0, 0.1)]:
        x += a * np.sin(2 * np.pi * f * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3.0 * t))
    pcm = np.clip(np.round(x * 32767), -32768, 32767).astype("<i2")
    path = os.path.join(OUT, f"parakeet-bench-{seconds:g}s.wav")
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sr)
        w.writeframes(pcm.tobytes())
    return path, pcm.astype(np.float32) / 32768.0


def fucina(model_path, wav, threads, reps):
    exe = os.path.join(ROOT, "target", "release", "asr")
    out = subprocess.run(
        [exe, model_path, "--in", wav, "--threads", str(threads), "--text-only", "--repeat", str(reps)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rtf = [float(l.split()[2]) for l in out.splitlines() if l.startswith("RESULT rtf")]
    rss = [float(l.split()[2]) for l in out.splitlines() if l.startswith("RESULT peak_rss_mib")]
    return statistics.median(rtf), rss[0] if rss else float("nan")


def reference(model, fe, audio, threads, reps, head):
    torch.set_num_threads(threads)
    secs = audio.size / 16000
    rtf = []
    with torch.inference_mode():
        for i in range(reps + 1):
            t0 = time.perf_counter()
            inp = fe(audio, sampling_rate=16000, return_tensors="pt", return_attention_mask=True)
            if head == "tdt":
                model.generate(input_features=inp["input_features"], attention_mask=inp["attention_mask"], logits_processor=LogitsProcessorList([TokensOnly()]))
            else:
                logits = model(input_features=inp["input_features"], attention_mask=inp["attention_mask"]).logits
                logits.argmax(-1)
            if i > 0:
                rtf.append(secs / (time.perf_counter() - t0))
    return statistics.median(rtf)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--threads", default="2,1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--reps", type=int, default=2, help="timed recognitions per tool per round")
    ap.add_argument("--head", choices=["ctc", "tdt"], default="ctc")
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "--release", "-q", "-p", "fucina-models", "--bin", "asr"], cwd=ROOT, check=True)
    model, path = build_model(a.head)
    wav, audio = write_audio(a.seconds)
    fe = ParakeetFeatureExtractor()
    print(f"CPU: {cpu_model()}; torch {torch.__version__}; {a.seconds:g} s of audio; head {a.head}", flush=True)
    rows = []
    for threads in [int(t) for t in a.threads.split(",")]:
        ours, theirs, rss = [], [], []
        for r in range(a.rounds):
            f, m = fucina(path, wav, threads, a.reps)
            t = reference(model, fe, audio, threads, a.reps, a.head)
            ours.append(f)
            theirs.append(t)
            rss.append(m)
            print(f"threads {threads} round {r + 1}: fucina {f:.1f}x real time, transformers {t:.1f}x", flush=True)
        fo, to = statistics.median(ours), statistics.median(theirs)
        rows.append((threads, fo, min(ours), max(ours), to, min(theirs), max(theirs), max(rss)))
    print()
    print("| threads | fucina RTF (x real time) | range | transformers RTF | range | fucina / transformers | fucina peak RSS MiB |")
    print("| ---: | ---: | --- | ---: | --- | ---: | ---: |")
    for th, fo, fl, fh, to, tl, thh, m in rows:
        print(f"| {th} | {fo:.1f} | {fl:.1f}-{fh:.1f} | {to:.1f} | {tl:.1f}-{thh:.1f} | {fo / to:.2f}x | {m:.0f} |")


if __name__ == "__main__":
    main()
