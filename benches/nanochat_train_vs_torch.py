#!/usr/bin/env python3
"""nanochat training throughput, fucina vs PyTorch CPU: the same model (transformers'
NanoChatForCausalLM, as `nanochat`'s defaults: vocab 2048, width 128, 4 blocks of 4 heads,
MLP 512, soft-cap 15), the same batch (16 sequences of 128 random tokens), the same thread
count, and the same optimizers (Muon on the block matrices, AdamW on the embedding and the
head). A step is forward, loss, backward and the optimizer update. Rounds alternate between
the two; each round reports the median of its timed steps, in tokens per second.

    tools/.venv/bin/python benches/nanochat_train_vs_torch.py --threads 2 --rounds 5
"""
import argparse
import os
import statistics
import subprocess
import time

import torch
from transformers import NanoChatConfig, NanoChatForCausalLM

sys_path = os.path.dirname(os.path.abspath(__file__))
import sys  # noqa: E402

sys.path.insert(0, sys_path)
from bench_common import cpu_model  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


def torch_round(threads, steps, batch=16, seq=128, vocab=2048, hidden=128):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = NanoChatConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=4 * hidden,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=2048,
        final_logit_softcapping=15.0,
        rms_norm_eps=1e-6,
    )
    cfg._attn_implementation = "sdpa"
    model = NanoChatForCausalLM(cfg).float().train()
    mats = [p for n, p in model.named_parameters() if "layers" in n]
    other = [p for n, p in model.named_parameters() if "layers" not in n]
    muon = torch.optim.Muon(mats, lr=0.02, momentum=0.95, nesterov=True, weight_decay=0.0)
    adam = torch.optim.AdamW(other, lr=0.004, betas=(0.8, 0.95), eps=1e-10, weight_decay=0.0)
    rates = []
    for i in range(steps + 2):
        x = torch.randint(0, vocab, (batch, seq))
        y = torch.randint(0, vocab, (batch, seq))
        t = time.perf_counter()
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1))
        muon.zero_grad()
        adam.zero_grad()
        loss.backward()
        muon.step()
        adam.step()
        if i >= 2:
            rates.append(batch * seq / (time.perf_counter() - t))
    return statistics.median(rates)


def fucina_round(threads, steps):
    out = subprocess.run(
        [os.path.join(ROOT, "target", "release", "nanochat"), "bench-step", "--threads", str(threads), "--steps", str(steps)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(next(l for l in out.splitlines() if l.startswith("RESULT")).split()[2])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "fucina-models", "--bin", "nanochat"], check=True, cwd=ROOT)
    print(f"CPU: {cpu_model()}; torch {torch.__version__}")
    for th in [int(t) for t in a.threads.split(",")]:
        f, p = [], []
        for r in range(a.rounds):
            f.append(fucina_round(th, a.steps))
            p.append(torch_round(th, a.steps))
            print(f"threads {th} round {r + 1}: fucina {f[-1]:.0f} tok/s, torch {p[-1]:.0f} tok/s", flush=True)
        fm, pm = statistics.median(f), statistics.median(p)
        print(
            f"threads {th}: fucina {fm:.0f} tok/s ({min(f):.0f}-{max(f):.0f}), torch {pm:.0f} tok/s "
            f"({min(p):.0f}-{max(p):.0f}), fucina / torch {fm / pm:.2f}x"
        )


if __name__ == "__main__":
    main()
