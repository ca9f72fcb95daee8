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


def greedy_reference(model, ids_in, steps=16, **prefill_kwargs):
    """Prefill logits for `ids_in`, then `steps` greedy decode steps through the KV cache.

    Returns (prefill output, prefill logits [n, vocab], greedy ids, decode logits [steps, vocab])."""
    import numpy as np
    with torch.no_grad():
        first = model(torch.tensor([ids_in]), use_cache=True, **prefill_kwargs)
        prefill = first.logits[0].float().numpy()
        past = first.past_key_values
        nxt = int(prefill[-1].argmax())
        logits, greedy = [], []
        for _ in range(steps):
            greedy.append(nxt)
            out = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
            past = out.past_key_values
            lg = out.logits[0, -1].float().numpy()
            logits.append(lg)
            nxt = int(lg.argmax())
    return first, prefill, greedy, np.stack(logits)
