#!/usr/bin/env python3
"""Gradient and optimizer goldens from PyTorch for fucina's training parity tests.

Small graphs (MLP + cross-entropy, attention, norms + GELU + MSE, dilated causal
conv + BCE-with-logits, embedding + cross-entropy with ignore_index) give the
gradients of every input; SGD (plain, momentum, Nesterov + weight decay) and
AdamW give the parameters after each of 5 steps under a fixed gradient sequence.
Inputs are closed-form (sines of the index). Writes fucina/tests/goldens/train.json.
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


graphs = []


def graph(name, inputs, loss_fn, **extra):
    leaves = {k: v.clone().requires_grad_(True) for k, v in inputs.items()}
    loss = loss_fn(**leaves)
    loss.backward()
    graphs.append({
        "name": name,
        "inputs": {k: t2j(v) for k, v in inputs.items()},
        "loss": float(loss.detach()),
        "grads": {k: t2j(v.grad) for k, v in leaves.items()},
        **extra,
    })


targets = [2, 0, 1, 2]
graph(
    "mlp_cross_entropy",
    {"x": signal([4, 3], 1), "w1": signal([5, 3], 2, 0.7), "b1": signal([5], 3, 0.1), "w2": signal([3, 5], 4, 0.7), "b2": signal([3], 5, 0.1)},
    lambda x, w1, b1, w2, b2: F.cross_entropy(torch.tanh(x @ w1.T + b1) @ w2.T + b2, torch.tensor(targets)),
    targets=targets,
)
graph(
    "attention",
    {"q": signal([2, 3, 4], 6), "k": signal([2, 5, 4], 7), "v": signal([2, 5, 4], 8)},
    lambda q, k, v: (torch.softmax(q @ k.transpose(1, 2) / 2.0, dim=2) @ v * signal([2, 3, 4], 9)).sum(),
)
graph(
    "norms_gelu_mse",
    {"x": signal([3, 6], 10, 2.0), "g": signal([6], 11), "b": signal([6], 12), "w": signal([6], 13)},
    lambda x, g, b, w: F.mse_loss(F.gelu(F.rms_norm(F.layer_norm(x, (6,), g, b, 1e-5), (6,), w, 1e-6)), signal([3, 6], 14)),
)
graph(
    "conv_bce",
    {"x": signal([2, 3, 12], 15), "w": signal([4, 3, 3], 16, 0.5), "b": signal([4], 17, 0.5)},
    lambda x, w, b: F.binary_cross_entropy_with_logits(
        torch.tanh(F.conv1d(F.pad(x, (4, 0)), w, b, dilation=2)) * 3.0, (signal([2, 4, 12], 18) > 0).float()
    ),
)
ids = [[3, 0, 7], [7, 1, 3]]
ce_targets = [[1, 4, 4], [4, 0, 2]]  # 4 is ignored
graph(
    "embedding_ce_ignore",
    {"table": signal([8, 5], 19)},
    lambda table: F.cross_entropy(F.embedding(torch.tensor(ids), table).reshape(6, 5), torch.tensor(ce_targets).reshape(6), ignore_index=4),
    ids=ids,
    targets=ce_targets,
    ignore_index=4,
)

optimizers = []
p0 = signal([4, 3], 20)
grads = [signal([4, 3], 21 + s) for s in range(5)]
configs = [
    ("sgd", lambda p: torch.optim.SGD([p], lr=0.1), {"lr": 0.1, "momentum": 0.0, "nesterov": False, "weight_decay": 0.0}),
    ("sgd_momentum", lambda p: torch.optim.SGD([p], lr=0.05, momentum=0.9), {"lr": 0.05, "momentum": 0.9, "nesterov": False, "weight_decay": 0.0}),
    (
        "sgd_nesterov_wd",
        lambda p: torch.optim.SGD([p], lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
        {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
    ),
    ("adamw", lambda p: torch.optim.AdamW([p], lr=0.01, weight_decay=0.1), {"lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.1}),
    (
        "adamw_betas",
        lambda p: torch.optim.AdamW([p], lr=0.003, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.0),
        {"lr": 0.003, "betas": [0.8, 0.95], "eps": 1e-6, "weight_decay": 0.0},
    ),
]
for name, make, hp in configs:
    p = p0.clone().requires_grad_(True)
    opt = make(p)
    trajectory = []
    for g in grads:
        opt.zero_grad()
        p.grad = g.clone()
        opt.step()
        trajectory.append(t2j(p))
    optimizers.append({"name": name, "hyper": hp, "p0": t2j(p0), "grads": [t2j(g) for g in grads], "after_each_step": trajectory})

# ---- Muon and APOLLO: reference implementations written from the papers ----

def newton_schulz5(G, steps=5, eps=1e-7):
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G / (G.norm() + eps)
    if G.size(0) > G.size(1):
        X = X.T
    for _ in range(steps):
        A = X @ X.T
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(0) > G.size(1):
        X = X.T
    return X


def adamw_step(p, g, st, step, lr, betas=(0.9, 0.999), eps=1e-8, wd=0.0):
    b1, b2 = betas
    m = st.setdefault("m", torch.zeros_like(p))
    v = st.setdefault("v", torch.zeros_like(p))
    p.mul_(1 - lr * wd)
    m.lerp_(g, 1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    denom = (v.sqrt() / math.sqrt(1 - b2 ** step)).add_(eps)
    p.addcdiv_(m, denom, value=-lr / (1 - b1 ** step))


def muon_run(params, grads, lr=0.02, momentum=0.95, adamw_lr=0.01):
    state = {k: {} for k in params}
    out = []
    for step, gs in enumerate(grads, start=1):
        for k, p in params.items():
            g = gs[k]
            if p.dim() == 2:
                buf = state[k].setdefault("buf", torch.zeros_like(p))
                buf.mul_(momentum).add_(g)
                upd = g.add(buf, alpha=momentum)
                o = newton_schulz5(upd)
                p.add_(o, alpha=-lr * max(1, p.size(0) / p.size(1)) ** 0.5)
            else:
                adamw_step(p, g, state[k], step, adamw_lr)
        out.append({k: t2j(p) for k, p in params.items()})
    return out


MASK = 0xFFFFFFFF


def philox_block(seed, stream, index):
    k = [seed & MASK, (seed >> 32) & MASK]
    c = [index & MASK, (index >> 32) & MASK, stream & MASK, (stream >> 32) & MASK]
    for _ in range(10):
        p0 = 0xD2511F53 * c[0]
        p1 = 0xCD9E8D57 * c[2]
        c = [((p1 >> 32) ^ c[1] ^ k[0]) & MASK, p1 & MASK, ((p0 >> 32) ^ c[3] ^ k[1]) & MASK, p0 & MASK]
        k = [(k[0] + 0x9E3779B9) & MASK, (k[1] + 0xBB67AE85) & MASK]
    return c


def box_muller(a, b):
    u1 = ((a >> 8) + 1.0) / 16777216.0
    u2 = ((b >> 8) + 1.0) / 16777216.0
    r = math.sqrt(-2.0 * math.log(u1))
    t = 2.0 * math.pi * u2
    return r * math.cos(t), r * math.sin(t)


def fnv1a(name):
    h = 0xCBF29CE484222325
    for ch in name.encode():
        h = ((h ^ ch) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def apollo_projection(seed, name, epoch, rank, m):
    s = seed ^ fnv1a(name)
    std = torch.tensor(math.sqrt(1.0 / rank), dtype=torch.float32)
    vals = []
    for i in range(rank * m):
        b = philox_block(s, epoch, i // 2)
        z = box_muller(b[0], b[1])[i % 2]
        vals.append(float(std * torch.tensor(z, dtype=torch.float32)))
    return torch.tensor(vals, dtype=torch.float32).reshape(rank, m)


def apollo_run(params, grads, lr=0.01, rank=2, gap=2, seed=5, betas=(0.9, 0.999), eps=1e-8):
    state = {k: {} for k in params}
    out = []
    b1, b2 = betas
    for step, gs in enumerate(grads, start=1):
        for k, p in params.items():
            g = gs[k]
            if p.dim() != 2:
                adamw_step(p, g, state[k], step, lr)
                continue
            P = apollo_projection(seed, k, (step - 1) // gap, min(rank, p.size(0)), p.size(0))
            R = P @ g
            m = state[k].setdefault("m", torch.zeros_like(R))
            v = state[k].setdefault("v", torch.zeros_like(R))
            m.mul_(b1).add_(R, alpha=1 - b1)
            v.mul_(b2).addcmul_(R, R, value=1 - b2)
            upd = (m / (1 - b1 ** step)) / ((v / (1 - b2 ** step)).sqrt() + eps)
            s_col = upd.norm(dim=0) / (R.norm(dim=0) + 1e-8)
            p.sub_(lr * (g * s_col))
        out.append({k: t2j(p) for k, p in params.items()})
    return out


ref_params = {"w": signal([4, 6], 40), "wt": signal([6, 4], 41), "b": signal([6], 42)}
ref_grads = [{k: signal(list(v.shape), 43 + 3 * s + i) for i, (k, v) in enumerate(ref_params.items())} for s in range(3)]
reference = []
for name, run in [("muon", muon_run), ("apollo", apollo_run)]:
    params = {k: v.clone() for k, v in ref_params.items()}
    traj = run(params, ref_grads)
    reference.append({
        "name": name,
        "p0": {k: t2j(v) for k, v in ref_params.items()},
        "grads": [{k: t2j(v) for k, v in gs.items()} for gs in ref_grads],
        "after_each_step": traj,
    })
proj_check = {"seed": 5, "name": "w", "epoch": 1, "rank": 2, "m": 4, "p": t2j(apollo_projection(5, "w", 1, 2, 4))}

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fucina", "tests", "goldens", "train.json")
with open(out, "w") as f:
    json.dump(
        {
            "generator": "tools/gen_train_goldens.py",
            "torch": torch.__version__.split("+")[0],
            "graphs": graphs,
            "optimizers": optimizers,
            "reference_optimizers": reference,
            "apollo_projection": proj_check,
        },
        f,
        separators=(",", ":"),
    )
    f.write("\n")
print(f"wrote {len(graphs)} graphs and {len(optimizers)} optimizer runs to {os.path.relpath(out)}", file=sys.stderr)
