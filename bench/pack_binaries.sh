#!/usr/bin/env bash
# Packs this machine's build (the megafold binary, the op library and the commit they come
# from) into .whl/bin.tar.xz for a device call whose carry is full (the cuEquivariance
# baseline's packages take ~50 of its 64 MiB); bench/device_session.sh unpacks it.
# --base packs only the op library, as the base side of an A/B (.whl/base_ops.so.xz, ~4 MB;
# the device_session.sh stage `ab` times it against the build of the call): build the base
# commit, pack it with --base, build the change, pack it as usual.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/COMMIT ] || { echo "no build/COMMIT: run scripts/build.sh first" >&2; exit 1; }
mkdir -p .whl
if [ "${1:-}" = --base ]; then
  xz -T2 -c build/src/libmegafold_ops.so > .whl/base_ops.so.xz
  cp build/COMMIT .whl/base_COMMIT
  echo ".whl/base_ops.so.xz: $(du -h .whl/base_ops.so.xz | cut -f1), commit $(cat build/COMMIT)"
  exit 0
fi
tar cJf .whl/bin.tar.xz build/megafold build/src/libmegafold_ops.so build/COMMIT
echo ".whl/bin.tar.xz: $(du -h .whl/bin.tar.xz | cut -f1), commit $(cat build/COMMIT)"
