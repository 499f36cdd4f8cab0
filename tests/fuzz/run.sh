#!/usr/bin/env bash
# Builds the libFuzzer targets with clang + ASan/UBSan in build-fuzz/ and runs the packet parser
# fuzzer for a while. Needs clang and its libFuzzer runtime (Debian: clang, libclang-rt-14-dev;
# deploy/install-deps.sh).
# Usage: tests/fuzz/run.sh [SECONDS]   (default 30; FUZZ_JOBS=N runs N jobs in parallel)
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds="${1:-30}"
build="${FUZZ_BUILD_DIR:-build-fuzz}"

cmake -S . -B "$build" -G Ninja \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DFABRICSCOPE_SANITIZE=ON \
  -DCMAKE_C_FLAGS=-fsanitize=fuzzer-no-link -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link >/dev/null
ninja -C "$build" packet_fuzz packet_fuzz_seeds

corpus="$build/fuzz-corpus/packet"
mkdir -p "$corpus"
"$build/tests/fuzz/packet_fuzz_seeds" "$corpus"
# A crash leaves crash-* in $build/fuzz-artifacts/ and exits non-zero.
mkdir -p "$build/fuzz-artifacts"
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  "$build/tests/fuzz/packet_fuzz" "$corpus" \
  -max_total_time="$seconds" -max_len=4096 -print_final_stats=1 \
  -artifact_prefix="$build/fuzz-artifacts/" ${FUZZ_JOBS:+-jobs=$FUZZ_JOBS -workers=$FUZZ_JOBS}
