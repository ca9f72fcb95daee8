#!/usr/bin/env bash
# Builds llama.cpp's llama-bench, llama-completion and llama-tokenize (CPU only, -march=native) from the llama.cpp
# sources vendored in the pinned llama-cpp-python sdist (the same one tools/gen_kquant_goldens.py
# uses), with cmake and ninja from PyPI. Output: benches/llama_cpp/build/bin/llama-bench.
# Needs network access to PyPI once (the sdist and the build tools are cached).
set -euo pipefail
cd "$(dirname "$0")"
SDIST=llama_cpp_python-0.3.36
URL="https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/$SDIST.tar.gz"
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
cache=../../tools/.cache
mkdir -p "$cache"
if [ ! -f "$cache/$SDIST.tar.gz" ]; then
  curl -fsSL "$URL" -o "$cache/$SDIST.tar.gz.part"
  mv "$cache/$SDIST.tar.gz.part" "$cache/$SDIST.tar.gz"
fi
echo "$SHA256  $cache/$SDIST.tar.gz" | sha256sum -c --quiet
if [ ! -d src/$SDIST ]; then
  mkdir -p src
  tar -xzf "$cache/$SDIST.tar.gz" -C src "$SDIST/vendor/llama.cpp"
fi
if [ ! -x .venv/bin/cmake ]; then
  python3 -m venv .venv
  .venv/bin/pip install -q cmake==3.31.6 ninja==1.11.1.4
fi
export PATH="$PWD/.venv/bin:$PATH"
cmake -S src/$SDIST/vendor/llama.cpp -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENMP=ON \
  -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
  -DLLAMA_BUILD_TOOLS=ON -DBUILD_SHARED_LIBS=OFF >/dev/null
cmake --build build --target llama-bench llama-completion llama-tokenize -j "$(nproc)" >/dev/null
echo "built: $PWD/build/bin/llama-bench"
