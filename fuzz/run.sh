#!/usr/bin/env bash
# Builds the fuzz targets (clang, libFuzzer, ASan + UBSan; fuzz/CMakeLists.txt) in
# build/fuzz and runs each for SECONDS (default 50): first over the committed regression
# inputs (fuzz/regressions/<target>/), then fuzzing from the seed corpus (make_seeds) and
# what earlier runs found (build/fuzz/corpus/<target>/). A finding stops the script with
# the fuzzer's report; the input is saved under build/fuzz/crashes/<target>/.
#   bash fuzz/run.sh [SECONDS] [TARGET...]     targets: npy safetensors json cli_args
# docs/fuzzing.md: longer runs, and what to do with a finding.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-50}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then targets=(npy safetensors json cli_args); fi
cxx="${MXTRAIN_FUZZ_CXX:-clang++-14}"

cmake -S fuzz -B build/fuzz -G Ninja -DCMAKE_CXX_COMPILER="$cxx" >/dev/null
cmake --build build/fuzz -j "$(nproc)"
rm -rf build/fuzz/seeds
build/fuzz/make_seeds build/fuzz/seeds

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
for t in "${targets[@]}"; do
  corpus="build/fuzz/corpus/$t"
  crashes="build/fuzz/crashes/$t"
  mkdir -p "$corpus" "$crashes"
  if compgen -G "fuzz/regressions/$t/*" >/dev/null; then
    echo "fuzz: $t: replaying fuzz/regressions/$t"
    "build/fuzz/fuzz_$t" fuzz/regressions/"$t"/* 2>&1 | tail -n 1
  fi
  echo "fuzz: $t: ${seconds}s"
  "build/fuzz/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" "build/fuzz/seeds/$t" \
    2>&1 | grep -E "^(stat::number_of_executed_runs|stat::new_units_added|Done|==|SUMMARY)|ERROR|Test unit written" || true
  if compgen -G "$crashes/*" >/dev/null; then
    echo "fuzz: $t: findings in $crashes (see docs/fuzzing.md)" >&2
    exit 1
  fi
done
