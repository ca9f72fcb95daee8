#!/usr/bin/env python3
"""Batched decode, fucina-rs vs llama.cpp's llama-batched-bench, on the same GGUF files.

N sequences, each with a prompt of its own (--pp tokens, not shared), then --tg tokens
decoded for all N together: one forward pass per step reads every weight once for the N
sequences. The aggregate decode rate (N x tg / decode seconds; llama-batched-bench's
S_TG) at each N, the same threads, CPU only, f16 KV cache on both sides, interleaved A/B
rounds, medians and ranges over rounds.

    python3 benches/llm_batched_vs_llama_cpp.py                        # Q8_0, Q4_K; N = 1,2,4,8; 2 threads; 5 rounds
    python3 benches/llm_batched_vs_llama_cpp.py --formats Q8_0 --rounds 3 --threads 1

The model files are the ones benches/llm_vs_llama_cpp.py writes (it is run first when one
is missing).
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llm_vs_llama_cpp import ROOT, cpu_name, run  # noqa: E402

BATCHED = os.path.join(ROOT, "benches", "llama_cpp", "build", "bin", "llama-batched-bench")


def fucina_round(model, streams, pp, tg, threads):
    out = run([os.path.join(ROOT, "target", "release", "lm-bench"), model, "--pp", "1", "--tg", str(tg),
               "--streams", ",".join(map(str, streams)), "--stream-pp", str(pp), "-t", str(threads),
               "-r", "1"]).stdout
    res = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "RESULT" and "_x" in parts[1]:
            res[int(parts[1].split("_x")[1])] = float(parts[2])
    return res


def llama_round(model, streams, pp, tg, threads):
    ctx = max(streams) * (pp + tg) + 16
    out = run([BATCHED, "-m", model, "-c", str(ctx), "-b", "2048", "-ub", "512", "-npp", str(pp), "-ntg", str(tg),
               "-npl", ",".join(map(str, streams)), "-t", str(threads), "--output-format", "jsonl"]).stdout
    res = {}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            res[int(r["pl"])] = float(r["speed_tg"])
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--formats", default="Q8_0,Q4_K")
    ap.add_argument("--preset", default="qwen3-0.6b")
    ap.add_argument("--threads", default="2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--pp", type=int, default=32)
    ap.add_argument("--tg", type=int, default=32)
    ap.add_argument("--models", default=os.path.join(ROOT, "target", "bench-models"))
    a = ap.parse_args()
    streams = [int(x) for x in a.streams.split(",")]
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "fucina-models", "--bin", "lm-bench"], check=True, cwd=ROOT)
    rows = []
    for fmt in a.formats.split(","):
        model = os.path.join(a.models, f"{a.preset}-{fmt.lower()}.gguf")
        if not os.path.exists(model) or not os.path.exists(BATCHED):
            subprocess.run([sys.executable, os.path.join(ROOT, "benches", "llm_vs_llama_cpp.py"), "--formats", fmt,
                            "--preset", a.preset, "--rounds", "1", "--threads", "1", "--pp", "16", "--tg", "4"],
                           check=True)
        for threads in [int(t) for t in a.threads.split(",")]:
            samples = {"fucina": {n: [] for n in streams}, "llama.cpp": {n: [] for n in streams}}
            for r in range(a.rounds):
                order = [("fucina", fucina_round), ("llama.cpp", llama_round)]
                if r % 2:
                    order.reverse()
                for name, fn in order:
                    res = fn(model, streams, a.pp, a.tg, threads)
                    for n in streams:
                        samples[name][n].append(res[n])
                print(f"{fmt} {threads} threads: round {r + 1}/{a.rounds} done", file=sys.stderr)
            for n in streams:
                f, l = samples["fucina"][n], samples["llama.cpp"][n]
                rows.append((fmt, threads, n, statistics.median(f), statistics.median(l), min(f), max(f), min(l), max(l)))
    print(f"\n{a.preset}, batched decode (pp {a.pp} per sequence, tg {a.tg}), {a.rounds} interleaved rounds, "
          f"f16 KV cache; {cpu_name()}; {datetime.date.today().isoformat()}")
    print("| format | threads | streams | fucina tok/s (all streams) | llama.cpp S_TG tok/s | fucina / llama.cpp "
          "| fucina range | llama.cpp range |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |")
    for fmt, threads, n, f, l, fmin, fmax, lmin, lmax in rows:
        print(f"| {fmt} | {threads} | {n} | {f:.1f} | {l:.1f} | {f / l:.2f}x | {fmin:.1f}-{fmax:.1f} | {lmin:.1f}-{lmax:.1f} |")


if __name__ == "__main__":
    main()
