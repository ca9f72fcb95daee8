#!/usr/bin/env python3
"""The q8_0 KV cache, fucina-rs vs llama.cpp, logit by logit on the same GGUF file.

Both tools read the same token sequence (random ids, fixed seed): the first --prefill tokens in
one pass, then --decode tokens one at a time, and give the logits of every position. Each
runs with a full-precision cache (fucina f32 and f16, llama.cpp f16) and with a Q8_0 cache
(llama.cpp: `type_k = type_v = Q8_0`, flash attention on, as `-ctk q8_0 -ctv q8_0 -fa 1`).
llama.cpp runs through the pinned llama-cpp-python sdist's own ctypes bindings against the
libllama.so that benches/llama_cpp/build.sh builds; fucina through `lm-logits`.

    python3 benches/kv_q8_0_vs_llama_cpp.py                          # Qwen3-0.6B-shaped Q8_0 file
    python3 benches/kv_q8_0_vs_llama_cpp.py --format Q4_K --prefill 512 --decode 64

Prints, for each pair, over all positions (and over the decode positions alone): the largest
|logit difference|, the RMS difference relative to the RMS logit, the mean KL divergence of
the second's softmax from the first's (nats), and how often both pick the same top token.
What the Q8_0 cache costs each tool is the pair (its own full-precision cache, its Q8_0 cache);
whether the two Q8_0 caches agree is (llama.cpp q8_0, fucina q8_0), to be read against the
same two tools' difference with full-precision caches (llama.cpp f16, fucina f16).
"""
import argparse
import datetime
import os
import subprocess
import sys
import tarfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llm_vs_llama_cpp import ROOT, cpu_name  # noqa: E402

LLAMA = os.path.join(ROOT, "benches", "llama_cpp")
SDIST = "llama_cpp_python-0.3.36"
# The bindings' own dependencies, pinned (numpy and jinja2 as tools/requirements.txt pins them).
VENV_PKGS = ["numpy==2.4.6", "jinja2==3.1.6", "diskcache==5.6.3", "typing-extensions==4.15.0"]
GGML_TYPE = {"f16": 1, "q8_0": 8}


def llama_worker(a):
    """Runs inside benches/llama_cpp/.venv with the sdist's bindings on the path."""
    import numpy as np
    import llama_cpp

    tokens = [int(t) for t in open(a.tokens_file).read().split()]
    for kv in a.kv_types.split(","):
        llm = llama_cpp.Llama(model_path=a.model, n_ctx=len(tokens), n_batch=max(a.prefill, 1),
                              n_ubatch=max(a.prefill, 1), n_threads=a.threads, n_threads_batch=a.threads,
                              logits_all=True, flash_attn=True, type_k=GGML_TYPE[kv], type_v=GGML_TYPE[kv],
                              verbose=False)
        if a.prefill:
            llm.eval(tokens[:a.prefill])
        for t in tokens[a.prefill:]:
            llm.eval([t])
        np.save(os.path.join(a.out_dir, f"llama_{kv}.npy"), np.array(llm.scores[:len(tokens)], dtype=np.float32))
        print(f"llama.cpp {kv}: {len(tokens)} positions", file=sys.stderr)
        del llm


def ensure_bindings():
    """The venv with the bindings' dependencies, and the bindings unpacked from the sdist."""
    py = os.path.join(LLAMA, ".venv", "bin", "python")
    if not os.path.exists(os.path.join(LLAMA, "build", "bin", "libllama.so")):
        sys.exit("benches/llama_cpp/build/bin/libllama.so is missing: run benches/llama_cpp/build.sh first")
    if subprocess.run([py, "-c", "import numpy, jinja2, diskcache, typing_extensions"],
                      capture_output=True).returncode != 0:
        subprocess.run([py, "-m", "pip", "install", "-q"] + VENV_PKGS, check=True)
    src = os.path.join(LLAMA, "src", SDIST)
    if not os.path.isdir(os.path.join(src, "llama_cpp")):
        with tarfile.open(os.path.join(ROOT, "tools", ".cache", f"{SDIST}.tar.gz")) as tar:
            members = [m for m in tar.getmembers() if m.name.startswith(f"{SDIST}/llama_cpp/")]
            tar.extractall(os.path.join(LLAMA, "src"), members=members, filter="data")
    return py, src


def compare(ref, got):
    import numpy as np

    ref = ref.astype(np.float64)
    got = got.astype(np.float64)
    d = got - ref
    lr = ref - ref.max(axis=1, keepdims=True)
    lg = got - got.max(axis=1, keepdims=True)
    pr = np.exp(lr)
    pr /= pr.sum(axis=1, keepdims=True)
    log_pr = np.log(pr)
    log_pg = lg - np.log(np.exp(lg).sum(axis=1, keepdims=True))
    kl = (pr * (log_pr - log_pg)).sum(axis=1)
    return {
        "max_abs": float(np.abs(d).max()),
        "rel_rms": float(np.sqrt((d * d).mean()) / np.sqrt((ref * ref).mean())),
        "kl": float(kl.mean()),
        "top1": float((ref.argmax(axis=1) == got.argmax(axis=1)).mean()),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--format", default="Q8_0", help="weight format of the synthetic file")
    ap.add_argument("--preset", default="qwen3-0.6b")
    ap.add_argument("--model", help="a GGUF file to use instead of the synthetic one")
    ap.add_argument("--models", default=os.path.join(ROOT, "target", "bench-models"))
    ap.add_argument("--prefill", type=int, default=256)
    ap.add_argument("--decode", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "target", "kv-q8-0-logits"))
    # Internal: the llama.cpp side, run in the bindings' venv.
    ap.add_argument("--llama-worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--tokens-file", help=argparse.SUPPRESS)
    ap.add_argument("--kv-types", default="f16,q8_0", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.llama_worker:
        return llama_worker(a)
    if a.prefill < 0 or a.decode < 0 or a.prefill + a.decode == 0:
        sys.exit("--prefill and --decode: at least one position")

    subprocess.run(["cargo", "build", "-q", "--release", "-p", "fucina-models", "--bin", "lm-logits", "--bin", "synth"],
                   check=True, cwd=ROOT)
    os.makedirs(a.out_dir, exist_ok=True)
    model = a.model
    if not model:
        os.makedirs(a.models, exist_ok=True)
        model = os.path.join(a.models, f"{a.preset}-{a.format.lower()}.gguf")
        if not os.path.exists(model):
            print(f"writing {model}", file=sys.stderr)
            subprocess.run([os.path.join(ROOT, "target", "release", "synth"), model, "--preset", a.preset,
                            "--format", a.format], check=True)
    py, src = ensure_bindings()

    # The token ids: random, below the vocabulary size the bindings report.
    env = dict(os.environ, LLAMA_CPP_LIB_PATH=os.path.join(LLAMA, "build", "bin"),
               PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    vocab = int(subprocess.run(
        [py, "-c", "import sys, llama_cpp; m = llama_cpp.Llama(model_path=sys.argv[1], n_ctx=16, vocab_only=True,"
         " verbose=False); print(m.n_vocab())", model], env=env, check=True, capture_output=True,
        text=True).stdout.split()[-1])
    import random

    rng = random.Random(a.seed)
    tokens = [rng.randrange(vocab) for _ in range(a.prefill + a.decode)]
    tok_file = os.path.join(a.out_dir, "tokens.txt")
    with open(tok_file, "w") as f:
        f.write(" ".join(map(str, tokens)) + "\n")

    subprocess.run([py, os.path.abspath(__file__), "--llama-worker", "--model", model, "--tokens-file", tok_file,
                    "--prefill", str(a.prefill), "--decode", str(a.decode), "--threads", str(a.threads),
                    "--out-dir", a.out_dir], env=env, check=True)
    for kv in ["f32", "f16", "q8_0"]:
        subprocess.run([os.path.join(ROOT, "target", "release", "lm-logits"), model, "--tokens", tok_file,
                        "--prefill", str(a.prefill), "--kv", kv, "-t", str(a.threads),
                        "--out", os.path.join(a.out_dir, f"fucina_{kv}.npy")], check=True)

    # The comparison runs in the venv too (numpy).
    report = subprocess.run([py, "-c", COMPARE, a.out_dir, str(a.prefill)], check=True, capture_output=True,
                            text=True, env=env).stdout
    print(f"CPU: {cpu_name()}; {datetime.date.today()}; {os.path.basename(model)}; {a.prefill} prompt tokens in one "
          f"pass, then {a.decode} one at a time; {a.threads} threads; seed {a.seed}")
    print(report)


COMPARE = r"""
import sys, numpy as np
sys.path.insert(0, HERE)
from kv_q8_0_vs_llama_cpp import compare
d, prefill = sys.argv[1], int(sys.argv[2])
L = {n: np.load(f"{d}/{n}.npy") for n in ["llama_f16", "llama_q8_0", "fucina_f32", "fucina_f16", "fucina_q8_0"]}
pairs = [("fucina_f32", "fucina_q8_0", "fucina: its q8_0 cache against its f32 cache"),
         ("fucina_f16", "fucina_q8_0", "fucina: its q8_0 cache against its f16 cache"),
         ("llama_f16", "llama_q8_0", "llama.cpp: its q8_0 cache against its f16 cache"),
         ("llama_q8_0", "fucina_q8_0", "both q8_0 caches: fucina against llama.cpp"),
         ("llama_f16", "fucina_f16", "both f16 caches: fucina against llama.cpp (the baseline)")]
print("| pair | positions | max abs diff | rel. RMS diff | mean KL (nats) | same top-1 |")
print("| --- | --- | ---: | ---: | ---: | ---: |")
for ref, got, what in pairs:
    for name, sl in [("all", slice(None)), ("decode", slice(prefill, None))]:
        if L[ref][sl].shape[0] == 0:
            continue
        c = compare(L[ref][sl], L[got][sl])
        print(f"| {what} | {name} | {c['max_abs']:.4f} | {c['rel_rms']:.2e} | {c['kl']:.2e} | {100 * c['top1']:.1f}% |")
""".replace("HERE", repr(os.path.dirname(os.path.abspath(__file__))))

if __name__ == "__main__":
    main()
