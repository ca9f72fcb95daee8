#!/usr/bin/env bash
# Builds NeuralAmpModelerCore (the C++ engine inside the NAM plugin) with our benchmark driver
# nam_core_bench.cpp, for benches/amp_vs_nam.py. The source is pinned to one commit; Eigen comes
# from the `cmeel-eigen` wheel on the package registry (header-only).
#
#   NAM_CORE_SRC=/path/to/NeuralAmpModelerCore benches/nam_core/build.sh
#
# NAM Core is not published on a package registry, and this project fetches nothing by
# address or by cloning: the source is a checkout you already have (at the commit below for
# the recorded numbers). Without it the script stops and says so.
#
# Output: benches/nam_core/build/nam_core_bench
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="$HERE/build"
COMMIT=daae2d0b482a5fe876258caf3fdfe177044b6295
mkdir -p "$BUILD"

SRC="${NAM_CORE_SRC:-$BUILD/src}"
if [ ! -f "$SRC/NAM/dsp.h" ]; then
  echo "nam_core/build.sh: no NeuralAmpModelerCore sources at $SRC; set NAM_CORE_SRC to a checkout" >&2
  echo "(commit $COMMIT was measured). benches/amp_vs_nam.py runs without this engine." >&2
  exit 1
fi

EIGEN="$BUILD/eigen/cmeel.prefix/include/eigen3"
if [ ! -f "$EIGEN/Eigen/Core" ]; then
  PIP="${PIP:-$ROOT/tools/.venv/bin/pip}"
  [ -x "$PIP" ] || PIP=pip3
  "$PIP" download --quiet --no-deps --dest "$BUILD/wheel" cmeel-eigen==3.4.1
  rm -rf "$BUILD/eigen" && mkdir -p "$BUILD/eigen"
  python3 -m zipfile -e "$BUILD"/wheel/cmeel_eigen-*.whl "$BUILD/eigen"
fi

# -Ofast and -march=native as the NAM plugin's release builds; fast tanh stays a runtime flag
# (off by default in the driver, so both engines compute the same exact tanh).
echo "compiling NeuralAmpModelerCore @ ${COMMIT:0:10} (about two minutes)..."
cd "$SRC"
${CXX:-g++} -std=c++20 -Ofast -march=native -DNDEBUG -DNAM_ENABLE_A2_FAST \
  -I. -IDependencies/nlohmann -isystem "$EIGEN" \
  NAM/*.cpp NAM/wavenet/*.cpp "$HERE/nam_core_bench.cpp" -o "$BUILD/nam_core_bench"
echo "built $BUILD/nam_core_bench"
