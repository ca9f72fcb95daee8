#!/usr/bin/env python3
"""Checks regenerated goldens against the committed ones (git HEAD).

Binary goldens (GGUF, model files) must be byte-identical. JSON goldens must have the same
structure and the same integers and strings; floats may differ by |a - b| <= 1e-4 + 1e-4 |b|
(PyTorch's CPU kernels pick different code paths and summation orders on different CPUs and
thread counts, which moves f32 results by a few ulps; the tests' own tolerances are far wider).

    python3 tools/compare_goldens.py FILE...      exit 1 on any difference beyond that
"""
import json
import subprocess
import sys


def committed(path):
    return subprocess.run(["git", "show", f"HEAD:{path}"], check=True, capture_output=True).stdout


def same(a, b, where, errs):
    if isinstance(a, float) or isinstance(b, float):
        if not isinstance(a, (int, float)) or not isinstance(b, (int, float)) or abs(a - b) > 1e-4 + 1e-4 * abs(b):
            errs.append(f"{where}: {a!r} vs {b!r}")
    elif isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            errs.append(f"{where}: keys {sorted(a)} vs {sorted(b)}")
        for k in a.keys() & b.keys():
            same(a[k], b[k], f"{where}.{k}", errs)
    elif isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            errs.append(f"{where}: length {len(a)} vs {len(b)}")
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{where}[{i}]", errs)
    elif a != b:
        errs.append(f"{where}: {a!r} vs {b!r}")


def main():
    bad = 0
    for path in sys.argv[1:]:
        new = open(path, "rb").read()
        try:
            old = committed(path)
        except subprocess.CalledProcessError:
            print(f"{path}: not committed yet", file=sys.stderr)
            bad += 1
            continue
        if path.endswith(".json"):
            errs = []
            same(json.loads(new), json.loads(old), path, errs)
            for e in errs[:10]:
                print(e, file=sys.stderr)
            bad += bool(errs)
        elif new != old:
            print(f"{path}: bytes differ", file=sys.stderr)
            bad += 1
    if bad:
        sys.exit(1)
    print(f"goldens reproduced ({len(sys.argv) - 1} files; JSON floats within 1e-4)")


if __name__ == "__main__":
    main()
