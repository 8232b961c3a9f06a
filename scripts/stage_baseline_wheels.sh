#!/usr/bin/env bash
# For the lent GPU host, which has torch but no package access: the Python packages of the
# NVIDIA cuEquivariance baseline (bench/triangle_attention.py, bench/pairformer_block.py's
# compile-cueq) as one tarball of a site-packages tree, .whl/site.tar.xz (git-ignored), which
# bench/device_session.sh unpacks onto PYTHONPATH. The wheels hold Triton autotuning caches for
# every GPU generation; only the H100/H200 ones (compute capability 9.0) are kept. Their runtime
# dependencies come too (scipy: cuequivariance_ops_torch imports scipy.stats at import time).
# About 50 MB, which leaves no room in a call (64 MiB with the working tree) for the binaries
# unpacked: pack them beside it with bench/pack_binaries.sh and carry .whl alone
# (bench/device_session.sh unpacks both).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
py="$(cat "${HOME}/.cache/megafold/python" 2>/dev/null || command -v python3)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$py" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$work/wheels" \
  "cuequivariance-ops-torch-cu13==0.13.0" "cuequivariance-ops-cu13==0.13.0" platformdirs tqdm nvidia-ml-py scipy
mkdir -p "$work/site"
for w in "$work"/wheels/*.whl; do "$py" -m zipfile -e "$w" "$work/site"; done
find "$work/site/cuequivariance_ops/triton/cache" -name "*.json" ! -name "*.9.0.json" -delete
mkdir -p "$root/.whl"
tar -C "$work/site" -cf - . | xz -T0 -9e > "$root/.whl/site.tar.xz"
du -h "$root/.whl/site.tar.xz"
