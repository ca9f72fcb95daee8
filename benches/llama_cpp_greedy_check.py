#!/usr/bin/env python3
"""The llama.cpp cross-check of every decoder family: the same tiny GGUF (llama.cpp's own
converter wrote each of them, fucina-models/assets) run by llama.cpp and by fucina on the same
tokens.

For each model, llama.cpp (the pinned sdist's ctypes bindings against the libllama.so that
benches/llama_cpp/build.sh builds) tokenizes a raw prompt as the file says (BOS where it asks
for one, control tokens parsed) and decodes --steps tokens greedily, keeping the logits of
every position (f32 KV cache, as fucina's). fucina's `lm-logits` then reads the same sequence (the prompt in one pass, the
generated tokens one at a time, as decoding feeds them). Reported per model: whether fucina's
greedy choice equals llama.cpp's at every generated position, the largest |logit difference|
and fucina's own token ids for the prompt against llama.cpp's. Exits 1 if any greedy token or
any prompt id differs, or a logit differs by more than --tol.

    python3 benches/llama_cpp_greedy_check.py            # every tiny model in the assets
    python3 benches/llama_cpp_greedy_check.py --model M.gguf --steps 64
"""
import argparse
import datetime
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kv_q8_0_vs_llama_cpp import LLAMA, ensure_bindings  # noqa: E402
from llm_vs_llama_cpp import ROOT, cpu_name  # noqa: E402

# deepseek-v2-tiny has no query compression (as V2-Lite); llama.cpp knows V2-Lite only by its
# 27 layers and refuses the file for lacking `q_lora_rank`.
ASSETS = ["llama", "llama-spm", "qwen2", "qwen3", "qwen3moe", "deepseek-v3", "glm4moe", "qwen35", "qwen35moe", "gemma4",
          "gemma4moe"]
PROMPTS = {"glm4moe": "[gMASK]<sop>What is the capital of France? 12345 numbers"}
# llama.cpp's CPU GELU reads a table of f16 values (input and output rounded to f16), so the
# Gemma 4 logits move by ~1e-2, and once (a near-tie of the MoE router flipped) by 0.35. With
# that table emulated in fucina the two agree within 2.7e-4 (dense) and 4.7e-4 (MoE)
# (measured 2026-12-06); transformers' exact GELU agrees with fucina within 1e-4.
TOLS = {"gemma4": 2e-2, "gemma4moe": 0.5}
PROMPT = "What is the capital of France? 12345 numbers"


def llama_worker(a):
    """Inside the bindings' venv: prompt ids, greedy ids and every position's logits."""
    import numpy as np
    import llama_cpp
    llm = llama_cpp.Llama(model_path=a.model[0], n_ctx=512, n_batch=512, n_threads=a.threads,
                          n_threads_batch=a.threads, logits_all=True, type_k=0, type_v=0, verbose=False)
    prompt = llm.tokenize(a.prompt.encode(), add_bos=True, special=True)
    llm.eval(prompt)
    out = []
    for _ in range(a.steps):
        t = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(t)
        llm.eval([t])
    np.save(os.path.join(a.out_dir, "llama.npy"), np.array(llm.scores[:llm.n_tokens - 1], dtype=np.float32))
    json.dump({"prompt": prompt, "greedy": out}, open(os.path.join(a.out_dir, "llama.json"), "w"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", help="a GGUF file (repeatable; default: the tiny assets)")
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--tol", type=float, default=1e-3,
                    help="largest logit difference accepted (Gemma 4's own, wider ones: TOLS)")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "target", "llama-cpp-greedy"))
    ap.add_argument("--llama-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--prompt", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.llama_worker:
        return llama_worker(a)
    py, src = ensure_bindings()
    env = dict(os.environ, LLAMA_CPP_LIB_PATH=os.path.join(LLAMA, "build", "bin"),
               PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if os.path.abspath(sys.prefix) != os.path.abspath(os.path.join(LLAMA, ".venv")):
        # The comparison needs numpy: run it in the bindings' venv.
        os.execve(py, [py, os.path.abspath(__file__)] + sys.argv[1:], env)
    import numpy as np

    subprocess.run(["cargo", "build", "-q", "--release", "-p", "fucina-models", "--bin", "lm-logits", "--bin", "chat"],
                   check=True, cwd=ROOT)
    models = a.model or [os.path.join(ROOT, "fucina-models", "assets", f"{m}-tiny-f32.gguf") for m in ASSETS]
    os.makedirs(a.out_dir, exist_ok=True)
    print(f"CPU: {cpu_name()}; {datetime.date.today()}; {a.steps} greedy steps; {a.threads} threads")
    print("| model | prompt ids | greedy tokens | max abs logit diff |")
    print("| --- | --- | --- | ---: |")
    failed = False
    for model in models:
        name = os.path.basename(model).removesuffix("-tiny-f32.gguf")
        prompt = PROMPTS.get(name, PROMPT)
        worker = subprocess.run([py, os.path.abspath(__file__), "--llama-worker", "--model", model, "--prompt",
                                 prompt, "--steps", str(a.steps), "--threads", str(a.threads), "--out-dir",
                                 a.out_dir], env=env, capture_output=True, text=True)
        if worker.returncode != 0:
            failed = True
            print(f"| {name} | llama.cpp did not load it: {worker.stderr.strip().splitlines()[-1]} | | |")
            continue
        ref = json.load(open(os.path.join(a.out_dir, "llama.json")))
        theirs = np.load(os.path.join(a.out_dir, "llama.npy"))
        seq = ref["prompt"] + ref["greedy"]
        tok_file = os.path.join(a.out_dir, "tokens.txt")
        with open(tok_file, "w") as f:
            f.write(" ".join(map(str, seq[:-1])) + "\n")
        ours_file = os.path.join(a.out_dir, "fucina.npy")
        subprocess.run([os.path.join(ROOT, "target", "release", "lm-logits"), model, "--tokens", tok_file,
                        "--prefill", str(len(ref["prompt"])), "-t", str(a.threads), "--out", ours_file], check=True,
                       capture_output=True)
        ours = np.load(ours_file)
        n = len(ref["prompt"])
        greedy_ok = [int(t) for t in ours[n - 1:].argmax(axis=1)] == ref["greedy"]
        diff = float(np.abs(ours.astype(np.float64) - theirs).max())
        ids = subprocess.run([os.path.join(ROOT, "target", "release", "chat"), model, "--prompt", prompt,
                              "--max-tokens", "0", "--print-ids"], check=True, capture_output=True,
                             text=True).stdout.split()
        ids_ok = [int(t) for t in ids] == ref["prompt"]
        ok = greedy_ok and ids_ok and diff <= TOLS.get(name, a.tol)
        failed |= not ok
        print(f"| {name} | {'same' if ids_ok else 'DIFFER'} ({n}) | {'same' if greedy_ok else 'DIFFER'} "
              f"({a.steps}) | {diff:.2e} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
