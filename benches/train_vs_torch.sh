#!/usr/bin/env bash
# Training step, fucina vs PyTorch CPU: same shapes, same thread counts, run back to back.
# Needs the tools venv (tools/regen or: python3 -m venv tools/.venv && tools/.venv/bin/pip install -r tools/requirements.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-1,2}
py=${PYTHON:-tools/.venv/bin/python}
f=$(FUCINA_BENCH_THREADS=$threads cargo bench -q -p fucina-benches --bench train_step -- --warm-up-time 1 --measurement-time 3 2>/dev/null | grep '^RESULT')
t=$("$py" benches/torch_train_step.py "$threads" | grep '^RESULT')
echo "step                threads   fucina ms   torch ms   ratio (torch/fucina, >1: fucina faster)"
while read -r _ name th ms; do
  tm=$(echo "$t" | awk -v n="$name" -v th="$th" '$2==n && $3==th {print $4}')
  awk -v n="$name" -v th="$th" -v a="$ms" -v b="$tm" 'BEGIN {printf "%-20s %7s %11.2f %10.2f %8.2f\n", n, th, a, b, b / a}'
done <<< "$f"
