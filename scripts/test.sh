#!/usr/bin/env bash
# The whole test suite: setup, build, then C++ (CTest) and Python op tests.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/build.sh"
build="${MEGAFOLD_BUILD_DIR:-$root/build}"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)"
