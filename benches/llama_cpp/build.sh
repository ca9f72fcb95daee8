#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, llama-batched-bench, llama-completion and llama-tokenize, and
# libllama.so (for benches/kv_q8_0_vs_llama_cpp.py, through the sdist's own ctypes bindings) (CPU
# only, -march=native) from the llama.cpp sources vendored in the pinned llama-cpp-python sdist
# (the same one tools/gen_kquant_goldens.py uses), with cmake and ninja from PyPI.
# Output: benches/llama_cpp/build/bin/. Needs the package registry once (all cached after).
#
# The sdist is fetched by name and version with `pip download` and its sha256 checked. On a
# CPU that advertises AMX, -march=native would emit AMX tile code, and on VMs that advertise
# AMX without enabling it `ldtilecfg` faults: AMX is then turned off explicitly.
set -euo pipefail
cd "$(dirname "$0")"
SDIST=llama_cpp_python-0.3.36
PIN=llama-cpp-python==0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
cache=../../tools/.cache
mkdir -p "$cache"
if [ ! -x .venv/bin/cmake ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q cmake==3.31.6 ninja==1.11.1.4
fi
if [ ! -f "$cache/$SDIST.tar.gz" ]; then
  # The sdist only (its build backend, needed for its metadata, may come as wheels).
  .venv/bin/pip download -q "$PIN" --no-deps --no-binary llama-cpp-python -d "$cache"
fi
echo "$SHA256  $cache/$SDIST.tar.gz" | sha256sum -c --quiet
if [ ! -d src/$SDIST ]; then
  mkdir -p src
  tar -xzf "$cache/$SDIST.tar.gz" -C src "$SDIST/vendor/llama.cpp"
fi
export PATH="$PWD/.venv/bin:$PATH"
flags=""
if grep -qw amx_tile /proc/cpuinfo 2>/dev/null; then
  flags="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  echo "build.sh: the CPU advertises AMX; building without it ($flags)"
fi
cmake -S src/$SDIST/vendor/llama.cpp -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENMP=ON \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=ON -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=ON >/dev/null
cmake --build build --target llama llama-bench llama-batched-bench llama-completion llama-tokenize -j "$(nproc)" >/dev/null
echo "built: $PWD/build/bin/llama-bench"
