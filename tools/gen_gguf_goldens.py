#!/usr/bin/env python3
"""GGUF and quantization goldens from gguf-py (llama.cpp's own Python package).

Writes fucina/tests/goldens/gguf/all_types.gguf (every metadata value type, arrays,
tensors of F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q5_0/Q5_1 quantized by gguf.quants and
Q2_K..Q6_K blocks with synthetic contents) and fucina/tests/goldens/quant.json:
inputs, gguf-py's encoded bytes and decoded values for each block format.
"""
import json
import math
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import quants

here = os.path.dirname(os.path.abspath(__file__))
gold = os.path.join(here, "..", "fucina", "tests", "goldens")
os.makedirs(os.path.join(gold, "gguf"), exist_ok=True)


def signal(n, seed, scale=1.0):
    return np.array([math.sin(0.7 * i + 1.3 * seed) * scale + 0.1 * math.cos(0.31 * i * seed) for i in range(n)], dtype=np.float32)


def legacy_input(seed):
    x = signal(8 * 32, seed, 3.0)
    x[0:32] = 0.0  # an all-zero block
    x[32:64] = 1.25  # a constant block (max == min)
    x[64:96] = np.where(np.arange(32) % 2 == 0, 2.0, -2.0).astype(np.float32)  # ties in |x|
    x[100] = 40.0  # an outlier
    return x


rng = np.random.default_rng(1234)


def kquant_blocks(qtype, n_blocks):
    """Random K-quant blocks with finite, moderate f16 scales in the d/dmin fields."""
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    b = rng.integers(0, 256, size=(n_blocks, ts), dtype=np.uint8)
    def put_f16(col, lo, hi):
        v = rng.uniform(lo, hi, size=n_blocks).astype(np.float16).view(np.uint8).reshape(n_blocks, 2)
        b[:, col:col + 2] = v
    if qtype == T.Q2_K:
        put_f16(80, 0.01, 0.5); put_f16(82, 0.01, 0.5)
    elif qtype == T.Q3_K:
        put_f16(108, 0.01, 0.5)
    elif qtype in (T.Q4_K, T.Q5_K):
        put_f16(0, 0.01, 0.5); put_f16(2, 0.01, 0.5)
    elif qtype == T.Q6_K:
        put_f16(208, 0.01, 0.5)
    return b


cases = []
for name, qt in [("Q4_0", T.Q4_0), ("Q4_1", T.Q4_1), ("Q5_0", T.Q5_0), ("Q5_1", T.Q5_1), ("Q8_0", T.Q8_0), ("BF16", T.BF16)]:
    x = legacy_input(len(cases) + 1)
    q = quants.quantize(x.reshape(1, -1), qt).reshape(-1)
    d = quants.dequantize(q.reshape(1, -1), qt).reshape(-1)
    cases.append({"type": name, "input": x.view(np.uint32).tolist(), "encoded": q.tobytes().hex(), "decoded": d.astype(np.float32).view(np.uint32).tolist()})
for name, qt in [("Q2_K", T.Q2_K), ("Q3_K", T.Q3_K), ("Q4_K", T.Q4_K), ("Q5_K", T.Q5_K), ("Q6_K", T.Q6_K)]:
    b = kquant_blocks(qt, 3).reshape(-1)
    d = quants.dequantize(b.reshape(1, -1), qt).reshape(-1)
    cases.append({"type": name, "input": None, "encoded": b.tobytes().hex(), "decoded": d.astype(np.float32).view(np.uint32).tolist()})
# Blocks of denormals (and of tiny normals next to them): 1/d overflows to inf, so x * id is
# +-inf or NaN and the encoders' float -> integer casts decide the bytes.
den = np.zeros(5 * 32, dtype=np.float32)
den[0:32] = np.arange(-16, 16, dtype=np.float32) * np.float32(1e-41)
den[40] = np.float32(1e-44)  # one denormal among zeros
den[64:96] = np.where(np.arange(32) % 3 == 0, np.float32(1.2e-38), np.float32(-3e-39))
den[96] = np.float32(1.4e-45)  # the smallest denormal, alone
den[128:160] = np.linspace(-1e-37, 1e-37, 32, dtype=np.float32)  # tiny normals: 1/d finite but huge
for name, qt in [("Q4_0", T.Q4_0), ("Q4_1", T.Q4_1), ("Q5_0", T.Q5_0), ("Q5_1", T.Q5_1), ("Q8_0", T.Q8_0)]:
    q = quants.quantize(den.reshape(1, -1), qt).reshape(-1)
    d = quants.dequantize(q.reshape(1, -1), qt).reshape(-1)
    cases.append({"type": name, "what": "denormals", "input": den.view(np.uint32).tolist(), "encoded": q.tobytes().hex(), "decoded": d.astype(np.float32).view(np.uint32).tolist()})
with open(os.path.join(gold, "quant.json"), "w") as f:
    json.dump({"generator": "tools/gen_gguf_goldens.py", "gguf": gguf.__version__ if hasattr(gguf, "__version__") else "0.19.0", "cases": cases}, f, separators=(",", ":"))
    f.write("\n")

path = os.path.join(gold, "gguf", "all_types.gguf")
w = gguf.GGUFWriter(path, "llama")
w.add_uint8("test.u8", 200)
w.add_int8("test.i8", -100)
w.add_uint16("test.u16", 60000)
w.add_int16("test.i16", -30000)
w.add_uint32("test.u32", 4000000000)
w.add_int32("test.i32", -2000000000)
w.add_float32("test.f32", 3.25)
w.add_bool("test.bool_true", True)
w.add_bool("test.bool_false", False)
w.add_string("test.string", "fucina ünïcødé ✓")
w.add_uint64("test.u64", 2**63 + 5)
w.add_int64("test.i64", -(2**62))
w.add_float64("test.f64", -1.0e-300)
w.add_array("test.array_i32", [1, -2, 3, -4])
w.add_array("test.array_f32", [0.5, 1.5, -2.5])
w.add_array("test.array_str", ["alpha", "", "γάμμα"])
w.add_array("test.array_bool", [True, False, True])
w.add_array("test.array_nested", [[1, 2], [3, 4, 5]])
w.add_tensor("t.f32", signal(4 * 8, 20).reshape(4, 8))
w.add_tensor("t.f16", signal(3 * 8, 21).astype(np.float16).reshape(3, 8))
w.add_tensor("t.bf16", quants.quantize(signal(2 * 32, 22).reshape(2, 32), T.BF16), raw_dtype=T.BF16)
for i, qt in enumerate([T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1]):
    x = signal(2 * 64, 30 + i, 2.0).reshape(2, 64)
    w.add_tensor(f"t.{qt.name.lower()}", quants.quantize(x, qt), raw_dtype=qt)
for qt in [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]:
    w.add_tensor(f"t.{qt.name.lower()}", kquant_blocks(qt, 2).reshape(1, -1), raw_dtype=qt)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print(f"wrote {os.path.relpath(path)} ({os.path.getsize(path)} bytes) and quant.json ({len(cases)} cases)", file=sys.stderr)
