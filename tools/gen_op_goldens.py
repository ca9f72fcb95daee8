#!/usr/bin/env python3
"""Forward-op goldens from PyTorch for fucina's op parity test.

Inputs are closed-form (sines of the index), so no RNG has to agree across
languages. Each case stores its inputs, parameters and torch's output in f32.
Writes fucina/tests/goldens/ops.json; `tools/regen` runs this and checks the
committed file is reproduced.
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)


from golden_common import signal, t2j  # noqa: E402


cases = []


def case(name, inputs, output, **params):
    cases.append({"name": name, "inputs": {k: t2j(v) for k, v in inputs.items()}, "output": t2j(output), "params": params})


x = signal([3, 4, 7], 1, 3.0)
for op, f in [
    ("gelu", F.gelu),
    ("gelu_tanh", lambda t: F.gelu(t, approximate="tanh")),
    ("silu", F.silu),
    ("softplus", F.softplus),
    ("sigmoid", torch.sigmoid),
    ("tanh", torch.tanh),
    ("exp", torch.exp),
    ("relu", F.relu),
]:
    case(op, {"x": x}, f(x))
case("log", {"x": x}, torch.log(x.abs() + 0.5))
case("softmax_last", {"x": x}, torch.softmax(x, dim=2))
case("softmax_mid", {"x": x}, torch.softmax(x, dim=1))
case("log_softmax_first", {"x": x}, torch.log_softmax(x, dim=0))
case("logsumexp_mid", {"x": x}, torch.logsumexp(x, dim=1))
case("sum_first_last", {"x": x}, x.sum(dim=(0, 2)))
case("mean_last", {"x": x}, x.mean(dim=2))
case("max_mid", {"x": x}, x.amax(dim=1))
w = signal([7], 2)
b = signal([7], 3)
case("layer_norm", {"x": x, "w": w, "b": b}, F.layer_norm(x, (7,), w, b, eps=1e-5), eps=1e-5)
case("rms_norm", {"x": x, "w": w}, F.rms_norm(x, (7,), w, eps=1e-6), eps=1e-6)

# einsum "b s i, o i -> b s o" and a batched attention score "b q d, b k d -> b q k"
xi = signal([2, 5, 9], 4)
wo = signal([6, 9], 5)
case("einsum_linear", {"x": xi, "w": wo}, torch.einsum("bsi,oi->bso", xi, wo))
q = signal([2, 5, 8], 6)
k = signal([2, 7, 8], 7)
case("einsum_scores", {"q": q, "k": k}, torch.einsum("bqd,bkd->bqk", q, k))

# conv1d: causal dilated, and "same"
xc = signal([2, 3, 20], 8)
wc = signal([4, 3, 3], 9)
bc = signal([4], 10)
for dil in (1, 2, 5):
    span = dil * 2
    case(f"conv1d_causal_d{dil}", {"x": xc, "w": wc, "b": bc}, F.conv1d(F.pad(xc, (span, 0)), wc, bc, dilation=dil), dilation=dil)
case("conv1d_same", {"x": xc, "w": wc, "b": bc}, F.conv1d(xc, wc, bc, padding="same"), dilation=1)

# gather along the middle axis and embedding lookup
src = signal([3, 5, 4], 11)
idx = torch.tensor([[(i * 3 + j * 2 + kk) % 5 for kk in range(4)] for i in range(3) for j in range(2)]).reshape(3, 2, 4)
case("gather_mid", {"x": src, "index": idx.float()}, torch.gather(src, 1, idx))
table = signal([10, 6], 12)
ids = torch.tensor([[3, 0, 9], [9, 1, 3]])
case("embedding", {"table": table, "ids": ids.float()}, F.embedding(ids, table))

# half-precision rounding (stored as the f32 value of the rounded half)
xr = signal([64], 13, 100.0)
case("cast_f16", {"x": xr}, xr.to(torch.float16).to(torch.float32))
case("cast_bf16", {"x": xr}, xr.to(torch.bfloat16).to(torch.float32))

# comparisons, clamp, order ops, triangles, broadcasting (issue 18's missing ops)
xa = signal([3, 5, 6], 14, 2.0)
ya = signal([5, 6], 15, 2.0)
case("clamp", {"x": xa}, torch.clamp(xa, -0.7, 1.1), lo=-0.7, hi=1.1)
for name, f in [("gt", torch.gt), ("ge", torch.ge), ("lt", torch.lt), ("le", torch.le), ("eq", torch.eq), ("ne", torch.ne)]:
    yr = ya.clone()
    yr[::2, ::3] = xa[0, ::2, ::3]  # some equal pairs, so eq/ne/ge/le see ties
    case(f"cmp_{name}", {"x": xa, "y": yr}, f(xa, yr).float())
case("cmp_gt_scalar", {"x": xa}, torch.gt(xa, 0.25).float(), value=0.25)
case("cumsum_mid", {"x": xa}, torch.cumsum(xa, dim=1))
case("cumsum_last", {"x": xa}, torch.cumsum(xa, dim=2))
xt = torch.round(xa * 4) / 4  # ties, to pin the first-index rule
case("argmax_mid", {"x": xt}, torch.argmax(xt, dim=1).float())
case("argmin_last", {"x": xt}, torch.argmin(xt, dim=2).float())
vals, idx = torch.topk(xa, 3, dim=1)
case("topk_mid_values", {"x": xa}, vals, k=3)
case("topk_mid_indices", {"x": xa}, idx.float(), k=3)
for dg in (-1, 0, 2):
    case(f"tril_{dg}", {"x": xa}, torch.tril(xa, dg), diagonal=dg)
    case(f"triu_{dg}", {"x": xa}, torch.triu(xa, dg), diagonal=dg)
bv = signal([6], 16)
case("broadcast_add", {"x": xa, "v": bv}, xa + bv.expand(3, 5, 6))

# conv2d: strided/padded/dilated/grouped/depthwise, and pooling
x4 = signal([2, 4, 7, 6], 17)
for name, cout, groups, kw in [
    ("conv2d_plain", 3, 1, dict()),
    ("conv2d_stride_pad", 3, 1, dict(stride=(2, 1), padding=(1, 2))),
    ("conv2d_dilated", 2, 1, dict(dilation=(2, 1), padding=(1, 0))),
    ("conv2d_groups", 6, 2, dict(stride=(1, 2), padding=(1, 1))),
    ("conv2d_depthwise", 4, 4, dict(padding=(1, 1))),
]:
    w4 = signal([cout, 4 // groups, 3, 2], 18 + cout + groups)
    b4 = signal([cout], 19)
    y4 = F.conv2d(x4, w4, b4, groups=groups, **kw)
    st, pd, dl = kw.get("stride", (1, 1)), kw.get("padding", (0, 0)), kw.get("dilation", (1, 1))
    case(name, {"x": x4, "w": w4, "b": b4}, y4, stride=list(st), padding=list(pd), dilation=list(dl), groups=groups)
case("max_pool2d", {"x": x4}, F.max_pool2d(x4, (3, 2), stride=(2, 2), padding=(1, 1)), kernel=[3, 2], stride=[2, 2], padding=[1, 1])
case("avg_pool2d", {"x": x4}, F.avg_pool2d(x4, (2, 3), stride=(1, 2), padding=(1, 1)), kernel=[2, 3], stride=[1, 2], padding=[1, 1])
x3p = signal([2, 3, 11], 20)
case("max_pool1d", {"x": x3p}, F.max_pool1d(x3p, 3, stride=2, padding=1), kernel=3, stride=2, padding=1)
case("avg_pool1d", {"x": x3p}, F.avg_pool1d(x3p, 4, stride=3, padding=2), kernel=4, stride=3, padding=2)

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fucina", "tests", "goldens", "ops.json")
with open(out, "w") as f:
    json.dump({"generator": "tools/gen_op_goldens.py", "torch": torch.__version__.split("+")[0], "cases": cases}, f, indent=None, separators=(",", ":"))
    f.write("\n")
print(f"wrote {len(cases)} cases to {os.path.relpath(out)}", file=sys.stderr)
