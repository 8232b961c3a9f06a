#!/usr/bin/env bash
# Packs this machine's build (the megafold binary, the op library and the commit they come
# from) into .whl/bin.tar.xz for a device call whose carry is full (the cuEquivariance
# baseline's packages take ~50 of its 64 MiB); bench/device_session.sh unpacks it.
# --base packs only the op library and its commit, as the base side of an A/B
# (.whl/base.tar.xz, ~4 MB, unpacked into build-base/; the device_session.sh stage `ab` times it
# against the build of the call): build the base commit, pack it with --base, build the change,
# pack it as usual.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/COMMIT ] || { echo "no build/COMMIT: run scripts/build.sh first" >&2; exit 1; }
mkdir -p .whl
if [ "${1:-}" = --base ]; then
  tar cJf .whl/base.tar.xz --transform 's,^build/src/,build-base/,;s,^build/,build-base/,' \
    build/src/libmegafold_ops.so build/COMMIT
  echo ".whl/base.tar.xz: $(du -h .whl/base.tar.xz | cut -f1), commit $(cat build/COMMIT)"
  exit 0
fi
tar cJf .whl/bin.tar.xz build/megafold build/src/libmegafold_ops.so build/COMMIT
echo ".whl/bin.tar.xz: $(du -h .whl/bin.tar.xz | cut -f1), commit $(cat build/COMMIT)"
