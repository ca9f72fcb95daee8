#!/usr/bin/env python3
"""Qwen3 prefill and decode, fucina-rs vs llama.cpp, on the same GGUF files.

Side by side in one run: the same synthetic Qwen3 file (random weights, real shapes; the
default preset is Qwen3-0.6B: 28 layers, hidden 1024, 16/8 heads, FFN 3072, vocab 151936),
the same thread count, CPU only, f16 KV cache on both sides, interleaved A/B rounds (one
repetition of every test per tool per round), medians over rounds. llama.cpp is built
from the sources in the pinned llama-cpp-python sdist (benches/llama_cpp/build.sh).

    python3 benches/llm_vs_llama_cpp.py                      # F16, Q8_0, Q4_K; 2 threads; 5 rounds
    python3 benches/llm_vs_llama_cpp.py --formats Q4_K --rounds 3 --threads 1

Prints one table: tokens/s of each tool and the ratio fucina / llama.cpp (> 1: fucina faster).
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA_BENCH = os.path.join(ROOT, "benches", "llama_cpp", "build", "bin", "llama-bench")


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def fucina_round(model, pp, tg, threads, extra):
    out = run([os.path.join(ROOT, "target", "release", "lm-bench"), model, "--pp", ",".join(map(str, pp)),
               "--tg", str(tg), "-t", str(threads), "-r", "1"] + extra).stdout
    res = {}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            _, test, rate = line.split()
            res[test] = float(rate)
    return res


def llama_round(model, pp, tg, threads, extra):
    out = run([LLAMA_BENCH, "-m", model, "-p", ",".join(map(str, pp)), "-n", str(tg), "-t", str(threads),
               "-r", "1", "-o", "jsonl"] + extra).stdout
    res = {}
    for line in out.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r.get("n_gen", 0) > 0:
            res[f"tg{r['n_gen']}"] = float(r["avg_ts"])
        else:
            res[f"pp{r['n_prompt']}"] = float(r["avg_ts"])
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--formats", default="F16,Q8_0,Q4_K")
    ap.add_argument("--preset", default="qwen3-0.6b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pp", default="16,64,256")
    ap.add_argument("--tg", type=int, default=32)
    ap.add_argument("--models", default=os.path.join(ROOT, "target", "bench-models"))
    ap.add_argument("--no-mmap", action="store_true", help="load the model into memory on both sides")
    a = ap.parse_args()
    pp = [int(x) for x in a.pp.split(",")]
    if not os.path.exists(LLAMA_BENCH):
        subprocess.run([os.path.join(ROOT, "benches", "llama_cpp", "build.sh")], check=True)
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "fucina-models", "--bin", "lm-bench", "--bin", "synth"],
                   check=True, cwd=ROOT)
    os.makedirs(a.models, exist_ok=True)
    f_extra = ["--no-mmap"] if a.no_mmap else []
    l_extra = ["-lm", "none"] if a.no_mmap else []
    tests = [f"pp{p}" for p in pp] + ([f"tg{a.tg}"] if a.tg else [])
    rows = []
    for fmt in a.formats.split(","):
        model = os.path.join(a.models, f"{a.preset}-{fmt.lower()}.gguf")
        if not os.path.exists(model):
            print(f"writing {model}", file=sys.stderr)
            subprocess.run([os.path.join(ROOT, "target", "release", "synth"), model, "--preset", a.preset,
                            "--format", fmt], check=True)
        samples = {"fucina": {t: [] for t in tests}, "llama.cpp": {t: [] for t in tests}}
        for r in range(a.rounds):
            # Alternate which tool goes first, so neither always runs on a warmer machine.
            order = [("fucina", fucina_round), ("llama.cpp", llama_round)]
            if r % 2:
                order.reverse()
            for name, fn in order:
                res = fn(model, pp, a.tg, a.threads, f_extra if name == "fucina" else l_extra)
                for t in tests:
                    samples[name][t].append(res[t])
            print(f"{fmt} round {r + 1}/{a.rounds} done", file=sys.stderr)
        for t in tests:
            f = statistics.median(samples["fucina"][t])
            l = statistics.median(samples["llama.cpp"][t])
            rows.append((fmt, t, f, l, f / l, min(samples["fucina"][t]), max(samples["fucina"][t]),
                         min(samples["llama.cpp"][t]), max(samples["llama.cpp"][t])))
    print(f"\n{a.preset}, {a.threads} threads, {a.rounds} interleaved rounds, "
          f"{'no-mmap' if a.no_mmap else 'mmap'}, f16 KV cache; {cpu_name()}; "
          f"{datetime.date.today().isoformat()}")
    print("| format | test | fucina tok/s | llama.cpp tok/s | fucina / llama.cpp | fucina range | llama.cpp range |")
    print("| --- | --- | ---: | ---: | ---: | --- | --- |")
    for fmt, t, f, l, ratio, fmin, fmax, lmin, lmax in rows:
        print(f"| {fmt} | {t} | {f:.1f} | {l:.1f} | {ratio:.2f}x | {fmin:.1f}-{fmax:.1f} | {lmin:.1f}-{lmax:.1f} |")


if __name__ == "__main__":
    main()
