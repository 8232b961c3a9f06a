#!/usr/bin/env bash
# The main job: setup, build, then train on the bundled structures with the default
# config for the hardware found (cpu-tiny without a GPU, gpu-small with one).
# Extra arguments go to `megafold train` (e.g. --steps 50, --config configs/af3-full.json).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/build.sh" megafold
build="${MEGAFOLD_BUILD_DIR:-$root/build}"
cd "$root"
exec "$build/megafold" train --data data/pdb --out "${MEGAFOLD_RUN_DIR:-runs/default}" "$@"
