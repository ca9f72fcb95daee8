#!/usr/bin/env python3
"""Real-time factor of NAM models: fucina's streaming engine vs neural-amp-modeler (PyTorch).

Same .nam files, one thread each, 48 kHz, buffers of 32..512 samples, interleaved rounds
(fucina then PyTorch, alternating which goes first), medians. PyTorch has no streaming
engine, so it runs each buffer with the model's receptive field of preceding samples as
context (what a PyTorch real-time host has to do), plus once on the whole signal for
reference. Real-time factor = seconds of audio per second of compute (> 1: faster than
real time). fucina's per-buffer latency percentiles come from `amp-bench`.

    tools/.venv/bin/python benches/amp_vs_nam.py                 # the four WaveNet presets
    tools/.venv/bin/python benches/amp_vs_nam.py --rounds 3 --seconds 5
"""
import argparse
import datetime
import os
import statistics
import subprocess
import time

import numpy as np
import torch

from nam.models._from_nam import init_from_nam

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLD = os.path.join(ROOT, "fucina-models", "tests", "goldens", "nam")


def torch_rtf(path, buffers, seconds, rate=48_000):
    import json
    with open(path) as f:
        model = init_from_nam(json.load(f)).eval()
    rf = model.receptive_field
    n = int(seconds * rate)
    x = (np.random.default_rng(1).uniform(-0.25, 0.25, n)).astype(np.float32)
    res = {}
    with torch.no_grad():
        xt = torch.from_numpy(x)
        t0 = time.perf_counter()
        model(xt, pad_start=True)
        res["whole"] = seconds / (time.perf_counter() - t0)
        padded = torch.cat([torch.zeros(rf - 1), xt])
        for bs in buffers:
            t0 = time.perf_counter()
            for s in range(0, n, bs):
                # The buffer plus the receptive field of history before it.
                model(padded[s: s + bs + rf - 1], pad_start=False)
            res[bs] = seconds / (time.perf_counter() - t0)
    return res


def fucina_rtf(path, buffers, seconds):
    out = subprocess.run([os.path.join(ROOT, "target", "release", "amp-bench"), path, "--buffers",
                          ",".join(map(str, buffers)), "--seconds", str(seconds)],
                         check=True, text=True, capture_output=True).stdout
    res = {}
    for line in out.splitlines():
        if line.startswith("RESULT"):
            _, _, bs, rtf, p50, p99, mx = line.split()
            res[int(bs)] = (float(rtf), float(p50), float(p99), float(mx))
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="standard,lite,feather,nano")
    ap.add_argument("--buffers", default="32,64,128,256,512")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    buffers = [int(b) for b in a.buffers.split(",")]
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "fucina-models", "--bin", "amp-bench"], check=True, cwd=ROOT)
    print(f"NAM streaming, 1 thread, 48 kHz, {a.seconds:g} s of audio per measurement, {a.rounds} interleaved rounds; "
          f"{datetime.date.today().isoformat()}")
    print("| model | buffer | fucina RTF | PyTorch RTF (buffer + context) | ratio | fucina buffer time / deadline p50, p99, max |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    wholes = {}
    for name in a.models.split(","):
        path = os.path.join(GOLD, f"{name}.nam")
        f_runs, t_runs = [], []
        for r in range(a.rounds):
            if r % 2 == 0:
                f_runs.append(fucina_rtf(path, buffers, a.seconds))
                t_runs.append(torch_rtf(path, buffers, a.seconds))
            else:
                t_runs.append(torch_rtf(path, buffers, a.seconds))
                f_runs.append(fucina_rtf(path, buffers, a.seconds))
        wholes[name] = statistics.median(t["whole"] for t in t_runs)
        for bs in buffers:
            f = statistics.median(run[bs][0] for run in f_runs)
            t = statistics.median(run[bs] for run in t_runs)
            lat = [statistics.median(run[bs][k] for run in f_runs) for k in (1, 2, 3)]
            print(f"| {name} | {bs} | {f:.1f}x | {t:.2f}x | {f / t:.1f} | {lat[0]:.3f}, {lat[1]:.3f}, {lat[2]:.3f} |")
    print("\nPyTorch on the whole signal at once (no streaming), for reference: "
          + ", ".join(f"{k} {v:.1f}x" for k, v in wholes.items()))


if __name__ == "__main__":
    main()
