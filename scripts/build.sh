#!/usr/bin/env bash
# Setup (idempotent), then configure and build into ./build with ccache.
# Arguments name the targets to build (default: all, tests included).
# CUDA is used when nvcc and a CUDA-enabled torch are both found (MEGAFOLD_CUDA=OFF forces CPU).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/setup.sh"
CACHE="${MEGAFOLD_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/megafold}"
py="$(cat "$CACHE/python")"
export CCACHE_DIR="${CCACHE_DIR:-$CACHE/ccache}"
# Paths relative to the clone, so every clone (and CI's) hits the same cache entries.
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}"
build="${MEGAFOLD_BUILD_DIR:-$root/build}"
jobs="${MEGAFOLD_JOBS:-$(nproc)}"
cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE="${MEGAFOLD_BUILD_TYPE:-Release}" \
  -DMEGAFOLD_PYTHON="$py" \
  -DMEGAFOLD_CUDA="${MEGAFOLD_CUDA:-AUTO}" \
  ${MEGAFOLD_DEPS_PREFIX:+-DMEGAFOLD_DEPS_PREFIX="$MEGAFOLD_DEPS_PREFIX"} >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
# The commit the binaries come from (benchmarks record it; "-dirty": tracked files differed).
if rev="$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null)"; then
  [ -z "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ] || rev="$rev-dirty"
  echo "$rev" > "$build/COMMIT"
fi
