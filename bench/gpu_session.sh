#!/usr/bin/env bash
# One device call: build + tests + training-step benchmark (bench/run_gpu.sh), then the
# README's main job exactly as a user runs it (scripts/train.sh, gpu-small on a GPU).
set -uo pipefail
OUT="${OUT:-/tmp/megafold-out}"
export OUT
timeout 420 bash bench/run_gpu.sh "$@"
MEGAFOLD_DEPS_PREFIX="$PWD/.deps" MEGAFOLD_BUILD_DIR="$PWD/build-gpu" MEGAFOLD_RUN_DIR=/tmp/main-job \
  timeout 330 bash scripts/train.sh > "$OUT/main_job.log" 2>&1
echo "main job rc=$?"
cp /tmp/main-job/metrics.jsonl "$OUT/main_job_metrics.jsonl"
grep -E "validation|done|^data|^model" "$OUT/main_job.log"
