#!/usr/bin/env python3
"""The PyTorch side of the training-step benchmark: same shapes as benches/train_step.rs.

Prints `RESULT <name> <threads> <median ms>` for threads given as argv[1] (e.g. "1,2").
"""
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F


class Mlp(torch.nn.Module):
    def __init__(self, d, h, o):
        super().__init__()
        self.l1, self.l2, self.l3 = torch.nn.Linear(d, h), torch.nn.Linear(h, h), torch.nn.Linear(h, o)

    def forward(self, x):
        return self.l3(F.gelu(self.l2(F.gelu(self.l1(x)))))


class Block(torch.nn.Module):
    def __init__(self, d, heads, f, t):
        super().__init__()
        self.h, self.hd = heads, d // heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.wq = torch.nn.Linear(d, d, bias=False)
        self.wk = torch.nn.Linear(d, d, bias=False)
        self.wv = torch.nn.Linear(d, d, bias=False)
        self.wo = torch.nn.Linear(d, d, bias=False)
        self.w1 = torch.nn.Linear(d, f, bias=False)
        self.w2 = torch.nn.Linear(f, d, bias=False)
        self.register_buffer("mask", torch.triu(torch.ones(t, t, dtype=torch.bool), 1))

    def forward(self, x):
        b, t, d = x.shape
        h = self.ln1(x)
        q = self.wq(h).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.wk(h).view(b, t, self.h, self.hd).transpose(1, 2)
        v = self.wv(h).view(b, t, self.h, self.hd).transpose(1, 2)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        p = torch.softmax(s.masked_fill(self.mask, float("-inf")), dim=-1)
        o = (p @ v).transpose(1, 2).reshape(b, t, d)
        x1 = x + self.wo(o)
        return x1 + self.w2(F.gelu(self.w1(self.ln2(x1))))


def time_step(model, x, y, rounds=15):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


torch.manual_seed(0)
for t in [int(v) for v in (sys.argv[1] if len(sys.argv) > 1 else "1,2").split(",")]:
    torch.set_num_threads(t)
    mlp = Mlp(512, 1024, 64)
    print(f"RESULT mlp {t} {time_step(mlp, torch.randn(256, 512), torch.randn(256, 64)) * 1e3:.3f}")
    blk = Block(256, 4, 1024, 128)
    print(f"RESULT transformer_block {t} {time_step(blk, torch.randn(8, 128, 256), torch.randn(8, 128, 256)) * 1e3:.3f}")
