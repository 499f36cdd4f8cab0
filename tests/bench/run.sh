#!/usr/bin/env bash
# Builds the benchmarks (Release) and runs all three with short settings, then prints a summary.
# Full logs go to $BUILD_DIR/bench-logs/. Benchmarks are not tests: nothing here passes or fails
# on a figure; the script fails only when a build or a benchmark binary fails.
#
# Usage: tests/bench/run.sh            (BUILD_DIR defaults to <repo>/build-bench)
#        BUILD_DIR=/tmp/b SECONDS_PER_RUN=3 tests/bench/run.sh
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build-bench}"
SECONDS_PER_RUN="${SECONDS_PER_RUN:-2}"  # interval bench, per period and per baseline/sampler
LOGS="$BUILD_DIR/bench-logs"
start=$(date +%s)

echo "== configure + build (Release) in $BUILD_DIR"
cmake -S "$REPO" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$BUILD_DIR" fabricscope_bench_sampler fabricscope_bench_interval \
  fabricscope_bench_aggregator | tail -n 1
mkdir -p "$LOGS"
BIN="$BUILD_DIR/tests/bench"

echo "== machine: nproc=$(nproc), cpu=\"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')\", loadavg=$(cut -d' ' -f1-3 /proc/loadavg)"

echo "== 1/3 sampler read cost (fabricscope_bench_sampler)"
"$BIN/fabricscope_bench_sampler" --benchmark_color=false --benchmark_repetitions=3 \
  --benchmark_min_time=0.05 >"$LOGS/sampler.log" 2>&1
grep -E '^tree [a-z-]+ +[0-9]+ counters' "$LOGS/sampler.log"
sed -n '/=== sampler read cost summary/,$p' "$LOGS/sampler.log"

echo
echo "== 2/3 sampler interval (fabricscope_bench_interval --seconds=$SECONDS_PER_RUN)"
"$BIN/fabricscope_bench_interval" --seconds="$SECONDS_PER_RUN" >"$LOGS/interval.log" 2>&1
grep -vE '^machine:' "$LOGS/interval.log"

echo "== 3/3 aggregator, 1000 nodes x 8 ports (fabricscope_bench_aggregator)"
"$BIN/fabricscope_bench_aggregator" --benchmark_color=false --benchmark_repetitions=2 \
  --benchmark_min_time=0.05 >"$LOGS/aggregator.log" 2>&1
sed -n '/^memory:/,/^render: bytes by/p' "$LOGS/aggregator.log" | sed '$d'
sed -n '/^render: bytes by/,/^$/p' "$LOGS/aggregator.log" | head -n 8
sed -n '/=== aggregator summary/,$p' "$LOGS/aggregator.log"

echo
echo "== done in $(($(date +%s) - start)) s; full logs in $LOGS"
