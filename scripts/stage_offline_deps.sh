#!/usr/bin/env bash
# For a build host without package access (the lent GPU machine): copies the header-only
# dependencies (gemmi, PEGTL, nlohmann-json, zlib headers) and GoogleTest from this machine's
# Debian packages into .deps/ (git-ignored). There: MEGAFOLD_DEPS_PREFIX=$PWD/.deps.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/setup.sh" >/dev/null
dst="$root/.deps"
rm -rf "$dst"
multiarch=$(gcc -print-multiarch)
mkdir -p "$dst/include" "$dst/lib/$multiarch/cmake"
cp -r /usr/include/gemmi /usr/include/tao /usr/include/nlohmann /usr/include/gtest /usr/include/gmock /usr/include/gloo \
      /usr/include/zlib.h /usr/include/zconf.h "$dst/include/"
# Same layout as /usr, so GTest's relocatable CMake package resolves inside .deps.
cp /usr/lib/$multiarch/libgtest.a /usr/lib/$multiarch/libgtest_main.a /usr/lib/$multiarch/libgmock.a \
   /usr/lib/$multiarch/libgmock_main.a "$dst/lib/$multiarch/"
cp -r /usr/lib/$multiarch/cmake/GTest "$dst/lib/$multiarch/cmake/"
du -sh "$dst"
