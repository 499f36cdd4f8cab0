#!/usr/bin/env bash
# The monitoring stack end to end, on real traffic: a real Prometheus (Debian's), configured from
# deploy/prometheus/prometheus.yml and loaded with deploy/prometheus/fabricscope.rules.yml,
# scrapes a real fabricscope-aggregator fed by two real agents watching the two ends of a veth
# pair between two network namespaces. A TCP transfer shaped by tbf gives a known utilization;
# UDP datagrams too large for the receiving end's MTU give a known number of dropped packets
# (the kernel counts each in the receiving veth's rx_dropped, the netdev loss the agent reports).
# Through Prometheus's HTTP API the test checks:
#   1. before any traffic: no FabricscopePacketLoss alert, idle utilization;
#   2. with traffic: mean utilization of the sender's transmit and the receiver's receive
#      direction near the shaped rate over the configured line rate (100 / 200 Mbit/s = 0.5),
#      the reverse directions near 0, and the counter-based utilization agreeing with the
#      agents' per-window gauge;
#   3. the injected loss: FabricscopePacketLoss goes pending, then firing, for the receiving
#      node's port only, and the rx_dropped increase Prometheus holds equals the datagrams sent
#      and the kernel's own count;
#   4. every PromQL expression of dashboards/*.json and deploy/prometheus/*.rules.yml (listed by
#      fabricscope-monitoring-exprs, Grafana variables substituted: $__rate_interval = 4 s = 4 x
#      the scrape interval, every other variable ".*") returns data, except the ones that
#      legitimately return nothing here, each with its reason (table below, printed per run).
#
# Shortened for a test (documented in dashboards/README.md "Monitoring"): scrape and rule evaluation every
# 1 s instead of 15 s, and every alert's "for:" replaced by 3s in the test's copy of the rules
# (the rules' [5m]/[15m]/[1d] ranges stay: a range longer than the data uses the data there is).
# Everything runs inside two namespaces this script creates (Prometheus and the aggregator on
# node A's loopback, on ports picked in the fresh namespace) and is stopped and deleted on any
# exit. Measured on the 2-vCPU CI-class VM: 62 s at load 15, 107 s at load 26 (other builds).
#
# Usage: prometheus_alerts_test.sh AGENT AGGREGATOR BURST_TOOL EXPRS_TOOL SOURCE_DIR
# Needs root, ip netns, veth, tbf, prometheus and promtool; exits 77 (skipped) without them.
# FABRICSCOPE_E2E_KEEP=1 keeps the work directory (logs, Prometheus config) on success too.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

AGENT=${1:?agent binary}
AGGREGATOR=${2:?aggregator binary}
BURST=${3:?burst tool binary}
EXPRS=${4:?fabricscope-monitoring-exprs binary}
SRC=${5:?source directory}
KEEP=${FABRICSCOPE_E2E_KEEP:-0}
T_START=$SECONDS

SHAPED=100mbit       # tbf rate on A's veth
LINE=200mbit         # the agents' --line-rate: expected utilization 0.5
EXPECTED_UTIL=0.5
DATAGRAMS=300        # oversized UDP datagrams sent at ~100/s, each dropped at B
A_ADDR=10.217.0.1
B_ADDR=10.217.0.2

log() { printf '%3ds %s\n' "$((SECONDS - T_START))" "$*"; }
skip() { log "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
command -v prometheus >/dev/null || skip "prometheus is not installed (deploy/install-deps.sh)"
command -v promtool >/dev/null || skip "promtool is not installed (deploy/install-deps.sh)"
ip netns list >/dev/null 2>&1 || skip "ip netns unavailable"
for tool in tc curl jq awk sed nsenter; do
  command -v "$tool" >/dev/null || { log "FAIL: $tool not installed"; exit 1; }
done

NS_A=fs-prom-a-$$
NS_B=fs-prom-b-$$
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fabricscope-prom-e2e.XXXXXX") || exit 1
PIDS=()
FAILED=0

cleanup() {
  stop_pids "${PIDS[@]}"
  delete_netns "$NS_A" "$NS_B"
  if [ "$FAILED" -eq 0 ] && [ "$KEEP" != 1 ]; then rm -rf "$WORK"; else log "logs kept in $WORK"; fi
}
trap cleanup EXIT
trap 'FAILED=1; log "interrupted"; exit 130' INT TERM

fail() {
  FAILED=1
  log "FAIL: $*"
  for f in aggregator agent-a agent-b prometheus sender receiver udp; do
    log "---- $f.log (tail)"
    tail -15 "$WORK/$f.log" 2>/dev/null
  done
  exit 1
}
in_a() { ip netns exec "$NS_A" "$@"; }
in_b() { ip netns exec "$NS_B" "$@"; }

# ---------------------------------------------------------------------------- the link
ip netns add "$NS_A" 2>"$WORK/netns.err" || skip "cannot create namespaces: $(cat "$WORK/netns.err")"
ip netns add "$NS_B" || skip "cannot create namespaces"
ip -n "$NS_A" link add va type veth peer name vb netns "$NS_B" 2>"$WORK/veth.err" ||
  skip "cannot create a veth pair: $(cat "$WORK/veth.err")"
for ns in "$NS_A" "$NS_B"; do
  ip netns exec "$ns" sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 \
    net.ipv6.conf.default.disable_ipv6=1 >/dev/null 2>&1
  ip -n "$ns" link set lo up
done
ip -n "$NS_A" addr add "$A_ADDR/30" dev va
ip -n "$NS_B" addr add "$B_ADDR/30" dev vb
# B's MTU is smaller than A's: a 1500-byte datagram from A cannot enter B and is dropped and
# counted in vb's rx_dropped; TCP is unaffected (B advertises an MSS that fits).
ip -n "$NS_B" link set vb mtu 1400
ip -n "$NS_A" link set va gso_max_segs 1 2>/dev/null  # one frame per segment
ip -n "$NS_A" link set va up
ip -n "$NS_B" link set vb up
# A small bucket (8 KB: 0.33 ms at the 200 Mbit/s line rate) keeps every 1 ms sample of the
# shaped flow under ~0.85 of line rate, so the microburst alerts have no reason to fire.
tc -n "$NS_A" qdisc add dev va root tbf rate "$SHAPED" burst 8kb latency 50ms 2>"$WORK/tc.err" ||
  skip "tc tbf unavailable: $(cat "$WORK/tc.err")"

# ---------------------------------------------------------------------------- the daemons
# Not loopback: the aggregator wants tokens there (secure by default). One per node, each good
# for its own node only (--node-tokens-file).
(umask 077
 printf 'e2e-a: %s\ne2e-b: %s\n' "$(openssl rand -hex 32)" "$(openssl rand -hex 32)" >"$WORK/node-tokens.yaml"
 sed -n 's/^e2e-a: //p' "$WORK/node-tokens.yaml" >"$WORK/token-a"
 sed -n 's/^e2e-b: //p' "$WORK/node-tokens.yaml" >"$WORK/token-b")
in_a "$AGGREGATOR" --grpc-listen="$A_ADDR:0" --http-listen=127.0.0.1:0 \
  --node-tokens-file="$WORK/node-tokens.yaml" >"$WORK/aggregator.log" 2>&1 &
PIDS+=($!)
GRPC_PORT= AGG_PORT=
for _ in $(seq 100); do
  read -r GRPC_PORT AGG_PORT < <(sed -n 's/^fabricscope-aggregator listening grpc=[^ ]*:\([0-9]*\) http=[^ ]*:\([0-9]*\)$/\1 \2/p' "$WORK/aggregator.log")
  [ -n "$AGG_PORT" ] && break
  sleep 0.1
done
[ -n "$AGG_PORT" ] || fail "the aggregator did not print its ports"

: >"$WORK/agent.yaml"  # hermetic: no /etc/fabricscope/agent.yaml
in_a "$AGENT" --config="$WORK/agent.yaml" --node=e2e-a --interfaces=va --line-rate="va=$LINE" \
  --capture=va --aggregator="$A_ADDR:$GRPC_PORT" --auth-token-file="$WORK/token-a" \
  --status=off --gpu-socket=off >"$WORK/agent-a.log" 2>&1 &
PIDS+=($!)
in_b "$AGENT" --config="$WORK/agent.yaml" --node=e2e-b --interfaces=vb --line-rate="vb=$LINE" \
  --aggregator="$A_ADDR:$GRPC_PORT" --auth-token-file="$WORK/token-b" --status=off \
  --gpu-socket=off >"$WORK/agent-b.log" 2>&1 &
PIDS+=($!)

# Prometheus: the example config with the test's target, intervals and rules. Each edit must
# apply, so that a change to the example is noticed here.
PROM_PORT=$((20000 + RANDOM % 20000))  # any port: the namespace is new and empty
sed -e 's/^\(\s*\)for: .*/\1for: 3s/' "$SRC/deploy/prometheus/fabricscope.rules.yml" \
  >"$WORK/fabricscope.rules.yml"
sed -e 's/scrape_interval: 15s/scrape_interval: 1s/' \
  -e 's/evaluation_interval: 15s/evaluation_interval: 1s/' \
  -e "s|\"127.0.0.1:9470\"|\"127.0.0.1:$AGG_PORT\"|" \
  -e "s|^  - fabricscope.rules.yml|  - $WORK/fabricscope.rules.yml|" \
  "$SRC/deploy/prometheus/prometheus.yml" >"$WORK/prometheus.yml"
for want in "scrape_interval: 1s" "evaluation_interval: 1s" "127.0.0.1:$AGG_PORT" \
  "$WORK/fabricscope.rules.yml" "job_name: fabricscope"; do
  grep -qF "$want" "$WORK/prometheus.yml" ||
    fail "deploy/prometheus/prometheus.yml changed: cannot set \"$want\" in the test's copy"
done
grep -q 'for: 3s' "$WORK/fabricscope.rules.yml" || fail "no \"for:\" in the rules to shorten"
promtool check config "$WORK/prometheus.yml" >"$WORK/promtool.log" 2>&1 ||
  fail "promtool rejects the test's config: $(cat "$WORK/promtool.log")"
in_a prometheus --config.file="$WORK/prometheus.yml" --storage.tsdb.path="$WORK/tsdb" \
  --web.listen-address="127.0.0.1:$PROM_PORT" --log.level=warn >"$WORK/prometheus.log" 2>&1 &
PIDS+=($!)

api() {  # PATH, then curl -G --data-urlencode arguments
  local path=$1
  shift
  # nsenter switches only the network namespace: cheaper than ip netns exec for ~150 calls.
  nsenter --net="/var/run/netns/$NS_A" curl -sS --max-time 5 -G "http://127.0.0.1:$PROM_PORT$path" "$@"
}
query() { api /api/v1/query --data-urlencode "query=$1"; }
# The single value of an instant query (empty when there is none).
value() { query "$1" | jq -r '.data.result[0].value[1] // empty'; }
wait_for() {  # SECONDS, DESCRIPTION, COMMAND...: polls COMMAND every 0.2 s
  local limit=$1 what=$2
  local deadline=$((SECONDS + limit))
  shift 2
  while [ "$SECONDS" -lt "$deadline" ]; do
    "$@" && return 0
    sleep 0.2
  done
  fail "timed out after $limit s waiting for $what"
}
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a != "" && a + 0 >= b + 0) }'; }
within() { awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v != "" && v + 0 >= lo + 0 && v + 0 <= hi + 0) }'; }

ready() { api /-/ready >/dev/null 2>&1; }
wait_for 30 "Prometheus to be ready" ready
two_nodes() { [ "$(value 'count(fabricscope_agent_info)')" = 2 ]; }
wait_for 30 "Prometheus to scrape both nodes from the aggregator" two_nodes
rules_loaded() { [ "$(api /api/v1/rules | jq '[.data.groups[].rules[]] | length')" -gt 20 ]; }
wait_for 10 "the rules to load" rules_loaded
log "setup: aggregator grpc $GRPC_PORT http $AGG_PORT, prometheus $PROM_PORT, both nodes scraped after $((SECONDS - T_START)) s"

# ---------------------------------------------------------------------------- 1. idle
three_windows() { ge "$(value 'count_over_time(fabricscope_port_utilization_ratio{node="e2e-a",direction="transmit"}[10s])')" 3; }
wait_for 15 "three utilization samples of the idle link" three_windows
idle=$(value 'max_over_time(fabricscope_port_utilization_ratio{node="e2e-a",direction="transmit"}[10s])')
within "$idle" 0 0.02 || fail "idle link: transmit utilization $idle, expected < 0.02"
log "  [ok] idle: e2e-a transmit utilization at most $idle"
loss_alerts() { api /api/v1/alerts | jq -c '[.data.alerts[] | select(.labels.alertname == "FabricscopePacketLoss")]'; }
[ "$(loss_alerts)" = "[]" ] || fail "FabricscopePacketLoss before any loss: $(loss_alerts)"
log "  [ok] idle: no FabricscopePacketLoss alert"

# ---------------------------------------------------------------------------- 2. traffic
in_b "$BURST" receive --listen="$B_ADDR:5301" --timeout=120 >"$WORK/receiver.log" 2>&1 &
PIDS+=($!)
listening() { grep -q '^listening=' "$WORK/receiver.log"; }
wait_for 5 "the receiver to listen" listening
in_a "$BURST" send --connect="$B_ADDR:5301" --bytes=2g --timeout=120 >"$WORK/sender.log" 2>&1 &
SENDER=$!
PIDS+=($SENDER)
T_TRAFFIC=$(date +%s.%N)
busy() { ge "$(value 'fabricscope_port_utilization_ratio{node="e2e-a",direction="transmit"}')" 0.3; }
wait_for 30 "the sender's utilization to rise" busy

# ---------------------------------------------------------------------------- 3. loss
kernel_drops() { in_b cat /sys/class/net/vb/statistics/rx_dropped; }
prom_drops() { value 'fabricscope_port_errors_total{node="e2e-b",kind="rx_dropped"}'; }
k0=$(kernel_drops)
p0=$(prom_drops)
[ -n "$p0" ] || fail "no fabricscope_port_errors_total{kind=\"rx_dropped\"} for e2e-b"
T_LOSS=$(date +%s)
# One datagram per write on a connected UDP socket (bash /dev/udp), 1472 bytes of payload: a
# 1500-byte IP packet, over vb's MTU of 1400. Ten every 0.1 s; the pause is a read timeout on a
# second UDP socket that never receives anything (no process forked per pause).
in_a bash -c 'exec 3>/dev/udp/'"$B_ADDR"'/9 4<>/dev/udp/'"$B_ADDR"'/10 || exit 1
  pad=$(printf "%1472s" "")
  for ((i = 0; i < '"$DATAGRAMS"'; i++)); do
    printf "%s" "$pad" >&3
    if ((i % 10 == 9)); then read -r -t 0.1 -u 4; fi
  done
  exit 0' >"$WORK/udp.log" 2>&1 &
INJECTOR=$!
PIDS+=($INJECTOR)

pending_seen=
firing() {
  local a
  a=$(loss_alerts)
  case "$a" in *'"state":"pending"'*) pending_seen=${pending_seen:-$(($(date +%s) - T_LOSS))} ;; esac
  printf '%s' "$a" | jq -e 'any(.[]; .state == "firing" and .labels.node == "e2e-b")' >/dev/null
}
wait_for 45 "FabricscopePacketLoss to fire for e2e-b" firing
T_FIRING=$(($(date +%s) - T_LOSS))
alerts=$(loss_alerts)
log "  [ok] FabricscopePacketLoss firing $T_FIRING s after the loss started (pending seen by polling after ${pending_seen:-?} s)"
# The pending phase, from Prometheus's own ALERTS series (it may be shorter than a poll).
pending=$(api /api/v1/query_range --data-urlencode 'query=ALERTS{alertname="FabricscopePacketLoss",alertstate="pending",node="e2e-b"}' \
  --data-urlencode "start=$((T_LOSS - 5))" --data-urlencode "end=$(date +%s)" --data-urlencode step=1 |
  jq '[.data.result[].values[]] | length')
ge "$pending" 1 || fail "ALERTS never shows FabricscopePacketLoss pending for e2e-b"
log "  [ok] ALERTS{alertstate=\"pending\"} has $pending samples for e2e-b before it fired"
printf '%s' "$alerts" | jq -e 'all(.[]; .labels.node == "e2e-b" and .labels.device == "vb" and .labels.severity == "critical")' >/dev/null ||
  fail "FabricscopePacketLoss for another port than e2e-b vb: $alerts"
summary=$(printf '%s' "$alerts" | jq -r '.[0].annotations.summary')
case "$summary" in "Packet loss "*" on e2e-b vb:0") ;; *) fail "unexpected summary: $summary" ;; esac
log "  [ok] only e2e-b vb alerts: \"$summary\""

# Utilization while the transfer runs (the loss takes 0.1% of the shaped rate), from the
# agents' gauges and from the byte counters.
six_busy_windows() { ge "$(value 'count_over_time((fabricscope_port_utilization_ratio{node="e2e-b",direction="receive"} > 0.3)[6s:1s])')" 6; }
wait_for 15 "six busy utilization windows at e2e-b" six_busy_windows
check_util() {  # node direction lo hi
  local v
  v=$(value "avg_over_time(fabricscope_port_utilization_ratio{node=\"$1\",direction=\"$2\"}[6s])")
  within "$v" "$3" "$4" || fail "$1 $2 mean utilization $v, expected within [$3, $4]"
  log "  [ok] $1 $2 mean utilization $v within [$3, $4] (expected $EXPECTED_UTIL: $SHAPED shaped over a $LINE line rate; ~0 the other way)"
}
check_util e2e-a transmit 0.35 0.52
check_util e2e-b receive 0.35 0.52
check_util e2e-a receive 0 0.05
check_util e2e-b transmit 0 0.05
# The counter moves once per 1 s window and is scraped every 1 s, so the samples in a range hold
# one window more or less than their span (scrape and window phases drift): over [6s] that is
# 4/5 or 6/5 of the true rate, over [20s] at most 20/19 or 18/19 (0.026 at 0.5). Both figures
# come from the same 20 s, all of it busy.
twenty_busy_windows() { ge "$(value 'count_over_time((fabricscope_port_utilization_ratio{node="e2e-a",direction="transmit"} > 0.3)[20s:1s])')" 20; }
wait_for 30 "twenty busy utilization windows at e2e-a" twenty_busy_windows
by_counter=$(value 'rate(fabricscope_port_transmit_bytes_total{node="e2e-a"}[20s]) / on (node, device, port) fabricscope_port_line_rate_bytes_per_second')
by_gauge=$(value 'avg_over_time(fabricscope_port_utilization_ratio{node="e2e-a",direction="transmit"}[20s])')
awk -v a="$by_counter" -v b="$by_gauge" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 0.05) }' ||
  fail "utilization from the byte counter ($by_counter) and the agent's gauge ($by_gauge) differ by more than 0.05"
log "  [ok] e2e-a transmit utilization from the byte counter $by_counter, from the gauge $by_gauge"

# Every datagram was dropped at vb and counted once, by the kernel and through to Prometheus.
wait "$INJECTOR" || fail "the UDP injector failed: $(cat "$WORK/udp.log")"
k1=$(kernel_drops)
all_counted() { [ "$(awk -v a="$(prom_drops)" -v b="$p0" 'BEGIN { print a - b }')" = "$((k1 - k0))" ]; }
wait_for 10 "Prometheus to hold the kernel's rx_dropped increase ($((k1 - k0)))" all_counted
[ "$((k1 - k0))" -eq "$DATAGRAMS" ] || fail "the kernel dropped $((k1 - k0)) packets at vb, sent $DATAGRAMS"
log "  [ok] rx_dropped at e2e-b vb: $DATAGRAMS datagrams sent = $((k1 - k0)) in the kernel = $(awk -v a="$(prom_drops)" -v b="$p0" 'BEGIN { print a - b }') in Prometheus"
ratio=$(value 'fabricscope:port_loss_ratio:rate5m{node="e2e-b"}')
log "  loss ratio at e2e-b vb (recording rule, since the start): $ratio"

# ---------------------------------------------------------------------------- 4. every expression
# Expressions allowed to return nothing here, and why:
#  - alerts other than FabricscopePacketLoss: nothing is wrong on this link (an alert in
#    HOST_ALERTS may fire on a busy test machine, and is reported, not failed);
#  - pending metrics (tests/monitoring/pending_metrics.txt) and the training metrics: no NCCL
#    job runs here;
#  - RDMA- and NIC-hardware metrics (table): a veth has no hw_counters, no PFC, no PHY
#    counters and no speed; capture kinds that only appear once such an event was seen.
#    Each applies only while the metric has no series at all in Prometheus.
declare -A NO_DATA=(
  [fabricscope_port_out_of_sequence_packets_total]="RDMA hw_counters (out_of_sequence): no RDMA device on a veth"
  [fabricscope_port_retransmits_total]="RDMA hw_counters (packet_seq_err, ...): no RDMA device on a veth"
  [fabricscope_port_hw_events_total]="RDMA hw_counters: no RDMA device on a veth"
  [fabricscope_port_cnp_sent_total]="RDMA hw_counters (np_cnp_sent): no RDMA device on a veth"
  [fabricscope_port_cnp_handled_total]="RDMA hw_counters (rp_cnp_handled): no RDMA device on a veth"
  [fabricscope_port_ecn_marked_packets_total]="RDMA hw_counters (np_ecn_marked_roce_packets): no RDMA device on a veth"
  [fabricscope_port_pause_seconds_total]="PFC counters (ethtool prio pause): a veth has none"
  [fabricscope_port_discards_total]="mlx5 discard counters: a veth has none"
  [fabricscope_port_transmit_wait_seconds_total]="PortXmitWait (InfiniBand counters/port_xmit_wait): a veth has none"
  [fabricscope_port_ethtool_stat_total]="NIC ethtool statistics (PHY, pause storm): a veth has none"
  [fabricscope_port_current_rate_bytes_per_second]="a veth reports no speed (-1)"
  [fabricscope_port_errors_saturated]="only while a counter is stuck at its maximum"
  [fabricscope_flow_naks_total]="RoCE NAKs: the captured traffic is TCP"
  [fabricscope_flow_lost_packets_total]="present once the capture saw a gap or reordering"
  [fabricscope_flow_retransmits_total]="present once the capture saw a retransmission"
  [fabricscope_collective_duration_seconds_bucket]="no NCCL job runs here"
  [fabricscope_collective_duration_seconds_count]="no NCCL job runs here"
  [fabricscope_collective_duration_seconds_sum]="no NCCL job runs here"
  [fabricscope_collective_network_share_ratio]="no NCCL job runs here"
  [fabricscope_straggler_score]="no NCCL job runs here"
  [fabricscope_diagnosis_info]="no NCCL job runs here"
  [fabricscope_diagnosis_cost_ratio]="no NCCL job runs here"
  [fabricscope_plugin_dropped_events_total]="no NCCL/CUPTI plugin runs here"
  [fabricscope_collective_bus_bandwidth_bytes_per_second]="no NCCL job runs here"
  [fabricscope_collective_bus_bytes_total]="no NCCL job runs here"
  [fabricscope_collectives_total]="no NCCL job runs here"
  [fabricscope_rank_pair_bytes_total]="no NCCL job runs here"
  [fabricscope_collectives_by_cause_total]="no NCCL job runs here"
  [fabricscope_collective_arrival_skew_seconds_bucket]="no NCCL job runs here"
  [fabricscope_port_microburst_overlap_ratio]="no NCCL job runs here"
  [fabricscope_job_info]="no NCCL job runs here, so no agent names a job"
  [fabricscope_traffic_local_ratio]="no NCCL job runs here and no leaf is known (no lldpd, no topology file)"
  [fabricscope_leaf_uplink_demand_ratio]="no leaf with a capacity: no topology file here"
)
HOST_ALERTS=" FabricscopeSamplerOverruns FabricscopeTelemetryDropped FabricscopeCaptureDrops "
PENDING=" $(sed -e 's/#.*//' "$SRC/tests/monitoring/pending_metrics.txt" | awk 'NF { print $1, $1 "_bucket", $1 "_sum", $1 "_count" }' | tr '\n' ' ') "
"$EXPRS" "$SRC" --rate-interval=4s >"$WORK/expressions.tsv" || fail "fabricscope-monitoring-exprs failed"
# All queries in one curl run (one response file each), then one jq over the files.
mkdir -p "$WORK/q"
args=()
i=0
while IFS=$'\t' read -r kind id metrics expr; do
  [ "$i" -gt 0 ] && args+=(--next)
  args+=(-sS --max-time 10 -G "http://127.0.0.1:$PROM_PORT/api/v1/query" --data-urlencode "query=$expr" -o "$WORK/q/$i.json")
  i=$((i + 1))
done <"$WORK/expressions.tsv"
nsenter --net="/var/run/netns/$NS_A" curl "${args[@]}" || fail "querying the expressions failed"
files=()
for ((j = 0; j < i; j++)); do files+=("$WORK/q/$j.json"); done
mapfile -t COUNTS < <(jq -r 'if .status != "success" then "error: " + (.error | gsub("\n"; " "))
                             elif .data.resultType == "scalar" then 1 else (.data.result | length) end' "${files[@]}")
[ "${#COUNTS[@]}" -eq "$i" ] || fail "expected $i query results, read ${#COUNTS[@]}"
total=0 with_data=0 allowed=0 bad=0
declare -A SERIES_CACHE=()
has_series() {
  if [ -z "${SERIES_CACHE[$1]:-}" ]; then
    SERIES_CACHE[$1]=$(value "count({__name__=\"$1\"})")
    SERIES_CACHE[$1]=${SERIES_CACHE[$1]:-0}
  fi
  [ "${SERIES_CACHE[$1]}" != 0 ]
}
while IFS=$'\t' read -r kind id metrics expr; do
  n=${COUNTS[$total]}
  total=$((total + 1))
  case "$n" in error*) log "  [FAIL] $id: Prometheus rejects it: $n"; bad=$((bad + 1)); continue ;; esac
  name=${id##*:}
  if [ "$n" -gt 0 ]; then
    with_data=$((with_data + 1))
    if [ "$kind" = alert ] && [ "$name" != FabricscopePacketLoss ]; then
      case "$HOST_ALERTS" in
        *" $name "*) log "  [note] $name fires here (the test machine is busy): $n series" ;;
        *) log "  [FAIL] $name fires without a fault: $(jq -c '.data.result[0].metric' "$WORK/q/$((total - 1)).json")"; bad=$((bad + 1)) ;;
      esac
    fi
    continue
  fi
  reason=
  if [ "$kind" = alert ]; then
    [ "$name" = FabricscopePacketLoss ] || reason="alert: no such fault here"
  fi
  if [ -z "$reason" ]; then
    for m in ${metrics//,/ }; do
      case "$PENDING" in *" $m "*) reason="pending metric $m"; break ;; esac
      if [ -n "${NO_DATA[$m]:-}" ] && ! has_series "$m"; then reason="$m: ${NO_DATA[$m]}"; break; fi
    done
  fi
  if [ -z "$reason" ] && [[ "$expr" == *rx_corrected_bits_phy* ]]; then
    reason="PHY bit counters (rx_corrected_bits_phy): a veth has none"
  fi
  if [ -n "$reason" ]; then
    allowed=$((allowed + 1))
    log "  [no data, expected] $id: $reason"
  else
    bad=$((bad + 1))
    log "  [FAIL] $id returns no data: $expr"
  fi
done <"$WORK/expressions.tsv"
log "expressions: $total, $with_data with data, $allowed without data for a listed reason, $bad failing"
[ "$total" -gt 60 ] || fail "only $total expressions listed"
[ "$bad" -eq 0 ] || fail "$bad expressions failed (above)"

kill -TERM "$SENDER" 2>/dev/null
log "PASS: Prometheus end to end ($((SECONDS - T_START)) s)"
exit 0
