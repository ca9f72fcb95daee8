#!/usr/bin/env bash
# Decode a DeepSeek-style MoE whose file is larger than the memory the process may use.
#
#   sudo benches/deepseek_out_of_ram.sh [limit-MiB] [expert-cache-MiB]     (defaults: 2048, 768)
#
# 1. Writes (once) a synthetic MoE of about 6 GB in Q8_0: 20 layers, 64 experts of 1536 per
#    layer, 4 routed per token (`synth --preset deepseek-moe-6g`), unless $MODEL points at one.
# 2. Drops the page cache, so nothing of the file is resident to start with.
# 3. Creates a memory cgroup limited to [limit-MiB] (cgroup v2 `memory.max`, or v1
#    `memory.limit_in_bytes`): the page cache of the mapped file counts against it.
# 4. Runs `lm-bench` inside it (prefill 16, decode 32) with the routed experts streamed from
#    the mapped file under --expert-cache-mb, and prints the speed and the cgroup's peak memory.
# Needs root (cgroups, drop_caches).
set -euo pipefail
cd "$(dirname "$0")/.."
limit_mb=${1:-2048}
cache_mb=${2:-768}
model=${MODEL:-target/bench-models/deepseek-moe-6g-q8_0.gguf}
cargo build -q --release -p fucina-models --bin synth --bin lm-bench
mkdir -p "$(dirname "$model")"
if [ ! -f "$model" ]; then
  ./target/release/synth "$model" --preset deepseek-moe-6g --format Q8_0
fi
size_mb=$(( $(stat -L -c %s "$model") / 1048576 ))
echo "model: $model, ${size_mb} MiB; memory limit ${limit_mb} MiB; expert cache ${cache_mb} MiB"
sync
echo 3 > /proc/sys/vm/drop_caches
name=fucina-ooram-$$
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  cg=/sys/fs/cgroup/$name
  mkdir "$cg"
  echo $((limit_mb * 1048576)) > "$cg/memory.max"
  echo 0 > "$cg/memory.swap.max" 2>/dev/null || true
  peak() { cat "$cg/memory.peak" 2>/dev/null || echo "?"; }
else
  cg=/sys/fs/cgroup/memory/$name
  mkdir "$cg"
  echo $((limit_mb * 1048576)) > "$cg/memory.limit_in_bytes"
  peak() { cat "$cg/memory.max_usage_in_bytes"; }
fi
trap 'rmdir "$cg" 2>/dev/null || true' EXIT
sh -c "echo \$\$ > $cg/cgroup.procs; exec ./target/release/lm-bench '$model' --pp 16 --tg 32 -r 2 --expert-cache-mb $cache_mb" \
  2>&1 | grep -v '^RESULT'
echo "peak memory of the cgroup: $(( $(peak) / 1048576 )) MiB (limit ${limit_mb} MiB, file ${size_mb} MiB)"
