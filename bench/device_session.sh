#!/usr/bin/env bash
# One device call: GPU tests and benchmarks in stages. Uses the binaries built on the machine
# that sent the call when they run here (carry build/megafold, build/src/libmegafold_ops.so,
# build/tests/megafold_tests and build/COMMIT, or bench/pack_binaries.sh's .whl/bin.tar.xz),
# else builds with the staged offline dependencies (.deps). Results record the commit in
# build/COMMIT (written by scripts/build.sh), not the host's copy of the repository's HEAD.
# Python packages that are not installed here can come as a tarball of a site-packages tree
# (.whl/site.tar.xz, unpacked onto PYTHONPATH). Stages run in order; logs and results go to
# $OUT.
# usage: bench/device_session.sh [STAGE [ARGS...] --] ...
#   tests [GTEST_FILTER]       the CUDA tests (default: every *Cuda* suite and the memory tests)
#   attention ARGS             bench/triangle_attention.py
#   profile ARGS               bench/profile_kernels.py (per-kernel time and ceilings)
#   variants NAME... [ARGS]    op libraries against the base one (bench/pack_binaries.sh --variant
#                              NAME: .whl/NAME.tar.xz into build-NAME/, base = the base; NAME new
#                              is this call's build): each variant's triangle-attention CUDA tests and
#                              bench/same_outputs.py against the base, then bench/profile_kernels.py
#                              ARGS (from the first argument that starts with -) and the op's
#                              fwd+bwd by bench/triangle_attention.py (at ARGS' --n) on the base and
#                              every variant, alternated twice (METHOD.md: same machine), and
#                              bench/ab_table.py's per-kernel table. Carry .whl/bin.tar.xz,
#                              .whl/tests.xz, .whl/base.tar.xz and each .whl/NAME.tar.xz.
#   fused-variants NAME... [ARGS]
#                              the same for the fused pair operators: each variant's CUDA tests of
#                              LayerNorm+Linear, TriMul and the transition, then
#                              bench/fused_ops.py --profile ARGS for the base and every variant,
#                              alternated twice, and bench/ab_fused.py's table
#   block ARGS                 bench/pairformer_block.py
#   fused ARGS                 bench/fused_ops.py
#   ncu NAME REGEX COUNT SCRIPT ARGS
#                              Nsight Compute on the first COUNT kernels matching REGEX while
#                              python3 SCRIPT ARGS runs (--lib is added); report in ncu_NAME.txt,
#                              per-instruction samples in ncu_NAME_sass.csv.xz, summarised by
#                              bench/ncu_stalls.py
#   frontier ARGS, memory ARGS bench/frontier.py, bench/memory.py
#   learning ARGS              bench/learning.py (--bin and --out given; e.g. the overfit
#                              homodimer with --run "$OUT/run" so that a cut run resumes)
set -uo pipefail
OUT="${OUT:-/tmp/megafold-out}"
mkdir -p "$OUT"
torch_lib="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__) + "/lib")')"
export LD_LIBRARY_PATH="$torch_lib:$PWD/build/src:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
# Binaries may come packed too (a call carrying the baselines' ~50 MB of packages has no room
# for them unpacked): bench/pack_binaries.sh's .whl/bin.tar.xz.
if [ -f .whl/bin.tar.xz ]; then tar xJf .whl/bin.tar.xz; fi
for packed in .whl/*.tar.xz; do  # op libraries of stage variants (build-NAME/)
  case "$packed" in .whl/bin.tar.xz|.whl/site.tar.xz|'.whl/*.tar.xz') ;; *) tar xJf "$packed" ;; esac
done
if [ -f .whl/tests.xz ]; then  # the test binary alone (xz -c build/tests/megafold_tests > .whl/tests.xz)
  mkdir -p build/tests && xz -d < .whl/tests.xz > build/tests/megafold_tests && chmod +x build/tests/megafold_tests
fi
if [ -f build/COMMIT ]; then export MEGAFOLD_COMMIT="$(cat build/COMMIT)"; fi
if [ -f .whl/site.tar.xz ]; then
  mkdir -p /tmp/site && tar xJf .whl/site.tar.xz -C /tmp/site && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
bin=build/megafold tests=build/tests/megafold_tests lib=build/src/libmegafold_ops.so
if ! "$bin" info > "$OUT/info.txt" 2>&1; then
  echo "carried binaries do not run here ($(tail -1 "$OUT/info.txt")); building"
  export MEGAFOLD_DEPS_PREFIX="$PWD/.deps" MEGAFOLD_BUILD_DIR="$PWD/build-gpu" MEGAFOLD_CUDA=ON
  bash scripts/build.sh > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
  bin=build-gpu/megafold tests=build-gpu/tests/megafold_tests lib=build-gpu/src/libmegafold_ops.so
  export MEGAFOLD_COMMIT="$(cat build-gpu/COMMIT 2>/dev/null || echo unknown)"
  "$bin" info > "$OUT/info.txt" 2>&1
fi
grep -E "build|cuda:0" "$OUT/info.txt"
# The stages that time op libraries against the base one (variants, fused-variants): their
# arguments split into library names and the benchmark's own (from the first that starts with
# -), each library's folder, and a variant's CUDA tests of FILTER with its library first on the
# path (one test binary serves every library: only the suites that call the ops through their
# tensor API, not those that build a kernel's parameter struct, whose layout may differ).
variant_dir() { if [ "$1" = new ]; then dirname "$lib"; else echo "build-$1"; fi; }
split_variants() {
  names=() bench_args=()
  for arg in "$@"; do
    if [ ${#bench_args[@]} -gt 0 ] || [ "${arg#-}" != "$arg" ]; then bench_args+=("$arg"); else names+=("$arg"); fi
  done
  [ -f build-base/libmegafold_ops.so ] || { echo "$stage: no base library (bench/pack_binaries.sh --base)"; exit 2; }
  for name in "${names[@]}"; do
    [ -f "$(variant_dir "$name")/libmegafold_ops.so" ] ||
      { echo "$stage: no $(variant_dir "$name")/libmegafold_ops.so"; exit 2; }
  done
}
# A call brings back only a few files from $OUT: the variant stages' many logs (each library's
# tests and timings per round) travel as one archive once their table is printed.
archive_logs() {  # ARCHIVE PATTERN...
  local archive="$1"; shift
  (cd "$OUT" && shopt -s nullglob && files=($@) &&
    { [ ${#files[@]} -eq 0 ] || tar cJf "$archive" --remove-files "${files[@]}"; })
}
variant_tests() {  # NAME FILTER
  LD_LIBRARY_PATH="$(variant_dir "$1"):$LD_LIBRARY_PATH" timeout 300 "$tests" --gtest_filter="$2" \
    > "$OUT/tests_$1.log" 2>&1
  echo "$1: tests rc=$? $(grep -E '^\[  (PASSED|FAILED) ' "$OUT/tests_$1.log" | tr '\n' ' ')"
}
while [ $# -gt 0 ]; do
  stage="$1"; shift
  args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do args+=("$1"); shift; done
  [ $# -gt 0 ] && shift
  case "$stage" in
    tests)
      timeout "${TESTS_TIMEOUT:-600}" "$tests" --gtest_filter="${args[0]:-*Cuda*:Memory*:HostStash*:ChunkedCheckpoint*}" \
        > "$OUT/tests.log" 2>&1
      echo "tests rc=$?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests? ran" "$OUT/tests.log" | tail -12 ;;
    attention)
      python3 bench/triangle_attention.py --lib "$lib" --out "$OUT/triangle_attention.json" "${args[@]}" \
        2> "$OUT/attention.log" | cut -c1-300 ;;
    profile)
      python3 bench/profile_kernels.py --lib "$lib" "${args[@]}" > "$OUT/profile.log" 2>&1
      grep -E "N=|kernel|total" "$OUT/profile.log" ;;
    variants)
      split_variants "${args[@]}"
      for name in "${names[@]}"; do
        variant_tests "$name" "TriangleAttentionCuda*"
        timeout 300 python3 bench/same_outputs.py --lib "$(variant_dir "$name")/libmegafold_ops.so" \
          --against build-base/libmegafold_ops.so > "$OUT/same_$name.log" 2>&1
        echo "$name: against the base, $(tail -1 "$OUT/same_$name.log")"
      done
      # The op's fwd+bwd as bench/triangle_attention.py times it (what the README reports; the
      # profile's step time carries the profiler's host overhead), at the profile's sizes.
      sizes=() in_n=0
      for arg in "${bench_args[@]}"; do
        if [ "$arg" = --n ]; then in_n=1; elif [ "${arg#-}" != "$arg" ]; then in_n=0
        elif [ $in_n = 1 ]; then sizes+=("$arg"); fi
      done
      for round in 1 2; do
        for name in base "${names[@]}"; do
          log="$OUT/ab_${name}_$round.log" variant_lib="$(variant_dir "$name")/libmegafold_ops.so"
          timeout 150 python3 bench/profile_kernels.py --lib "$variant_lib" \
            "${bench_args[@]}" > "$log" 2>&1 || echo "$name round $round failed ($log)"
          timeout 150 python3 bench/triangle_attention.py --lib "$variant_lib" --impl megafold \
            --out "$OUT/ab_${name}_$round.json" ${sizes[@]:+--n "${sizes[@]}"} > /dev/null 2>&1 ||
            echo "$name round $round: op timing failed"
        done
      done
      python3 bench/ab_table.py "$OUT" base "${names[@]}"
      archive_logs variants_logs.tar.xz 'tests_*.log' 'same_*.log' 'ab_*' ;;
    fused-variants)
      # The same for the fused pair operators' libraries: each variant's CUDA tests of
      # LayerNorm+Linear, TriMul and the transition, then bench/fused_ops.py --profile ARGS (the
      # op's fwd+bwd and its kernels) for the base and every variant, alternated twice, and
      # bench/ab_fused.py's table.
      split_variants "${args[@]}"
      for name in "${names[@]}"; do
        variant_tests "$name" "LayerNormLinearCuda*:TriangleMultiplicationCuda*:SwigluTransitionCuda*"
      done
      for round in 1 2; do
        for name in base "${names[@]}"; do
          timeout 200 python3 bench/fused_ops.py --lib "$(variant_dir "$name")/libmegafold_ops.so" --impl megafold \
            --profile --out "$OUT/abf_${name}_$round.json" "${bench_args[@]}" > "$OUT/abf_${name}_$round.log" 2>&1 ||
            echo "$name round $round failed ($OUT/abf_${name}_$round.log)"
        done
      done
      python3 bench/ab_fused.py "$OUT" base "${names[@]}"
      archive_logs fused_variants_logs.tar.xz 'tests_*.log' 'abf_*' ;;
    fused)
      python3 bench/fused_ops.py --lib "$lib" --out "$OUT/fused_ops.json" "${args[@]}" 2> "$OUT/fused.log" \
        | cut -c1-300 ;;
    ncu)
      report="/tmp/ncu_${args[0]}"
      ncu --clock-control none --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
        --section WarpStateStats --section LaunchStats --section SchedulerStats --section SourceCounters \
        --import-source no --kernel-name-base demangled -k "regex:${args[1]}" -f -o "$report" \
        --launch-count "${args[2]}" python3 "${args[3]}" --lib "$lib" "${args[@]:4}" > "$OUT/ncu_${args[0]}.log" 2>&1
      echo "ncu ${args[0]} rc=$?"
      ncu --import "$report.ncu-rep" --page details > "$OUT/ncu_${args[0]}.txt" 2>&1
      # Per-instruction samples (SASS) for bench/ncu_stalls.py, compressed: a call returns few files.
      ncu --import "$report.ncu-rep" --page source --print-source sass --csv 2>&1 | xz > "$OUT/ncu_${args[0]}_sass.csv.xz"
      grep -E "^  [a-z_].*\(|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|No Eligible|Issued Warp|L2 Hit|One or More" \
        "$OUT/ncu_${args[0]}.txt" | cut -c1-160
      python3 bench/ncu_stalls.py "$OUT/ncu_${args[0]}_sass.csv.xz" --top 8 | cut -c1-160 ;;
    block)
      python3 bench/pairformer_block.py --bin "$bin" --out "$OUT/pairformer_block.json" "${args[@]}" \
        2> "$OUT/block.log" | cut -c1-300 ;;
    frontier)
      python3 bench/frontier.py --bin "$bin" --out "$OUT/frontier.json" "${args[@]}" 2> "$OUT/frontier.log" \
        | tee -a "$OUT/frontier_rows.jsonl" | cut -c1-300 ;;
    memory)
      python3 bench/memory.py --bin "$bin" --out "$OUT/memory.json" "${args[@]}" 2> "$OUT/memory.log" \
        | tee -a "$OUT/memory_rows.jsonl" | cut -c1-240 ;;
    learning)
      python3 bench/learning.py --bin "$bin" --out "$OUT/learning.json" "${args[@]}" 2> "$OUT/learning.log" \
        | tail -20 | cut -c1-300 ;;
    *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
