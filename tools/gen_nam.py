#!/usr/bin/env python3
"""NAM (Neural Amp Modeler) goldens from the `neural-amp-modeler` package itself.

For each of the classic WaveNet presets (standard, lite, feather, nano; the shapes of
neural-amp-modeler's former `Architecture` presets) and the LSTM presets, builds the model
with the package (seeded random weights), exports it with the package's own `.nam` writer,
loads the file back with the package's loader, and runs it on a fixed test signal
(`pad_start`, i.e. from silence, as the plugin starts). Writes:

* fucina-models/tests/goldens/nam/<name>.nam        the exported models
* fucina-models/tests/goldens/nam/<name>.v05.nam    the same WaveNet in the 0.5 schema
  (`head_size`/`head_bias`/`kernel_size`/`gated` keys), as most published captures are
* fucina-models/tests/goldens/nam/signals.json      the input and every model's output,
  including `trained.nam`: the model fucina's `amp-train` wrote (committed, an input here),
  run by the package's loader, so the test proves fucina's export runs the same in NAM

The weights are drawn at a scale that drives the tanh layers into their nonlinear range.
"""
import json
import os
import tempfile

import numpy as np
import torch

from nam.models._from_nam import init_from_nam
from nam.models.recurrent import LSTM
from nam.models.wavenet import WaveNet

here = os.path.dirname(os.path.abspath(__file__))
out_dir = os.path.join(here, "..", "fucina-models", "tests", "goldens", "nam")
os.makedirs(out_dir, exist_ok=True)

D1 = [1, 2, 4, 8, 16, 32, 64]
D2 = [128, 256, 512, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
D_STD = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def wavenet_preset(c1, c2, d1, d2):
    """Two layer arrays in the classic layout: tanh, no gating, 1x1 heads."""
    return {
        "layers_configs": [
            {"input_size": 1, "condition_size": 1, "channels": c1, "kernel_size": 3, "dilations": d1,
             "activation": "Tanh", "head": {"out_channels": c2, "kernel_size": 1, "bias": False}},
            {"input_size": c1, "condition_size": 1, "channels": c2, "kernel_size": 3, "dilations": d2,
             "activation": "Tanh", "head": {"out_channels": 1, "kernel_size": 1, "bias": True}},
        ],
        "head": None,
        "head_scale": 0.02,
    }


WAVENETS = {
    "standard": wavenet_preset(16, 8, D_STD, D_STD),
    "lite": wavenet_preset(12, 6, D1, D2),
    "feather": wavenet_preset(8, 4, D1, D2),
    "nano": wavenet_preset(4, 2, D1, D2),
}
LSTMS = {
    "lstm-standard": {"num_layers": 1, "hidden_size": 24},
    "lstm-lite": {"num_layers": 2, "hidden_size": 8},
}


def test_signal(n=4000, rate=48_000):
    """A chirp, a burst of noise, an impulse and silence: every path through the model."""
    rng = np.random.default_rng(20261203)
    t = np.arange(n) / rate
    chirp = 0.5 * np.sin(2 * np.pi * (80 * t + 4000 * t * t))
    x = chirp.copy()
    x[1500:2200] += 0.3 * rng.standard_normal(700)
    x[2600] += 0.9
    x[3200:] *= 0.1
    return x.astype(np.float32)


def to_v05(d):
    """The 0.5 schema of a classic WaveNet export (what NAM 0.5..0.12 wrote)."""
    old = json.loads(json.dumps(d))
    old["version"] = "0.5.4"
    layers = []
    for la in d["config"]["layers"]:
        ks = set(la["kernel_sizes"])
        assert len(ks) == 1
        layers.append({
            "input_size": la["input_size"], "condition_size": la["condition_size"],
            "head_size": la["head"]["out_channels"], "channels": la["channels"], "kernel_size": ks.pop(),
            "dilations": la["dilations"], "activation": "Tanh", "gated": False, "head_bias": la["head"]["bias"],
        })
    old["config"] = {"layers": layers, "head": None, "head_scale": d["config"]["head_scale"]}
    return old


def main():
    torch.manual_seed(0)
    x = test_signal()
    outputs = {}
    with tempfile.TemporaryDirectory() as tmp:
        models = {}
        for name, cfg in WAVENETS.items():
            m = WaveNet.init_from_config({**cfg, "sample_rate": 48_000.0})
            with torch.no_grad():
                for p in m.parameters():
                    p.normal_(0.0, 0.35)
            models[name] = m
        for name, cfg in LSTMS.items():
            m = LSTM(input_size=1, sample_rate=48_000.0, **cfg)
            with torch.no_grad():
                for p in m.parameters():
                    p.normal_(0.0, 0.3)
            models[name] = m
        for name, m in models.items():
            m.eval()
            m.export(tmp, basename=name)
            with open(os.path.join(tmp, f"{name}.nam")) as f:
                d = json.load(f)
            # Fixed metadata so reruns give identical files.
            d["metadata"] = {"date": {"year": 2026, "month": 12, "day": 3, "hour": 0, "minute": 0, "second": 0},
                             "name": f"fucina golden {name} (random weights)"}
            with open(os.path.join(out_dir, f"{name}.nam"), "w") as f:
                json.dump(d, f)
            if name in WAVENETS:
                with open(os.path.join(out_dir, f"{name}.v05.nam"), "w") as f:
                    json.dump(to_v05(d), f)
            # The reference: the package's own loader on the exported file.
            loaded = init_from_nam(d).eval()
            with torch.no_grad():
                y = loaded(torch.from_numpy(x), pad_start=True)
            outputs[name] = y.numpy().astype(np.float32).tolist()
    trained = os.path.join(out_dir, "trained.nam")
    if os.path.exists(trained):
        with open(trained) as f:
            loaded = init_from_nam(json.load(f)).eval()
        with torch.no_grad():
            outputs["trained"] = loaded(torch.from_numpy(x), pad_start=True).numpy().astype(np.float32).tolist()
    with open(os.path.join(out_dir, "signals.json"), "w") as f:
        json.dump({"generator": "tools/gen_nam.py", "sample_rate": 48000, "input": x.tolist(), "outputs": outputs}, f)
        f.write("\n")
    print(f"wrote {len(outputs)} models and signals.json to {out_dir}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
