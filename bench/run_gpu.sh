#!/usr/bin/env bash
# Everything the GPU host does in one call: build (CUDA, sm_90a) with the staged offline
# dependencies, run the test suite (CUDA kernels against their references included), the
# triangle-attention comparison (megafold vs FlexAttention by default; BENCH_IMPLS picks) with
# its per-kernel profile (BENCH_ATTENTION=0 skips both), and the training-step benchmark.
# Logs and results go to $OUT.
# Run `scripts/stage_offline_deps.sh` here first and carry .deps.
# usage: bench/run_gpu.sh [CONFIG:STEPS ...]   (train_step runs; default gpu-small:60)
set -uo pipefail
OUT="${OUT:-/tmp/megafold-out}"
mkdir -p "$OUT"
export MEGAFOLD_DEPS_PREFIX="$PWD/.deps" MEGAFOLD_BUILD_DIR="$PWD/build-gpu" MEGAFOLD_CUDA=ON
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
bash scripts/build.sh > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
build-gpu/megafold info > "$OUT/info.txt" 2>&1
ctest --test-dir build-gpu -j 8 --output-on-failure > "$OUT/ctest.log" 2>&1
echo "ctest rc=$?"; tail -4 "$OUT/ctest.log"
lib=build-gpu/src/libmegafold_ops.so
if [ "${BENCH_ATTENTION:-1}" = 1 ]; then
python3 bench/triangle_attention.py --lib "$lib" --out "$OUT/triangle_attention.json" \
  --impl ${BENCH_IMPLS:-megafold flex} > "$OUT/triangle_attention.log" 2>&1
echo "triangle_attention rc=$?"
python3 bench/profile_kernels.py --lib "$lib" > "$OUT/profile_kernels.log" 2>&1
grep -E "N=|kernel|total" "$OUT/profile_kernels.log"
fi
[ $# -gt 0 ] || set -- gpu-small:60
python3 bench/train_step.py --bin build-gpu/megafold --out "$OUT/train_step.json" "$@" 2>&1 \
  | tee "$OUT/train_step.log" | grep -v "^step "
