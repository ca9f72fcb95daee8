#!/usr/bin/env python3
"""Real-time factor of NAM models: fucina's streaming engine vs neural-amp-modeler (PyTorch)
and, when `benches/nam_core/build.sh` has built it, NeuralAmpModelerCore (the plugin's C++).

Same .nam files, one thread each, 48 kHz, buffers of 32..512 samples, interleaved rounds
(fucina then PyTorch, alternating which goes first), medians. PyTorch has no streaming
engine, so it runs each buffer with the model's receptive field of preceding samples as
context (what a PyTorch real-time host has to do), plus once on the whole signal for
reference. Real-time factor = seconds of audio per second of compute (> 1: faster than
real time). fucina's per-buffer latency percentiles come from `amp-bench`; NAM Core's from
the driver in benches/nam_core, which measures the same way on the same noise. Before timing,
NAM Core renders the golden test signal and must match the PyTorch goldens within 1e-5 (so
both C++ and Rust engines are checked to compute the same function).

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


NAM_CORE = os.path.join(ROOT, "benches", "nam_core", "build", "nam_core_bench")


def parse_results(out):
    res = {}
    for line in out.splitlines():
        if line.startswith("RESULT"):
            _, _, bs, rtf, p50, p99, mx = line.split()
            res[int(bs)] = (float(rtf), float(p50), float(p99), float(mx))
    return res


def fucina_rtf(path, buffers, seconds):
    out = subprocess.run([os.path.join(ROOT, "target", "release", "amp-bench"), path, "--buffers",
                          ",".join(map(str, buffers)), "--seconds", str(seconds)],
                         check=True, text=True, capture_output=True).stdout
    return parse_results(out)


def nam_core_rtf(path, buffers, seconds):
    out = subprocess.run([NAM_CORE, path, "--buffers", ",".join(map(str, buffers)), "--seconds", str(seconds)],
                         check=True, text=True, capture_output=True).stdout
    return parse_results(out)


def check_nam_core(name, sig, tmp="/tmp"):
    """Renders the golden input (`sig`: signals.json) through NAM Core (buffers of 7) and
    returns the max abs error against the PyTorch output."""
    src, dst = os.path.join(tmp, "nam_core_in.f32"), os.path.join(tmp, "nam_core_out.f32")
    np.asarray(sig["input"], dtype=np.float32).tofile(src)
    subprocess.run([NAM_CORE, os.path.join(GOLD, f"{name}.nam"), "--buffers", "7", "--render", src, dst], check=True)
    out = np.fromfile(dst, dtype=np.float32)
    return float(np.abs(out - np.asarray(sig["outputs"][name], dtype=np.float32)).max())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="standard,lite,feather,nano")
    ap.add_argument("--buffers", default="32,64,128,256,512")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-nam-core", action="store_true", help="skip NeuralAmpModelerCore even if built")
    a = ap.parse_args()
    torch.set_num_threads(1)
    buffers = [int(b) for b in a.buffers.split(",")]
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "fucina-models", "--bin", "amp-bench"], check=True, cwd=ROOT)
    print(f"NAM streaming, 1 thread, 48 kHz, {a.seconds:g} s of audio per measurement, {a.rounds} interleaved rounds; "
          f"{datetime.date.today().isoformat()}")
    core = os.path.exists(NAM_CORE) and not a.no_nam_core
    if core:
        import json
        with open(os.path.join(GOLD, "signals.json")) as f:
            signals = json.load(f)
    else:
        print("(NeuralAmpModelerCore not built: run benches/nam_core/build.sh to add it)")
    print("| model | buffer | fucina RTF | PyTorch RTF (buffer + context) | fucina / PyTorch "
          + ("| NAM Core RTF | fucina / NAM Core | NAM Core time / deadline p50, p99, max " if core else "")
          + "| fucina time / deadline p50, p99, max |")
    print("| --- | ---: | ---: | ---: | ---: " + ("| ---: | ---: | --- " if core else "") + "| --- |")
    wholes = {}
    for name in a.models.split(","):
        path = os.path.join(GOLD, f"{name}.nam")
        if core:
            err = check_nam_core(name, signals)
            if err > 1e-5:
                raise SystemExit(f"NAM Core disagrees with the PyTorch goldens on {name}: max abs error {err:.2e}")
        engines = [("f", fucina_rtf), ("t", torch_rtf)] + ([("c", nam_core_rtf)] if core else [])
        runs = {k: [] for k, _ in engines}
        for r in range(a.rounds):
            # Rotate which engine goes first so drift (thermal, other load) spreads evenly.
            order = engines[r % len(engines):] + engines[:r % len(engines)]
            for k, fn in order:
                runs[k].append(fn(path, buffers, a.seconds))
        wholes[name] = statistics.median(t["whole"] for t in runs["t"])

        def lat(k, bs):
            return ", ".join(f"{statistics.median(run[bs][i] for run in runs[k]):.3f}" for i in (1, 2, 3))

        for bs in buffers:
            f = statistics.median(run[bs][0] for run in runs["f"])
            t = statistics.median(run[bs] for run in runs["t"])
            row = f"| {name} | {bs} | {f:.1f}x | {t:.2f}x | {f / t:.1f} "
            if core:
                c = statistics.median(run[bs][0] for run in runs["c"])
                row += f"| {c:.1f}x | {f / c:.2f} | {lat('c', bs)} "
            print(row + f"| {lat('f', bs)} |")
    print("\nPyTorch on the whole signal at once (no streaming), for reference: "
          + ", ".join(f"{k} {v:.1f}x" for k, v in wholes.items()))


if __name__ == "__main__":
    main()
