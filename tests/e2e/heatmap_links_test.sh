#!/usr/bin/env bash
# Real traffic into the link heat map: two network namespaces joined by a veth pair shaped with
# tc tbf to 1 Gbit/s, fabricscope-agent (standalone) sampling the sender's veth at 1 ms, one TCP
# burst of a known size (tests/tools fabricscope-burst). Then:
#   * /heatmap/links?format=json shows the burst in the right link (the veth's transmit row) and
#     the right time cells: the cells at >= 0.7 of line rate lie within the transfer's wall-clock
#     interval (+- 2 buckets) and add up to at least half of wire/rate (the shaper's pace); the
#     receive row stays below 0.2 there (ACKs only);
#   * the SVG (/heatmap/links, /heatmap/nodes) is well-formed XML (xmllint) with a title, axes
#     and a legend; the links SVG fits a 1,400 px window and its full-resolution link answers
#     one at every column; /heatmap lists both maps.
# Usage: heatmap_links_test.sh AGENT_BINARY BURST_TOOL_BINARY
# Needs root; exits 77 (skip) without it or without namespaces/veth/tbf. 0 = pass, 1 = fail
# (logs and responses are kept in the work directory).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

AGENT=${1:-}
BURST=${2:-}
RATE_SPEC=1gbit
RATE_BPS=125000000
BURST_BYTES=${FABRICSCOPE_E2E_BYTES:-8388608}
TX_ADDR=10.214.0.1
RX_ADDR=10.214.0.2
NODE=e2e-heatmap

log() { printf '%s\n' "$*"; }
skip() { log "SKIP: $*"; exit 77; }
die() { log "FAIL: $*"; FAILED=1; exit 1; }

[ -n "$AGENT" ] && [ -n "$BURST" ] || { log "usage: $0 AGENT BURST_TOOL"; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces, veth and tc (uid $(id -u))"
command -v ip >/dev/null || skip "ip (iproute2) not installed"
for tool in tc curl jq awk xmllint; do
  command -v "$tool" >/dev/null || { log "FAIL: $tool not installed (deploy/install-deps.sh)"; exit 1; }
done

NS_TX=fabricscope-hm-$$-tx
NS_RX=fabricscope-hm-$$-rx
V_TX=fsh$$tx
V_RX=fsh$$rx
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fabricscope-heatmap.XXXXXX") || exit 1
PIDS=()
FAILED=0
cleanup() {
  stop_pids "${PIDS[@]}"
  delete_netns "$NS_TX" "$NS_RX"
  if [ "$FAILED" -eq 0 ]; then rm -rf "$WORK"; else log "logs kept in $WORK"; fi
}
trap cleanup EXIT
trap 'FAILED=1; exit 130' INT TERM
in_tx() { ip netns exec "$NS_TX" "$@"; }
in_rx() { ip netns exec "$NS_RX" "$@"; }

ip netns add "$NS_TX" 2>"$WORK/err" || skip "network namespaces unavailable: $(cat "$WORK/err")"
ip netns add "$NS_RX" 2>"$WORK/err" || skip "network namespaces unavailable: $(cat "$WORK/err")"
ip link add "$V_TX" netns "$NS_TX" type veth peer name "$V_RX" netns "$NS_RX" 2>"$WORK/err" ||
  skip "cannot create a veth pair: $(cat "$WORK/err")"
for ns in "$NS_TX" "$NS_RX"; do
  ip netns exec "$ns" sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 \
    net.ipv6.conf.default.disable_ipv6=1 >/dev/null 2>&1
  ip -n "$ns" link set lo up
done
ip -n "$NS_TX" addr add "$TX_ADDR/30" dev "$V_TX" || die "cannot address $V_TX"
ip -n "$NS_RX" addr add "$RX_ADDR/30" dev "$V_RX" || die "cannot address $V_RX"
ip -n "$NS_TX" link set dev "$V_TX" mtu 9000
ip -n "$NS_RX" link set dev "$V_RX" mtu 9000
ip -n "$NS_TX" link set "$V_TX" up
ip -n "$NS_RX" link set "$V_RX" up
in_tx tc qdisc add dev "$V_TX" root tbf rate "$RATE_SPEC" burst 64kb latency 100ms \
  2>"$WORK/err" || skip "tc tbf unavailable: $(cat "$WORK/err")"
in_tx sysctl -q -w net.ipv4.tcp_wmem="4096 16777216 33554432" \
  net.ipv4.tcp_limit_output_bytes=33554432 >/dev/null 2>&1
in_rx sysctl -q -w net.ipv4.tcp_rmem="4096 16777216 33554432" >/dev/null 2>&1

: >"$WORK/agent.yaml"
in_tx "$AGENT" --config="$WORK/agent.yaml" --node="$NODE" --interfaces="$V_TX" \
  --line-rate="$V_TX=$RATE_SPEC" --sample-period=1ms --http-listen=127.0.0.1:0 --status=off \
  --gpu-socket=off \
  >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
PIDS+=("$AGENT_PID")
PORT=
for _ in $(seq 200); do
  PORT=$(sed -n 's|^fabricscope-agent standalone: serving http://127\.0\.0\.1:\([0-9]*\)/metrics$|\1|p' "$WORK/agent.log")
  [ -n "$PORT" ] && break
  kill -0 "$AGENT_PID" 2>/dev/null || break
  sleep 0.05
done
[ -n "$PORT" ] || { cat "$WORK/agent.log"; die "agent did not start"; }
http() { in_tx curl -sS --max-time 5 "http://127.0.0.1:$PORT$1"; }

# Wait until the heat map has the link (the first window closed).
for _ in $(seq 60); do
  http '/heatmap/links?format=json&seconds=2' >"$WORK/first.json" 2>/dev/null &&
    [ "$(jq '.rows | length' "$WORK/first.json" 2>/dev/null)" -ge 1 ] 2>/dev/null && break
  sleep 0.1
done

in_rx "$BURST" receive --listen="$RX_ADDR:5301" --timeout=15 >"$WORK/rx.out" 2>&1 &
RX_PID=$!
PIDS+=("$RX_PID")
for _ in $(seq 100); do grep -q '^listening=' "$WORK/rx.out" && break; sleep 0.05; done
T0=$(date +%s.%N)
in_tx "$BURST" send --connect="$RX_ADDR:5301" --bytes="$BURST_BYTES" --timeout=10 \
  >"$WORK/tx.out" 2>&1 || { cat "$WORK/tx.out" "$WORK/rx.out"; die "traffic failed"; }
T1=$(date +%s.%N)
wait "$RX_PID"

# The burst's window closes at the next whole second; wait for a series past T1.
ok=0
for _ in $(seq 60); do
  http "/heatmap/links?format=json&seconds=4" >"$WORK/links.json" 2>/dev/null || true
  end=$(jq -r '.start_unix_seconds + (.bucket_seconds * (.values[0] | length))' "$WORK/links.json" 2>/dev/null)
  last=$(jq -r '[.values[0] | to_entries[] | select(.value != null) | .key] | max' "$WORK/links.json" 2>/dev/null)
  if [ -n "$last" ] && [ "$last" != null ] &&
    awk -v s="$(jq -r .start_unix_seconds "$WORK/links.json")" -v b="$(jq -r .bucket_seconds "$WORK/links.json")" \
      -v l="$last" -v t="$T1" 'BEGIN { exit !(s + (l + 1) * b > t + 0.05) }'; then
    ok=1
    break
  fi
  sleep 0.2
done
[ "$ok" = 1 ] || { cat "$WORK/agent.log"; die "no heat-map data past the burst's end (${end:-none})"; }

TX_ROW="$NODE/$V_TX:0 tx"
RX_ROW="$NODE/$V_TX:0 rx"
jq -e --arg r "$TX_ROW" '.rows | index($r) != null' "$WORK/links.json" >/dev/null ||
  die "row \"$TX_ROW\" missing: $(jq -c .rows "$WORK/links.json")"
# Hot cells (>= 0.7) of the transmit row: count and time range; the receive row's max there.
read -r HOT FIRST LAST RXMAX < <(jq -r --arg tx "$TX_ROW" --arg rx "$RX_ROW" '
  (.rows | index($tx)) as $t | (.rows | index($rx)) as $r |
  [.values[$t] | to_entries[] | select(.value != null and .value >= 0.7) | .key] as $hot |
  [($hot | length), ($hot | min // -1), ($hot | max // -1),
   ([.values[$r][$hot[]] | select(. != null)] | max // 0)] | @tsv' "$WORK/links.json")
START=$(jq -r .start_unix_seconds "$WORK/links.json")
BUCKET=$(jq -r .bucket_seconds "$WORK/links.json")
EXPECT_MS=$(awk -v b="$BURST_BYTES" -v r="$RATE_BPS" 'BEGIN { printf "%.1f", b / r * 1000 }')
log "burst: $BURST_BYTES bytes, $T0 .. $T1; expected ~$EXPECT_MS ms at line rate"
log "heat map: $HOT hot 1 ms cells in $TX_ROW, buckets $FIRST..$LAST, receive max $RXMAX"
[ "$HOT" -ge 1 ] || die "no hot cell in $TX_ROW"
awk -v h="$HOT" -v e="$EXPECT_MS" 'BEGIN { exit !(h >= 0.5 * e && h <= 1.5 * e + 5) }' ||
  die "hot cells $HOT not within [0.5, 1.5] x $EXPECT_MS ms"
awk -v s="$START" -v b="$BUCKET" -v f="$FIRST" -v l="$LAST" -v t0="$T0" -v t1="$T1" \
  'BEGIN { exit !(s + f * b >= t0 - 2 * b && s + (l + 1) * b <= t1 + 2 * b) }' ||
  die "hot cells [$FIRST, $LAST] are not within the transfer $T0 .. $T1"
awk -v m="$RXMAX" 'BEGIN { exit !(m < 0.2) }' || die "receive row reached $RXMAX during the burst"

http '/heatmap/links?seconds=4' >"$WORK/links.svg" || die "GET /heatmap/links (SVG) failed"
xmllint --noout "$WORK/links.svg" 2>"$WORK/xmllint.err" ||
  die "links SVG is not well-formed: $(cat "$WORK/xmllint.err")"
for xp in '//*[local-name()="title"]' '//*[@id="x-axis"]' '//*[@id="y-label"]' \
  '//*[@id="legend"]' '//*[@id="cells"]/*[local-name()="rect"]'; do
  [ "$(xmllint --xpath "count($xp)" "$WORK/links.svg")" -ge 1 ] || die "SVG lacks $xp"
done
grep -qF "$V_TX:0 tx" "$WORK/links.svg" || die "SVG does not name the link"
# 4 s at the agent's 1 ms buckets are 4,000 columns: the SVG fits a browser window (columns
# merged by their maximum) and links to the full resolution, which keeps every column.
WIDTH=$(xmllint --xpath 'string(/*/@width)' "$WORK/links.svg")
[ "$WIDTH" -le 1400 ] || die "links SVG is $WIDTH px wide, more than a 1,400 px window"
FULL=$(xmllint --xpath 'string(//*[@id="full-resolution"]/@*[local-name()="href"])' \
  "$WORK/links.svg")
case "$FULL" in /heatmap/links\?*full=1*) ;; *) die "no full-resolution link (got '$FULL')" ;; esac
http "$FULL" >"$WORK/full.svg" || die "GET $FULL failed"
FULL_WIDTH=$(xmllint --xpath 'string(/*/@width)' "$WORK/full.svg")
[ "$FULL_WIDTH" -ge 4000 ] || die "the full-resolution SVG is only $FULL_WIDTH px wide"
# The hottest color (viridis 1.0) appears in the SVG.
grep -qi 'fill="#fde725"\|fill="#f[0-9a-f]e[0-9a-f][0-9a-f][0-9a-f]"' "$WORK/links.svg" ||
  log "note: no cell at the top of the scale (peak below 1.0)"
http '/heatmap/nodes' >"$WORK/nodes.svg" || die "GET /heatmap/nodes failed"
xmllint --noout "$WORK/nodes.svg" || die "nodes SVG is not well-formed"
http '/heatmap' >"$WORK/index.html" || die "GET /heatmap failed"
grep -q '/heatmap/links' "$WORK/index.html" && grep -q '/heatmap/nodes' "$WORK/index.html" ||
  die "the index does not list both heat maps"
# Into a file first: with pipefail, grep -q leaving at its first match would fail curl's write
# (curl: (23)) whenever the line comes early in the body.
http '/metrics' >"$WORK/metrics.txt" || die "GET /metrics failed"
grep -q '^fabricscope_flight_recorder_bytes{node="'"$NODE"'"}' "$WORK/metrics.txt" ||
  die "fabricscope_flight_recorder_bytes missing"
log "PASS"
