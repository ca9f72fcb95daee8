#!/usr/bin/env python3
"""Qwen3 prefill and decode, fucina-rs vs llama.cpp, on the same GGUF files.

Side by side in one run: the same synthetic Qwen3 file (random weights, real shapes; the
default preset is Qwen3-0.6B: 28 layers, hidden 1024, 16/8 heads, FFN 3072, vocab 151936),
the same thread count, CPU only, f16 KV cache on both sides, interleaved A/B rounds (one
repetition of every test per tool per round), medians over rounds. Both tools warm up the
same way: an untimed run of each test first, one cache emptied before every run. llama.cpp is built
from the sources in the pinned llama-cpp-python sdist (benches/llama_cpp/build.sh).

    python3 benches/llm_vs_llama_cpp.py                      # F16, Q8_0, Q4_K, Q4_K_M, Q6_K; 2 and 1 threads; 5 rounds
    python3 benches/llm_vs_llama_cpp.py --formats Q4_K --rounds 3 --threads 1

Prints one table: tokens/s of each tool and the ratio fucina / llama.cpp (> 1: fucina faster);
for decode also each tool's weight bytes per token times tok/s as a fraction of the read
bandwidth lm-bench's probe measured on the same threads. Q4_K_M files are made by our
`quantize` from the F16 file, as llama-quantize makes them from a float one.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LLAMA_BENCH = os.path.join(ROOT, "benches", "llama_cpp", "build", "bin", "llama-bench")


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_common import cpu_model, outlined_simd_calls  # noqa: E402


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)


def cpu_name():
    return cpu_model() or "unknown CPU"


def fucina_round(model, pp, tg, threads, extra):
    out = run([os.path.join(ROOT, "target", "release", "lm-bench"), model, "--pp", ",".join(map(str, pp)),
               "--tg", str(tg), "-t", str(threads), "-r", "1"] + extra).stdout
    res = {}
    for line in out.splitlines():
        if line.startswith("RESULT ") or line.startswith("PROBE "):
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
    ap.add_argument("--formats", default="F16,Q8_0,Q4_K,Q4_K_M,Q6_K")
    ap.add_argument("--preset", default="qwen3-0.6b")
    ap.add_argument("--threads", default="2,1", help="thread counts, comma-separated")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pp", default="16,64,256")
    ap.add_argument("--tg", type=int, default=32)
    ap.add_argument("--models", default=os.path.join(ROOT, "target", "bench-models"))
    ap.add_argument("--no-mmap", action="store_true", help="load the model into memory on both sides")
    ap.add_argument("--kv", default="f16", choices=["f16", "q8_0"],
                    help="KV cache type on both sides (llama.cpp: -ctk/-ctv)")
    ap.add_argument("--depth", type=int, default=0,
                    help="tokens already in the cache before each test (llama-bench -d; lm-bench runs a prompt first)")
    a = ap.parse_args()
    pp = [int(x) for x in a.pp.split(",")]
    if not os.path.exists(LLAMA_BENCH):
        subprocess.run([os.path.join(ROOT, "benches", "llama_cpp", "build.sh")], check=True)
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "fucina-models", "--bin", "lm-bench", "--bin", "synth",
                    "--bin", "quantize"], check=True, cwd=ROOT)
    outlined = outlined_simd_calls(os.path.join(ROOT, "target", "release", "lm-bench"))
    if outlined:
        sys.exit("lm-bench calls SIMD intrinsics as functions (a kernel's closure did not get its "
                 "target features), so its numbers would not be the kernels':\n  " + "\n  ".join(outlined))
    os.makedirs(a.models, exist_ok=True)
    f_extra = (["--no-mmap"] if a.no_mmap else []) + ["--kv", a.kv]
    l_extra = (["-lm", "none"] if a.no_mmap else []) + ["-ctk", a.kv, "-ctv", a.kv]
    if a.depth:
        f_extra += ["--depth", str(a.depth)]
        l_extra += ["-d", str(a.depth)]
    tests = [f"pp{p}" for p in pp] + ([f"tg{a.tg}"] if a.tg else [])
    rows = []
    bench_threads = [int(t) for t in str(a.threads).split(",")]
    for fmt in a.formats.split(","):
        model = os.path.join(a.models, f"{a.preset}-{fmt.lower()}.gguf")
        if not os.path.exists(model):
            print(f"writing {model}", file=sys.stderr)
            if fmt.upper().endswith("_M"):
                base = os.path.join(a.models, f"{a.preset}-f16.gguf")
                if not os.path.exists(base):
                    subprocess.run([os.path.join(ROOT, "target", "release", "synth"), base, "--preset", a.preset,
                                    "--format", "F16"], check=True)
                subprocess.run([os.path.join(ROOT, "target", "release", "quantize"), base, model, fmt], check=True)
            else:
                subprocess.run([os.path.join(ROOT, "target", "release", "synth"), model, "--preset", a.preset,
                                "--format", fmt], check=True)
        for threads in bench_threads:
            samples = {"fucina": {t: [] for t in tests}, "llama.cpp": {t: [] for t in tests}}
            bw = []
            for r in range(a.rounds):
                # Alternate which tool goes first, so neither always runs on a warmer machine.
                order = [("fucina", fucina_round), ("llama.cpp", llama_round)]
                if r % 2:
                    order.reverse()
                for name, fn in order:
                    res = fn(model, pp, a.tg, threads, f_extra if name == "fucina" else l_extra)
                    for t in tests:
                        samples[name][t].append(res[t])
                    if name == "fucina" and a.tg:
                        # fucina's decode bytes per token and the probe, to place llama.cpp too.
                        bw.append((res.get(f"tg{a.tg}_bw", 0.0) / max(res[f"tg{a.tg}"], 1e-9), res.get("read_gbs", 0.0)))
                print(f"{fmt} {threads} threads: round {r + 1}/{a.rounds} done", file=sys.stderr)
            for t in tests:
                f = statistics.median(samples["fucina"][t])
                l = statistics.median(samples["llama.cpp"][t])
                frac = ""
                if t.startswith("tg") and bw:
                    per_rate = statistics.median([b[0] for b in bw])
                    frac = f"{per_rate * f:.2f} / {per_rate * l:.2f}"
                rows.append((fmt, threads, t, f, l, f / l, min(samples["fucina"][t]), max(samples["fucina"][t]),
                             min(samples["llama.cpp"][t]), max(samples["llama.cpp"][t]), frac))
            if bw:
                probe = statistics.median([b[1] for b in bw])
                print(f"{fmt} {threads} threads: read-bandwidth probe {probe:.1f} GB/s", file=sys.stderr)
    print(f"\n{a.preset}, {a.rounds} interleaved rounds, "
          f"{'no-mmap' if a.no_mmap else 'mmap'}, {a.kv} KV cache, depth {a.depth}; {cpu_name()}; "
          f"{datetime.date.today().isoformat()}")
    print("| format | threads | test | fucina tok/s | llama.cpp tok/s | fucina / llama.cpp | fucina range | llama.cpp range "
          "| decode bandwidth used (fucina / llama.cpp) |")
    print("| --- | ---: | --- | ---: | ---: | ---: | --- | --- | --- |")
    for fmt, threads, t, f, l, ratio, fmin, fmax, lmin, lmax, frac in rows:
        print(f"| {fmt} | {threads} | {t} | {f:.1f} | {l:.1f} | {ratio:.2f}x | {fmin:.1f}-{fmax:.1f} | {lmin:.1f}-{lmax:.1f} "
              f"| {frac} |")


if __name__ == "__main__":
    main()
