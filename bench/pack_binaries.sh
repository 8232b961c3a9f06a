#!/usr/bin/env bash
# Packs this machine's build (the megafold binary, the op library and the commit they come
# from) into .whl/bin.tar.xz for a device call whose carry is full (the cuEquivariance
# baseline's packages take ~50 of its 64 MiB); bench/device_session.sh unpacks it.
# --variant NAME packs only the op library and its commit, as one side of an A/B
# (.whl/NAME.tar.xz, ~4 MB, unpacked into build-NAME/; bench/device_session.sh's stage `variants`
# times it against build-base/): build the base commit and pack it with --base (= --variant
# base), then build each change and pack it with --variant NAME.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/COMMIT ] || { echo "no build/COMMIT: run scripts/build.sh first" >&2; exit 1; }
mkdir -p .whl
if [ "${1:-}" = --base ] || [ "${1:-}" = --variant ]; then
  name=base
  if [ "$1" = --variant ]; then name="${2:?--variant NAME}"; fi
  case "$name" in bin|site|new) echo "--variant $name: a name bench/device_session.sh uses itself" >&2; exit 2 ;; esac
  tar cJf ".whl/$name.tar.xz" --transform "s,^build/src/,build-$name/,;s,^build/,build-$name/," \
    build/src/libmegafold_ops.so build/COMMIT
  echo ".whl/$name.tar.xz: $(du -h ".whl/$name.tar.xz" | cut -f1), commit $(cat build/COMMIT)"
  exit 0
fi
tar cJf .whl/bin.tar.xz build/megafold build/src/libmegafold_ops.so build/COMMIT
echo ".whl/bin.tar.xz: $(du -h .whl/bin.tar.xz | cut -f1), commit $(cat build/COMMIT)"
