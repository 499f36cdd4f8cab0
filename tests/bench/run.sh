#!/usr/bin/env bash
# Builds the benchmarks (Release) and runs all seven with short settings, then prints a summary.
# Full logs go to $BUILD_DIR/bench-logs/. Benchmarks are not tests: nothing here passes or fails
# on a figure; the script fails only when a build or a benchmark binary fails.
#
# Usage: tests/bench/run.sh            (BUILD_DIR defaults to <repo>/build-bench)
#        BUILD_DIR=/tmp/b SECONDS_PER_RUN=3 AGENT_SECONDS=5 AGENT_ROUNDS=2 tests/bench/run.sh
# As root, 4/7 and 5/7 create a network namespace with veth pairs, and 7/7 two namespaces joined by
# a veth pair (removed at exit, also on Ctrl-C); otherwise those parts are skipped with a message.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$REPO/build-bench}"
SECONDS_PER_RUN="${SECONDS_PER_RUN:-2}"  # interval bench, per period and per baseline/sampler
AGENT_SECONDS="${AGENT_SECONDS:-4}"      # agent bench, per run (3 runs per round)
AGENT_ROUNDS="${AGENT_ROUNDS:-2}"
NCCL_ITERATIONS="${NCCL_ITERATIONS:-300000}"  # NCCL plugin bench, samples per row
PCAP_FRAMES="${PCAP_FRAMES:-300000}"  # pcap bench capture size (tshark reads the first 50,000)
LIVE_SECONDS="${LIVE_SECONDS:-1}"     # live capture bench, per trial (about 12 trials)
HEATMAP_REPEAT="${HEATMAP_REPEAT:-3}"  # heat-map bench, runs per figure (median)
CLUSTER_WINDOWS="${CLUSTER_WINDOWS:-4}"  # cluster bench, measured 1 s windows per mode (x 1,000 nodes)
UPLINK_BATCHES="${UPLINK_BATCHES:-2000}"  # uplink TLS bench, batches per stream (5 modes x 3 rounds)
LOGS="$BUILD_DIR/bench-logs"
start=$(date +%s)

echo "== configure + build (Release) in $BUILD_DIR"
cmake -S "$REPO" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$BUILD_DIR" fabricscope_bench_sampler fabricscope_bench_interval \
  fabricscope_bench_aggregator fabricscope_bench_sweep fabricscope_bench_agent \
  fabricscope_bench_pcap fabricscope_bench_capture_live | tail -n 1
mkdir -p "$LOGS"
BIN="$BUILD_DIR/tests/bench"

echo "== machine: nproc=$(nproc), cpu=\"$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')\", loadavg=$(cut -d' ' -f1-3 /proc/loadavg)"

echo "== 1/7 sampler read cost (fabricscope_bench_sampler)"
"$BIN/fabricscope_bench_sampler" --benchmark_color=false --benchmark_repetitions=3 \
  --benchmark_min_time=0.05 >"$LOGS/sampler.log" 2>&1
grep -E '^tree [a-z-]+ +[0-9]+ counters' "$LOGS/sampler.log"
sed -n '/=== sampler read cost summary/,$p' "$LOGS/sampler.log"

echo
echo "== 2/7 sampler interval, also under load (fabricscope_bench_interval --seconds=$SECONDS_PER_RUN --under-load)"
"$BIN/fabricscope_bench_interval" --seconds="$SECONDS_PER_RUN" --under-load >"$LOGS/interval.log" 2>&1
grep -vE '^machine:' "$LOGS/interval.log"

echo "== 3/7 aggregator, 1000 nodes x 8 ports (fabricscope_bench_aggregator)"
"$BIN/fabricscope_bench_aggregator" --benchmark_color=false --benchmark_repetitions=2 \
  --benchmark_min_time=0.05 >"$LOGS/aggregator.log" 2>&1
sed -n '/^memory:/,/^render: bytes by/p' "$LOGS/aggregator.log" | sed '$d'
sed -n '/^render: bytes by/,/^$/p' "$LOGS/aggregator.log" | head -n 8
sed -n '/=== aggregator summary/,$p' "$LOGS/aggregator.log"

echo
echo "== 4/7 one RDMA port full sweep vs bare pread+ioctl (fabricscope_bench_sweep)"
"$BIN/fabricscope_bench_sweep" --benchmark_color=false --benchmark_repetitions=5 \
  --benchmark_min_time=0.1 >"$LOGS/sweep.log" 2>&1 || { tail -n 20 "$LOGS/sweep.log"; exit 1; }
grep -E '^(port|ethtool):' "$LOGS/sweep.log"
sed -n '/=== one-port sweep summary/,$p' "$LOGS/sweep.log"

echo
echo "== 5/7 agent, 8 RDMA ports + 8 netdevs, 1 ms (fabricscope_bench_agent --seconds=$AGENT_SECONDS --rounds=$AGENT_ROUNDS)"
"$BIN/fabricscope_bench_agent" --seconds="$AGENT_SECONDS" --rounds="$AGENT_ROUNDS" \
  >"$LOGS/agent.log" 2>&1 || { tail -n 20 "$LOGS/agent.log"; exit 1; }
grep -E '^(node|ethtool|loadavg)' "$LOGS/agent.log"
sed -n '/=== sampler threads at 1 ms/,$p' "$LOGS/agent.log"

echo
echo "== 6/7 offline capture analysis vs bare libpcap and tshark (fabricscope_bench_pcap --frames=$PCAP_FRAMES)"
"$BIN/fabricscope_bench_pcap" --frames="$PCAP_FRAMES" --tshark-frames=50000 >"$LOGS/pcap.log" 2>&1 \
  || { tail -n 20 "$LOGS/pcap.log"; exit 1; }
grep -E '^(capture|tshark capture|ours analyzed):' "$LOGS/pcap.log"
sed -n '/=== offline capture analysis/,$p' "$LOGS/pcap.log"

echo
echo "== 7/7 live capture on a veth pair, highest drop-free rate (fabricscope_bench_capture_live --seconds=$LIVE_SECONDS)"
"$BIN/fabricscope_bench_capture_live" --seconds="$LIVE_SECONDS" >"$LOGS/capture_live.log" 2>&1 \
  || { tail -n 20 "$LOGS/capture_live.log"; exit 1; }
grep -E '^(setup|capture|skipped):' "$LOGS/capture_live.log"
sed -n '/=== live capture on a veth pair/,$p' "$LOGS/capture_live.log"

echo
echo "== NCCL profiler plugin callbacks vs empty callbacks (fabricscope_bench_nccl --iterations=$NCCL_ITERATIONS)"
ninja -C "$BUILD_DIR" fabricscope_bench_nccl | tail -n 1
"$BIN/fabricscope_bench_nccl" --iterations="$NCCL_ITERATIONS" >"$LOGS/nccl.log" 2>&1 \
  || { tail -n 20 "$LOGS/nccl.log"; exit 1; }
sed -n '/=== NCCL profiler plugin/,$p' "$LOGS/nccl.log"

echo "== NCCL profiler plugin per collective and thread, by shape (fabricscope_bench_nccl_shapes)"
ninja -C "$BUILD_DIR" fabricscope_bench_nccl_shapes | tail -n 1
"$BIN/fabricscope_bench_nccl_shapes" >"$LOGS/nccl_shapes.log" 2>&1 \
  || { tail -n 20 "$LOGS/nccl_shapes.log"; exit 1; }
cat "$LOGS/nccl_shapes.log"

echo
echo "== link heat map, 1,000 links x 1,000 buckets: model, SVG, JSON vs snprintf/memcpy (fabricscope_bench_heatmap --repeat=$HEATMAP_REPEAT)"
ninja -C "$BUILD_DIR" fabricscope_bench_heatmap | tail -n 1
"$BIN/fabricscope_bench_heatmap" --repeat="$HEATMAP_REPEAT" >"$LOGS/heatmap.log" 2>&1 \
  || { tail -n 20 "$LOGS/heatmap.log"; exit 1; }
cat "$LOGS/heatmap.log"

echo
echo "== naming the job that shared a node: agent ledger per collective, links heat map ?job= (fabricscope_bench_jobs --repeat=$HEATMAP_REPEAT)"
ninja -C "$BUILD_DIR" fabricscope_bench_jobs | tail -n 1
"$BIN/fabricscope_bench_jobs" --repeat="$HEATMAP_REPEAT" >"$LOGS/jobs.log" 2>&1
grep -E '^(===|agent|aggregator) ' "$LOGS/jobs.log"

echo "== cluster ingest, 1,000 GPU nodes x 8 ports + 100 collectives/s: batches/s, matching, memory, /metrics (fabricscope_bench_cluster --windows=$CLUSTER_WINDOWS)"
ninja -C "$BUILD_DIR" fabricscope_bench_cluster | tail -n 1
"$BIN/fabricscope_bench_cluster" --windows="$CLUSTER_WINDOWS" >"$LOGS/cluster.log" 2>&1 \
  || { tail -n 20 "$LOGS/cluster.log"; exit 1; }
grep -E '^(cluster|batch|warm-up|memory):' "$LOGS/cluster.log"
sed -n '/=== cluster ingest summary/,$p' "$LOGS/cluster.log"

echo
echo "== sharded aggregators, 100,000 GPUs (12,500 nodes x 8) on 4 in-process aggregators forwarding over loopback gRPC, against one (fabricscope_bench_shards)"
ninja -C "$BUILD_DIR" fabricscope_bench_shards | tail -n 1
"$BIN/fabricscope_bench_shards" >"$LOGS/shards.log" 2>&1 \
  || { tail -n 20 "$LOGS/shards.log"; exit 1; }
grep -E '^(shards|baseline|sharded|forwarding|memory|shards_summary)' "$LOGS/shards.log"

echo
echo "== uplink ingest per batch: plain text, token, TLS, mTLS, TLS + token (fabricscope_bench_uplink_tls --batches=$UPLINK_BATCHES)"
ninja -C "$BUILD_DIR" fabricscope_bench_uplink_tls | tail -n 1
"$BIN/fabricscope_bench_uplink_tls" --batches="$UPLINK_BATCHES" >"$LOGS/uplink_tls.log" 2>&1 \
  || { tail -n 20 "$LOGS/uplink_tls.log"; exit 1; }
cat "$LOGS/uplink_tls.log"

echo
echo "== fault matrix: every fault at every magnitude, named share and detection delay (tests/e2e/fault_matrix_test.py --full, ~20 min)"
if [ "$(id -u)" -eq 0 ] && command -v nft >/dev/null; then
  ninja -C "$BUILD_DIR" fabricscope-agent fabricscope-aggregator fabricscope-ring-allreduce \
    fabricscope_nccl_profiler fabricscope-fake-pfc | tail -n 1
  python3 "$REPO/tests/e2e/fault_matrix_test.py" "$BUILD_DIR/agent/fabricscope-agent" \
    "$BUILD_DIR/exporters/fabricscope-aggregator" \
    "$BUILD_DIR/tests/tools/fabricscope-ring-allreduce" \
    "$(find "$BUILD_DIR" -name 'libnccl-profiler-fabricscope.so' | head -n 1)" --full \
    --fake-pfc="$BUILD_DIR/tests/tools/libfabricscope-fake-pfc.so" \
    >"$LOGS/fault_matrix.log" 2>&1 || { tail -n 20 "$LOGS/fault_matrix.log"; exit 1; }
  grep -E 'clean:|^cluster-in-a-box: \|' "$LOGS/fault_matrix.log" | sed 's/^cluster-in-a-box: //'
else
  echo "skipped: needs root (network namespaces) and nft (deploy/install-deps.sh)"
fi

echo
echo "== soak: 1,000 agents churning for a simulated hour, aggregator RSS per minute, with --node-expiry 10m and without (fabricscope_bench_soak)"
ninja -C "$BUILD_DIR" fabricscope_bench_soak | tail -n 1
"$BIN/fabricscope_bench_soak" --expiry-minutes=0 >"$LOGS/soak_never.log" 2>&1 || true
"$BIN/fabricscope_bench_soak" >"$LOGS/soak.log" 2>&1 || { tail -n 5 "$LOGS/soak.log"; exit 1; }
echo "without expiry (baseline): $(grep '^soak:' "$LOGS/soak_never.log")"
echo "with --node-expiry 10m:    $(grep '^soak:' "$LOGS/soak.log")"

echo
echo "== fuzzing: every parser, 60 s each, coverage-guided (tests/fuzz/run.sh; make test-asan gives them 2 s each)"
if command -v clang++ >/dev/null; then
  "$REPO/tests/fuzz/run.sh" "${FUZZ_SECONDS:-60}" >"$LOGS/fuzz.log" 2>&1 || {
    tail -n 30 "$LOGS/fuzz.log"
    exit 1
  }
  grep -E '^== |number_of_executed_units' "$LOGS/fuzz.log"
else
  echo "skipped: needs clang and libclang-rt-14-dev (deploy/install-deps.sh)"
fi

echo
echo "== done in $(($(date +%s) - start)) s; full logs in $LOGS"
