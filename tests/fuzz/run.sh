#!/usr/bin/env bash
# Coverage-guided fuzzing of every parser (tests/fuzz/*_fuzz.cc) with libFuzzer: builds the
# targets with clang + ASan/UBSan in build-fuzz/, seeds each corpus with the target's own seeds
# and its regression inputs (tests/fuzz/regressions/<target>/), and runs each for SECONDS.
# Needs clang and its libFuzzer runtime (Debian: clang, libclang-rt-14-dev;
# deploy/install-deps.sh). ctest runs the same targets for a few seconds each without libFuzzer.
# Usage: tests/fuzz/run.sh [SECONDS] [TARGET...]   (default 30 s each, every target;
#        FUZZ_JOBS=N runs N jobs per target in parallel)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-30}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(packet sysfs_value procfs_table ethtool_strings config ingest gpu_wire spool http_query)
fi
build="${FUZZ_BUILD_DIR:-build-fuzz}"

cmake -S . -B "$build" -G Ninja \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFABRICSCOPE_SANITIZE=ON -DFABRICSCOPE_BUILD_BENCH=OFF \
  -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link >/dev/null
ninja -C "$build" $(for t in "${targets[@]}"; do echo "${t}_fuzz ${t}_fuzz_standalone"; done)

mkdir -p "$build/fuzz-artifacts"
status=0
for t in "${targets[@]}"; do
  corpus="$build/fuzz-corpus/$t"
  mkdir -p "$corpus"
  "$build/tests/fuzz/${t}_fuzz_standalone" --write-seeds="$corpus"
  cp tests/fuzz/regressions/"$t"/* "$corpus"/ 2>/dev/null || true
  echo "== $t: ${seconds} s"
  # A crash leaves crash-* in $build/fuzz-artifacts/ and exits non-zero; the others still run.
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build/tests/fuzz/${t}_fuzz" "$corpus" \
    -max_total_time="$seconds" -max_len=65536 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$build/fuzz-artifacts/${t}-" ${FUZZ_JOBS:+-jobs=$FUZZ_JOBS -workers=$FUZZ_JOBS} \
    2>&1 | grep -E "^(stat::number_of_executed_units|stat::peak_rss_mb|INFO: .* new units|==[0-9]+==ERROR|SUMMARY)" \
    || status=1
done
exit $status
