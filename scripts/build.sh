#!/usr/bin/env bash
# Setup (idempotent), then configure and build into ./build with ccache.
# CUDA is used when nvcc and a CUDA-enabled torch are both found (MEGAFOLD_CUDA=OFF forces CPU).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/setup.sh"
CACHE="${MEGAFOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/megafold}"
py="$(cat "$CACHE/python")"
export CCACHE_DIR="${CCACHE_DIR:-$CACHE/ccache}"
build="${MEGAFOLD_BUILD_DIR:-$root/build}"
jobs="${MEGAFOLD_JOBS:-$(nproc)}"
cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE="${MEGAFOLD_BUILD_TYPE:-Release}" \
  -DMEGAFOLD_PYTHON="$py" \
  -DMEGAFOLD_CUDA="${MEGAFOLD_CUDA:-AUTO}" \
  ${MEGAFOLD_DEPS_PREFIX:+-DMEGAFOLD_DEPS_PREFIX="$MEGAFOLD_DEPS_PREFIX"} >/dev/null
cmake --build "$build" -j "$jobs"
