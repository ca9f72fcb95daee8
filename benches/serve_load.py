#!/usr/bin/env python3
"""The server under load: time to first token and aggregate decode rate with N concurrent
streaming requests, continuous batching (--parallel N) against one request at a time
(--parallel 1), on the same model file and threads, interleaved rounds.

    python3 benches/serve_load.py                                  # Qwen3-0.6B Q8_0 (synthetic), 8 clients, 3 rounds
    python3 benches/serve_load.py --model target/bench-models/qwen3-0.6b-q4_k.gguf --clients 4

Each client sends one /v1/completions request (its own prompt of --prompt-words words,
max_tokens --tokens, temperature 0, ignore nothing) at the same moment; the script records
when each stream's first token and its end arrive. Reported per setting: median and worst
time to first token, the wall time until every stream ended, and generated tokens per
second over all streams. The model files are the ones benches/llm_vs_llama_cpp.py writes.
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llm_vs_llama_cpp import ROOT, cpu_name  # noqa: E402


def start(model, parallel, threads, ctx):
    p = subprocess.Popen([os.path.join(ROOT, "target", "release", "serve"), model, "--port", "0", "--threads",
                          str(threads), "--parallel", str(parallel), "--ctx", str(ctx), "--kv", "f16",
                          "--max-tokens", "4096"], stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if line.startswith("listening on "):
            base = line.split()[-1].strip()
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, base
    raise SystemExit("serve did not start")


def client(base, prompt, tokens, go, out, i):
    body = json.dumps({"prompt": prompt, "max_tokens": tokens, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(f"{base}/v1/completions", data=body, headers={"content-type": "application/json"})
    go.wait()
    t0 = time.perf_counter()
    first, n = None, 0
    with urllib.request.urlopen(req, timeout=600) as r:
        for raw in r:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("choices") and chunk["choices"][0].get("text") and first is None:
                first = time.perf_counter() - t0
            if chunk.get("usage"):
                n = chunk["usage"]["completion_tokens"]
    out[i] = (first if first is not None else float("nan"), time.perf_counter() - t0, n)


def round_(base, clients, words, tokens):
    go = threading.Event()
    out = [None] * clients
    prompts = [" ".join(f"w{(i * 7919 + j * 104729) % 5000}" for j in range(words)) for i in range(clients)]
    ts = [threading.Thread(target=client, args=(base, prompts[i], tokens, go, out, i)) for i in range(clients)]
    for t in ts:
        t.start()
    t0 = time.perf_counter()
    go.set()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    ttft = [o[0] for o in out]
    return statistics.median(ttft), max(ttft), wall, sum(o[2] for o in out) / wall


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=os.path.join(ROOT, "target", "bench-models", "qwen3-0.6b-q8_0.gguf"))
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt-words", type=int, default=40)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "fucina-models", "--bin", "serve"], check=True, cwd=ROOT)
    ctx = 1024
    res = {1: [], a.clients: []}
    for r in range(a.rounds):
        order = [a.clients, 1] if r % 2 == 0 else [1, a.clients]
        for par in order:
            p, base = start(a.model, par, a.threads, ctx)
            try:
                round_(base, 1, 4, 4)  # warm-up: every weight read once
                res[par].append(round_(base, a.clients, a.prompt_words, a.tokens))
            finally:
                p.terminate()
                p.wait()
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"\n{os.path.basename(a.model)}, {a.clients} concurrent streaming requests ({a.prompt_words}-word prompts, "
          f"{a.tokens} tokens each), {a.threads} threads, {a.rounds} interleaved rounds; {cpu_name()}; "
          f"{datetime.date.today().isoformat()}")
    print("| serve | median time to first token (s) | worst time to first token (s) | all streams done (s) "
          "| generated tok/s (all streams) |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for par in (1, a.clients):
        rows = res[par]
        med = lambda k: statistics.median([x[k] for x in rows])  # noqa: E731
        rng = lambda k: f"{min(x[k] for x in rows):.2f}-{max(x[k] for x in rows):.2f}"  # noqa: E731
        print(f"| --parallel {par} | {med(0):.2f} ({rng(0)}) | {med(1):.2f} ({rng(1)}) | {med(2):.2f} ({rng(2)}) "
              f"| {med(3):.1f} ({rng(3)}) |")


if __name__ == "__main__":
    main()
