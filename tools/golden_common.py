"""Helpers shared by the golden generators: closed-form inputs and JSON tensors."""
import math

import torch


def signal(shape, seed, scale=1.0):
    """sin(0.7 i + 1.3 seed) * scale + 0.1 cos(0.31 i seed), i over the flattened shape, as f32."""
    n = math.prod(shape)
    v = [math.sin(0.7 * i + 1.3 * seed) * scale + 0.1 * math.cos(0.31 * i * seed) for i in range(n)]
    return torch.tensor(v, dtype=torch.float32).reshape(shape)


def t2j(t):
    """A tensor as {"shape": [...], "data": [...]} (row-major)."""
    return {"shape": list(t.shape), "data": [float(x) for x in t.detach().reshape(-1).tolist()]}
