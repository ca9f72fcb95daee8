#!/usr/bin/env python3
"""K-quant encoder goldens from ggml's own reference quantizers.

gguf-py has no K-quant encoders, so this script takes ggml-quants.c from the pinned
llama-cpp-python sdist (the llama.cpp sources it builds), compiles it with
tools/ggml_ref/kquant_ref.c (gcc -O2, x86-64 baseline: no FMA contraction), runs
quantize_row_{q2,q3,q4,q5,q6,q8}_K_ref on a fixed input and writes
fucina/tests/goldens/kquant.gguf: tensor `input` (F32) and one tensor per format holding
ggml's bytes. Needs gcc and network access to PyPI (once; the sdist is cached in
tools/.cache).
"""
import hashlib
import os
import subprocess
import tarfile
import sys
import tempfile

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T

SDIST = "llama_cpp_python-0.3.36"
# Fetched by package name and version through pip (never by address), then checked.
PIN = "llama-cpp-python==0.3.36"
SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"

here = os.path.dirname(os.path.abspath(__file__))
cache = os.path.join(here, ".cache")
out_path = os.path.join(here, "..", "fucina", "tests", "goldens", "kquant.gguf")


def ggml_sources():
    """Downloads (once) and unpacks the pinned sdist; returns its ggml directory."""
    os.makedirs(cache, exist_ok=True)
    tar = os.path.join(cache, f"{SDIST}.tar.gz")
    if not os.path.exists(tar):
        # --no-binary for this package only: the sdist itself, while its build backend
        # (needed to read its metadata) may come as wheels.
        subprocess.run([sys.executable, "-m", "pip", "download", PIN, "--no-deps", "--no-binary", "llama-cpp-python",
                        "-d", cache], check=True)
    digest = hashlib.sha256(open(tar, "rb").read()).hexdigest()
    if digest != SHA256:
        raise SystemExit(f"{tar}: sha256 {digest}, expected {SHA256}")
    ggml = os.path.join(cache, SDIST, "vendor", "llama.cpp", "ggml")
    if not os.path.isdir(ggml):
        with tarfile.open(tar) as t:
            members = [m for m in t.getmembers() if "/vendor/llama.cpp/ggml/" in m.name]
            t.extractall(cache, members=members, filter="data")
    return ggml


def golden_input():
    """64 super-blocks of 256 values covering the encoders' branches."""
    rng = np.random.default_rng(20261202)
    blocks = []
    kinds = [
        lambda: rng.standard_normal(256),                      # plain gaussian
        lambda: 0.02 * rng.standard_normal(256),               # LLM-weight scale
        lambda: rng.uniform(0.0, 1.0, 256),                    # positive only (min > 0)
        lambda: -rng.uniform(0.0, 1.0, 256),                   # negative only
        lambda: np.zeros(256),                                 # all zero
        lambda: np.full(256, 0.5),                             # constant (max == min)
        lambda: np.where(rng.uniform(size=256) < 0.03, 30.0, 1.0) * rng.standard_normal(256),  # outliers
        lambda: 1e-20 * rng.standard_normal(256),              # below GROUP_MAX_EPS
        lambda: np.where(np.arange(256) % 32 < 16, 0.0, rng.standard_normal(256)),  # zero groups
        lambda: rng.laplace(size=256),                         # heavy tails
        lambda: rng.integers(-3, 4, 256).astype(np.float64),   # exact small integers (ties)
        lambda: 1e-6 * rng.standard_normal(256),               # tiny but representable
        lambda: rng.standard_normal(256) + 3.0,                # shifted
        lambda: np.sin(np.arange(256) * 0.1) * 4.0,            # smooth
    ]
    for i in range(64):
        blocks.append(kinds[i % len(kinds)]())
    return np.concatenate(blocks).astype(np.float32)


def main():
    ggml = ggml_sources()
    x = golden_input()
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "kquant_ref")
        subprocess.run(["gcc", "-O2", "-DNDEBUG", "-I", os.path.join(ggml, "include"), "-I", os.path.join(ggml, "src"),
                        os.path.join(here, "ggml_ref", "kquant_ref.c"), os.path.join(ggml, "src", "ggml-quants.c"),
                        "-lm", "-o", exe], check=True, stderr=subprocess.DEVNULL)
        inp = os.path.join(tmp, "in.f32")
        x.tofile(inp)
        subprocess.run([exe, inp, tmp], check=True)
        w = gguf.GGUFWriter(out_path, arch="kquant-goldens")
        w.add_string("golden.reference", f"ggml-quants.c from {SDIST} (quantize_row_*_K_ref)")
        w.add_tensor("input", x)
        for name, qt in [("q2_k", T.Q2_K), ("q3_k", T.Q3_K), ("q4_k", T.Q4_K), ("q5_k", T.Q5_K), ("q6_k", T.Q6_K),
                         ("q8_k", T.Q8_K)]:
            data = np.fromfile(os.path.join(tmp, f"{name}.bin"), dtype=np.uint8)
            w.add_tensor(name, data, raw_dtype=qt)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
