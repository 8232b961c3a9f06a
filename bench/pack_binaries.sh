#!/usr/bin/env bash
# Packs this machine's build (the megafold binary, the op library and the commit they come
# from) into .whl/bin.tar.xz for a device call whose carry is full (the cuEquivariance
# baseline's packages take ~50 of its 64 MiB); bench/device_session.sh unpacks it.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/COMMIT ] || { echo "no build/COMMIT: run scripts/build.sh first" >&2; exit 1; }
mkdir -p .whl
tar cJf .whl/bin.tar.xz build/megafold build/src/libmegafold_ops.so build/COMMIT
echo ".whl/bin.tar.xz: $(du -h .whl/bin.tar.xz | cut -f1), commit $(cat build/COMMIT)"
