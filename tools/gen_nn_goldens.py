#!/usr/bin/env python3
"""Layer goldens from PyTorch's torch.nn modules for fucina's `nn` layers.

Each case sets a torch module's parameters to closed-form values, runs it on a
closed-form input, and back-propagates a fixed upstream gradient `g`; it stores the
output and the gradients of the input and of every parameter. Writes
fucina/tests/goldens/nn.json; `tools/regen` runs this and checks the committed file.
"""
import json
import os
import sys

import torch

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)

from golden_common import signal, t2j  # noqa: E402

cases = []


def run(name, module, params, x, **extra):
    with torch.no_grad():
        for k, v in params.items():
            getattr(module, k).copy_(v)
    x = x.clone().requires_grad_(x.dtype.is_floating_point)
    y = module(x)
    g = signal(list(y.shape), 99, 1.0)
    (y * g).sum().backward()
    grads = {k: t2j(getattr(module, k).grad) for k in params}
    if x.requires_grad:
        grads["x"] = t2j(x.grad)
    cases.append({
        "name": name,
        "x": t2j(x.float()),
        "params": {k: t2j(v) for k, v in params.items()},
        "g": t2j(g),
        "y": t2j(y),
        "grads": grads,
        "extra": extra,
    })


run("linear", torch.nn.Linear(5, 4), {"weight": signal([4, 5], 1), "bias": signal([4], 2)}, signal([2, 3, 5], 3))
run("linear_no_bias", torch.nn.Linear(5, 4, bias=False), {"weight": signal([4, 5], 4)}, signal([3, 5], 5))
run("layer_norm", torch.nn.LayerNorm(6, eps=1e-5), {"weight": signal([6], 6), "bias": signal([6], 7)},
    signal([2, 3, 6], 8, 2.0), eps=1e-5)
run("rms_norm", torch.nn.RMSNorm(6, eps=1e-6), {"weight": signal([6], 9)}, signal([4, 6], 10, 2.0), eps=1e-6)
ids = torch.tensor([[1, 7, 3], [3, 0, 9]])
run("embedding", torch.nn.Embedding(10, 4), {"weight": signal([10, 4], 11)}, ids)



def mha(name, window):
    """nn.MultiheadAttention (no bias, 2 heads of 4) on one sequence of 6, causal or sliding."""
    E, H, S = 8, 2, 6
    m = torch.nn.MultiheadAttention(E, H, bias=False, batch_first=True)
    with torch.no_grad():
        m.in_proj_weight.copy_(signal([3 * E, E], 20, 0.5))
        m.out_proj.weight.copy_(signal([E, E], 21, 0.5))
    i = torch.arange(S)[:, None]
    j = torch.arange(S)[None, :]
    blocked = j > i
    if window is not None:
        blocked = blocked | (j <= i - window)
    x = signal([1, S, E], 22).requires_grad_(True)
    y, _ = m(x, x, x, attn_mask=blocked, need_weights=False)
    g = signal(list(y.shape), 99, 1.0)
    (y * g).sum().backward()
    cases.append({
        "name": name,
        "x": t2j(x[0]),
        "params": {"in_proj_weight": t2j(m.in_proj_weight), "out_proj_weight": t2j(m.out_proj.weight)},
        "g": t2j(g[0]),
        "y": t2j(y[0]),
        "grads": {"in_proj_weight": t2j(m.in_proj_weight.grad), "out_proj_weight": t2j(m.out_proj.weight.grad),
                  "x": t2j(x.grad[0])},
        "extra": {"heads": H, "window": window},
    })


mha("mha_causal", None)
mha("mha_sliding", 3)



def batch_norm():
    """BatchNorm2d: a training step (output, gradients, running statistics after), then eval."""
    m = torch.nn.BatchNorm2d(3, eps=1e-5, momentum=0.1)
    with torch.no_grad():
        m.weight.copy_(signal([3], 30))
        m.bias.copy_(signal([3], 31))
    x = signal([2, 3, 4, 5], 32, 2.0).requires_grad_(True)
    y = m(x)
    g = signal(list(y.shape), 99, 1.0)
    (y * g).sum().backward()
    m.eval()
    xe = signal([1, 3, 2, 2], 33, 2.0)
    with torch.no_grad():
        ye = m(xe)
    cases.append({
        "name": "batch_norm2d",
        "x": t2j(x),
        "params": {"weight": t2j(m.weight), "bias": t2j(m.bias)},
        "g": t2j(g),
        "y": t2j(y),
        "grads": {"weight": t2j(m.weight.grad), "bias": t2j(m.bias.grad), "x": t2j(x.grad)},
        "extra": {"running_mean": t2j(m.running_mean), "running_var": t2j(m.running_var),
                  "eval_x": t2j(xe), "eval_y": t2j(ye)},
    })


batch_norm()
conv = torch.nn.Conv2d(4, 6, (3, 2), stride=(2, 1), padding=(1, 1), groups=2)
run("conv2d", conv, {"weight": signal([6, 2, 3, 2], 34, 0.5), "bias": signal([6], 35)}, signal([2, 4, 5, 4], 36))



def lstm():
    """nn.LSTM(3, 4, num_layers=2, batch_first): the top layer's outputs over 5 steps from zero
    states, and the gradients of the input and of every weight and bias."""
    m = torch.nn.LSTM(3, 4, num_layers=2, batch_first=True)
    params = {}
    with torch.no_grad():
        for i, (k, v) in enumerate(m.named_parameters()):
            v.copy_(signal(list(v.shape), 40 + i, 0.6))
            params[k] = v
    x = signal([2, 5, 3], 48, 1.5).requires_grad_(True)
    y, _ = m(x)
    g = signal(list(y.shape), 99, 1.0)
    (y * g).sum().backward()
    grads = {k: t2j(v.grad) for k, v in m.named_parameters()}
    grads["x"] = t2j(x.grad)
    cases.append({
        "name": "lstm",
        "x": t2j(x),
        "params": {k: t2j(v) for k, v in params.items()},
        "g": t2j(g),
        "y": t2j(y),
        "grads": grads,
        "extra": {},
    })


lstm()

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fucina", "tests", "goldens", "nn.json")
with open(out, "w") as f:
    json.dump({"generator": "tools/gen_nn_goldens.py", "torch": torch.__version__.split("+")[0], "cases": cases},
              f, indent=None, separators=(",", ":"))
    f.write("\n")
print(f"wrote {len(cases)} cases to {os.path.relpath(out)}", file=sys.stderr)
