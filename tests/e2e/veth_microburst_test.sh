#!/usr/bin/env bash
# Real traffic, end to end: two network namespaces joined by a veth pair, the sender's end shaped
# with tc tbf to a known rate, fabricscope-agent watching that veth at 1 ms and at 100 us, and
# one burst of a known size sent over a real TCP connection (tests/tools fabricscope-burst).
# The agent must report the burst with the bytes and duration the shaper allows, and nothing
# while the link is idle. The namespaces are deleted and every process started is stopped on
# any exit.
#
# Usage: veth_microburst_test.sh AGENT_BINARY BURST_TOOL_BINARY
# Needs root (namespaces, tc). Exits 77 (ctest SKIP_RETURN_CODE) when not root or when network
# namespaces / veth / tbf are unavailable; 0 on success; 1 on failure, after printing the agent's
# log, its JSON and metrics and the qdisc statistics (logs stay in the work directory).
#
# Knobs (environment):
#   FABRICSCOPE_E2E_PERIODS         sampling periods to test (default "1ms 100us")
#   FABRICSCOPE_E2E_STRICT_PERIODS  periods checked in strict mode (default "1ms"); the others
#                                   are checked in coverage mode (see below)
#   FABRICSCOPE_E2E_ATTEMPTS        bursts tried per period before the case fails (default 6)
#   FABRICSCOPE_E2E_BYTES           burst payload in bytes (default 4194304)
#   FABRICSCOPE_E2E_MTU             veth MTU for every case (default: 9000 at >= 1 ms, else 1500)
#   FABRICSCOPE_E2E_COVERAGE_MIN    coverage mode: least share of the wire bytes that must lie
#                                   in reported bursts (default 0.6)
#   FABRICSCOPE_E2E_AGENT_FLAGS     extra agent flags, e.g. --burst-exit=0.5 (default none)
#   FABRICSCOPE_E2E_KEEP            1 = keep the work directory (logs) even on success
#
# Expected figures (all printed on every run, measured next to expected):
#   * The shaper (tbf rate 1gbit) and the agent's --line-rate are the same 1 Gbit/s
#     (125,000,000 B/s). tbf charges whole frames (Ethernet header included, no FCS/preamble)
#     and the veth's tx_bytes, which the agent samples, counts the same frames. GSO is off on
#     the veth (gso_max_segs 1), so every TCP segment is one frame with its own headers, and the
#     data phase puts on the wire
#         wire = tcp_bytes_sent + data_segs_out x (14 Ethernet + 20 IPv4 + 20 TCP [+ 12 TS])
#     with both counts from the sender's TCP_INFO (retransmissions included). Expected duration
#     = wire / rate. The agent's transmit byte counter must grow by wire (+ <1% for the SYN,
#     FIN and ACK frames).
#   * Frames: at 1 ms the veth runs MTU 9000 (tbf burst 64kb): 14 frames per sample, and a sixth
#     of the per-frame timer and softirq work of 1500-byte frames, which on a busy VM is what
#     starves the shaper. At 100 us it runs MTU 1500 (tbf burst 16kb): 8 frames per sample.
#   * Strict mode (1 ms): exactly one transmit microburst, and
#         wire - 2 x period x rate - 2% x wire  <=  bytes  <=  wire + 1%
#         |duration - wire/rate|  <=  2 x period + 10% x wire/rate
#     The "2 x period" terms are the burst's edges: its first and last samples are partial and
#     are counted whole or not at all depending on where the edge falls (on average the burst
#     comes out ~0.8 sample short). The 2% / 10% terms are the host's share: on a busy VM the
#     shaper or the sampler runs late now and then (a late tick makes one long sample).
#     Measured on a 2-vCPU VM: bytes -0.2% to -3.6%, duration -0.3 to -1.2 ms of 33.8 ms.
#   * Coverage mode (100 us): on a VM the tbf-shaped link is not smooth at 100 us. The shaper
#     releases a frame every 12 us from a timer, and timer and softirq latency of a few tens of
#     microseconds, followed by catch-up from the 16 KB bucket, leave single 100 us samples at
#     0-60% of the rate several times per millisecond (an independent 100 us sampler of the same
#     counter sees the same: a 35 ms transfer splits into 50-90 bursts at the 0.7 exit
#     threshold, and even a UDP flood through tbf gives ~8% of samples below 0.7). The agent
#     rightly reports many short bursts then, so the test checks that they account for the
#     transfer instead: at least one transmit burst; all of them within the transfer; their
#     bytes between COVERAGE_MIN x wire and wire + 1% (measured: 89-93%); first start to last
#     end within 2 x period + 10% of wire/rate. On hardware with a smooth 100 us link, set
#     FABRICSCOPE_E2E_STRICT_PERIODS="1ms 100us".
#   * Both modes: the first burst starts within the duration tolerance of the first byte (a
#     stalled sampler tick can open it a few ms early); no receive-direction burst (the ACKs
#     are ~2% of the rate); fabricscope_microbursts_total{direction="transmit"} grows by exactly
#     the number of bursts listed; and, before any traffic, >= 1 s of idle link gives no burst.
#   * An attempt that fails is retried with a fresh burst, up to FABRICSCOPE_E2E_ATTEMPTS: a
#     busy host can starve the shaper for long enough to split a burst even at 1 ms (measured:
#     1 first attempt in 8 at load 2 on 2 vCPUs; a CI run on 2026-12-03 failed 3 in a row at
#     load 1.7-2.0, each split into 3-6 bursts while the sender stalled, hence 6 attempts).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

AGENT=${1:-}
BURST=${2:-}
PERIODS=${FABRICSCOPE_E2E_PERIODS:-1ms 100us}
ATTEMPTS=${FABRICSCOPE_E2E_ATTEMPTS:-6}
STRICT_PERIODS=${FABRICSCOPE_E2E_STRICT_PERIODS:-1ms}
COVERAGE_MIN=${FABRICSCOPE_E2E_COVERAGE_MIN:-0.6}
KEEP=${FABRICSCOPE_E2E_KEEP:-0}

RATE_SPEC=1gbit
RATE_BPS=125000000    # bytes/s: 1 Gbit/s
BURST_BYTES=${FABRICSCOPE_E2E_BYTES:-4194304}
HDR_BYTES=54          # per data frame: Ethernet 14 + IPv4 20 + TCP 20 (+ 12 with timestamps)
TX_ADDR=10.213.0.1    # private /30, only on the veth ends inside our namespaces: no route out
RX_ADDR=10.213.0.2
NODE=e2e-veth

log() { printf '%s\n' "$*"; }
skip() {
  log "SKIP: $*"
  exit 77
}
die() {
  log "FAIL: $*"
  exit 1
}

[ -n "$AGENT" ] && [ -n "$BURST" ] || die "usage: $0 AGENT_BINARY BURST_TOOL_BINARY"
[ -x "$AGENT" ] || die "agent binary $AGENT is not executable"
[ -x "$BURST" ] || die "burst tool $BURST is not executable"
[ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces, veth and tc (uid $(id -u))"
command -v ip >/dev/null || skip "ip (iproute2) not installed: cannot create network namespaces"
for tool in tc curl jq awk; do
  command -v "$tool" >/dev/null || die "$tool not installed (deploy/install-deps.sh installs it)"
done
case "$ATTEMPTS" in '' | *[!0-9]* | 0) die "FABRICSCOPE_E2E_ATTEMPTS must be a positive count" ;; esac

# Unique names: the pid keeps concurrent runs apart. Interface names stay under 16 characters.
NS_TX=fabricscope-e2e-$$-tx
NS_RX=fabricscope-e2e-$$-rx
V_TX=fse$$tx
V_RX=fse$$rx
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fabricscope-e2e.XXXXXX") || die "mktemp failed"
PIDS=()
FAILED=0

cleanup() {
  stop_pids "${PIDS[@]}"
  delete_netns "$NS_TX" "$NS_RX"
  if [ "$FAILED" -eq 0 ] && [ "$KEEP" != 1 ]; then
    rm -rf "$WORK"
  else
    log "logs kept in $WORK"
  fi
}
trap cleanup EXIT
trap 'FAILED=1; log "interrupted"; exit 130' INT TERM

in_tx() { ip netns exec "$NS_TX" "$@"; }
in_rx() { ip netns exec "$NS_RX" "$@"; }

# ---------------------------------------------------------------------------------------------
# The link: NS_TX [V_TX 10.213.0.1/30] <== veth ==> [V_RX 10.213.0.2/30] NS_RX
ip netns add "$NS_TX" 2>"$WORK/netns.err" ||
  skip "network namespaces unavailable: $(cat "$WORK/netns.err")"
ip netns add "$NS_RX" 2>"$WORK/netns.err" ||
  skip "network namespaces unavailable: $(cat "$WORK/netns.err")"
ip link add "$V_TX" netns "$NS_TX" type veth peer name "$V_RX" netns "$NS_RX" 2>"$WORK/veth.err" ||
  skip "cannot create a veth pair: $(cat "$WORK/veth.err")"
for ns in "$NS_TX" "$NS_RX"; do
  # No IPv6 on these links: no router solicitations or DAD packets while "idle".
  ip netns exec "$ns" sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 \
    net.ipv6.conf.default.disable_ipv6=1 >/dev/null 2>&1
  ip -n "$ns" link set lo up || die "cannot bring up lo in $ns"
done
ip -n "$NS_TX" addr add "$TX_ADDR/30" dev "$V_TX" || die "cannot address $V_TX"
ip -n "$NS_RX" addr add "$RX_ADDR/30" dev "$V_RX" || die "cannot address $V_RX"
# One frame per TCP segment (see the header): the veth counts skb lengths, not segments.
ip -n "$NS_TX" link set dev "$V_TX" gso_max_segs 1 2>/dev/null ||
  log "note: cannot set gso_max_segs on $V_TX; small GSO packets will count one header for several segments"
ip -n "$NS_TX" link set "$V_TX" up || die "cannot bring up $V_TX"
ip -n "$NS_RX" link set "$V_RX" up || die "cannot bring up $V_RX"
in_tx tc qdisc add dev "$V_TX" root tbf rate "$RATE_SPEC" burst 16kb latency 100ms \
  2>"$WORK/tc.err" || skip "tc tbf unavailable: $(cat "$WORK/tc.err")"
# Let the whole burst reach the shaper at once, so that the shaper alone sets the pace and a
# late ACK on a busy host cannot leave it idle: a large initial congestion and receive window,
# socket buffers and TCP small-queue limit larger than the burst. These sysctls are per
# namespace; nothing outside the test's namespaces changes.
in_tx sysctl -q -w net.ipv4.tcp_wmem="4096 16777216 33554432" \
  net.ipv4.tcp_limit_output_bytes=33554432 >/dev/null 2>&1 ||
  log "note: cannot raise TCP send limits in $NS_TX"
in_rx sysctl -q -w net.ipv4.tcp_rmem="4096 16777216 33554432" >/dev/null 2>&1 ||
  log "note: cannot raise TCP receive buffer in $NS_RX"
ip -n "$NS_TX" route replace "${TX_ADDR%.*}.0/30" dev "$V_TX" src "$TX_ADDR" \
  initcwnd 4000 initrwnd 4000 2>/dev/null || log "note: cannot set initcwnd on $V_TX"
ip -n "$NS_RX" route replace "${RX_ADDR%.*}.0/30" dev "$V_RX" src "$RX_ADDR" \
  initcwnd 4000 initrwnd 4000 2>/dev/null || log "note: cannot set initrwnd on $V_RX"
CONGESTION=
if grep -qw cubic /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null; then
  # A loss-based sender keeps the shaper's queue full; a model-based one (bbr, often the
  # default) paces itself near the bottleneck rate and lets the queue run dry between probes.
  CONGESTION=--congestion=cubic
fi
log "link: $NS_TX/$V_TX $TX_ADDR -> $NS_RX/$V_RX $RX_ADDR, tbf rate $RATE_SPEC" \
  "($(uname -r), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg))"

# ---------------------------------------------------------------------------------------------
AGENT_PID=
PORT=

http() { in_tx curl -sS --max-time 3 "http://127.0.0.1:$PORT$1"; }

# Value of one sample of /metrics: metric name, then a grep -F filter on the label set.
metric() {
  http /metrics 2>/dev/null | awk -v name="$1" -v want="$2" \
    'index($0, name "{") == 1 && index($0, want) { v = $NF } END { if (v != "") print v }'
}

start_agent() {  # period, log file
  : >"$WORK/agent.yaml"  # hermetic: no /etc/fabricscope/agent.yaml
  ip netns exec "$NS_TX" "$AGENT" --config="$WORK/agent.yaml" --node="$NODE" \
    --interfaces="$V_TX" --line-rate="$V_TX=$RATE_SPEC" --sample-period="$1" \
    --http-listen=127.0.0.1:0 --status=off --gpu-socket=off ${FABRICSCOPE_E2E_AGENT_FLAGS:-} >"$2" 2>&1 &
  AGENT_PID=$!
  PIDS+=("$AGENT_PID")
  PORT=
  for _ in $(seq 200); do  # up to 10 s
    PORT=$(sed -n 's|^fabricscope-agent standalone: serving http://127\.0\.0\.1:\([0-9]*\)/metrics$|\1|p' "$2")
    [ -n "$PORT" ] && return 0
    kill -0 "$AGENT_PID" 2>/dev/null || break
    sleep 0.05
  done
  return 1
}

stop_agent() {  # returns the agent's exit status (or 1 if it had to be killed)
  local rc=1
  kill -TERM "$AGENT_PID" 2>/dev/null
  for _ in $(seq 100); do  # up to 10 s; the agent flushes within ~2 s
    if ! kill -0 "$AGENT_PID" 2>/dev/null; then
      wait "$AGENT_PID"
      rc=$?
      break
    fi
    sleep 0.1
  done
  if kill -0 "$AGENT_PID" 2>/dev/null; then
    log "agent did not stop within 10 s of SIGTERM; killing it"
    kill -KILL "$AGENT_PID" 2>/dev/null
    wait "$AGENT_PID" 2>/dev/null
  fi
  return "$rc"
}

# Waits until the agent has published a window that ends after unix time $1 (bounded).
wait_window_after() {
  local deadline=$((SECONDS + 6)) ts
  while [ "$SECONDS" -lt "$deadline" ]; do
    ts=$(metric fabricscope_agent_last_batch_timestamp_seconds "node=\"$NODE\"")
    if [ -n "$ts" ] && awk -v a="$ts" -v b="$1" 'BEGIN { exit !(a > b) }'; then return 0; fi
    kill -0 "$AGENT_PID" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

dump_case() {  # everything useful about a failed case
  local agent_log=$1
  log "---- agent log ($agent_log) ----"
  cat "$agent_log"
  if [ -n "$PORT" ] && kill -0 "$AGENT_PID" 2>/dev/null; then
    log "---- /api/microbursts ----"
    http /api/microbursts
    echo
    log "---- /metrics (fabricscope_port_*, microbursts, agent) ----"
    http /metrics | grep -E '^fabricscope_(port_(transmit|receive)_bytes|port_(peak_)?utilization|microbursts_total|agent_(sampler|ring|last))'
  fi
  log "---- tc -s qdisc dev $V_TX ----"
  in_tx tc -s qdisc show dev "$V_TX"
  log "---- ip -s link ($NS_TX) ----"
  ip -n "$NS_TX" -s link show dev "$V_TX"
}

# One burst through a running agent; prints measured vs expected; returns 0 when every check of
# the mode passes. Modes: strict (exactly one burst matching the transfer) or coverage (see the
# header: the bursts reported during the transfer account for it).
run_burst() {  # period_seconds, attempt, label, mode
  local period_s=$1 attempt=$2 label=$3 mode=$4
  local port=$((5200 + attempt)) rx_out="$WORK/$label.receiver.$attempt"
  local tx_out="$WORK/$label.sender.$attempt" tx_before bursts_before t0 t1 line

  tx_before=$(metric fabricscope_port_transmit_bytes_total "device=\"$V_TX\"")
  bursts_before=$(metric fabricscope_microbursts_total "device=\"$V_TX\",port=\"0\",direction=\"transmit\"")
  in_rx "$BURST" receive --listen="$RX_ADDR:$port" --timeout=15 >"$rx_out" 2>&1 &
  local rx_pid=$!
  PIDS+=("$rx_pid")
  for _ in $(seq 100); do  # up to 5 s for the receiver to listen
    grep -q '^listening=' "$rx_out" && break
    kill -0 "$rx_pid" 2>/dev/null || break
    sleep 0.05
  done
  grep -q '^listening=' "$rx_out" || { log "receiver did not start:"; cat "$rx_out"; return 1; }

  t0=$(date +%s.%N)
  in_tx "$BURST" send --connect="$RX_ADDR:$port" --bytes="$BURST_BYTES" --timeout=10 \
    $CONGESTION >"$tx_out" 2>&1
  local send_rc=$?
  t1=$(date +%s.%N)
  wait "$rx_pid"
  local rx_rc=$?
  if [ "$send_rc" -ne 0 ] || [ "$rx_rc" -ne 0 ]; then
    log "traffic failed (sender rc $send_rc, receiver rc $rx_rc):"
    cat "$tx_out" "$rx_out"
    return 1
  fi
  line=$(grep '^sent_bytes=' "$tx_out")

  # A burst is reported when it ends, with the window it ended in (1 s windows).
  if ! wait_window_after "$(awk -v t="$t1" 'BEGIN { printf "%.6f", t + 0.2 }')"; then
    log "the agent published no window ending after the burst within 6 s"
    return 1
  fi
  local json tx_after bursts_after sel
  json=$(http /api/microbursts) || { log "GET /api/microbursts failed"; return 1; }
  printf '%s\n' "$json" >"$WORK/$label.microbursts.$attempt.json"
  tx_after=$(metric fabricscope_port_transmit_bytes_total "device=\"$V_TX\"")
  bursts_after=$(metric fabricscope_microbursts_total "device=\"$V_TX\",port=\"0\",direction=\"transmit\"")

  # This attempt's bursts: those starting between the launch of the sender and its end. For
  # the transmit ones: count, sum of bytes and durations, first start, last end, highest peak,
  # and the first one's figures.
  sel=$(printf '%s' "$json" | jq -r --arg dev "$V_TX" --argjson t0 "$t0" --argjson t1 "$t1" '
    [.microbursts[] | select(.device == $dev and .start_unix_seconds >= $t0 - 0.05
                             and .start_unix_seconds <= $t1 + 0.05)] as $b
    | ($b | map(select(.direction == "transmit")) | sort_by(.start_unix_seconds)) as $tx
    | [($tx | length), ($b | map(select(.direction == "receive")) | length),
       ($tx | map(.bytes) | add // 0), ($tx | map(.duration_seconds) | add // 0),
       ($tx | first // {} | .start_unix_seconds // 0),
       ($tx | last // {} | (.start_unix_seconds // 0) + (.duration_seconds // 0)),
       ($tx | map(.peak_utilization) | max // 0)]
    | map(tostring) | join(" ")') || { log "bad JSON from the agent: $json"; return 1; }

  awk -v sel="$sel" -v line="$line" -v rate="$RATE_BPS" -v hdr="$HDR_BYTES" \
    -v period="$period_s" -v payload="$BURST_BYTES" -v mode="$mode" \
    -v txb="${tx_before:-0}" -v txa="${tx_after:-0}" \
    -v nb0="${bursts_before:-0}" -v nb1="${bursts_after:-0}" \
    -v attempt="$attempt" -v label="$label" -v cov_min="$COVERAGE_MIN" '
    function kv(k,   i, n, f, p) {
      n = split(line, f, " ")
      for (i = 1; i <= n; i++) { split(f[i], p, "="); if (p[1] == k) return p[2] }
      return ""
    }
    function check(ok, what) {
      printf "  [%s] %s\n", ok ? "ok" : "FAIL", what
      if (!ok) failed = 1
    }
    function within(v, lo, hi) { return v >= lo && v <= hi }
    BEGIN {
      split(sel, s, " ")
      ntx = s[1]; nrx = s[2]; bytes = s[3]; dur = s[4]; start = s[5]; end = s[6]; peak = s[7]
      sent = kv("tcp_bytes_sent"); segs = kv("data_segs_out"); elapsed = kv("elapsed_seconds")
      first_byte = kv("start_unix_seconds")
      if (sent == "" || sent == 0) sent = kv("sent_bytes")
      if (kv("timestamps") == 1) hdr += 12
      wire = sent + segs * hdr          # frames of the data phase, as tbf and tx_bytes count them
      exp_dur = wire / rate
      edge = period * rate              # bytes of one whole sample at the shaped rate
      d_tol = 2 * period + 0.10 * exp_dur
      span = end - start
      printf "%s attempt %d (%s): %d B payload in %d data segments, %s B retransmitted, " \
             "sender busy %.2f ms\n", label, attempt, mode, sent, segs, kv("tcp_bytes_retrans"),
             elapsed * 1e3
      printf "  expected: %d B on the wire, %.3f ms at %.0f Mbit/s\n", wire, exp_dur * 1e3,
             rate * 8 / 1e6
      if (ntx >= 1) {
        printf "  reported: %d burst(s), %d B (%+.2f%%), %.3f ms in bursts, span %.3f ms (%+.3f ms)," \
               " first starts %+.3f ms from the first byte, peak utilization %.2f\n",
               ntx, bytes, (bytes - wire) * 100 / wire, dur * 1e3, span * 1e3,
               (span - exp_dur) * 1e3, (start - first_byte) * 1e3, peak
      } else {
        printf "  reported: no transmit burst\n"
      }
      if (mode == "strict") {
        check(ntx == 1, sprintf("exactly one transmit microburst during the transfer (got %d)", ntx))
        if (ntx == 1) {
          check(within(bytes, wire - 2 * edge - 0.02 * wire, wire * 1.01),
                sprintf("bytes within [%d, %d] (wire - 2 samples - 2%%, wire + 1%%)",
                        wire - 2 * edge - 0.02 * wire, wire * 1.01))
          check(within(dur, exp_dur - d_tol, exp_dur + d_tol),
                sprintf("duration within %.3f +- %.3f ms (2 samples + 10%%)", exp_dur * 1e3,
                        d_tol * 1e3))
        }
      } else {
        check(ntx >= 1, sprintf("at least one transmit microburst during the transfer (got %d)", ntx))
        if (ntx >= 1) {
          check(within(bytes, cov_min * wire, wire * 1.01),
                sprintf("bytes in bursts within [%d, %d] (%.0f%% of wire, wire + 1%%)",
                        cov_min * wire, wire * 1.01, cov_min * 100))
          check(within(span, exp_dur - d_tol, exp_dur + d_tol),
                sprintf("first start to last end within %.3f +- %.3f ms (2 samples + 10%%)",
                        exp_dur * 1e3, d_tol * 1e3))
        }
      }
      if (ntx >= 1)
        check(within(start - first_byte, -d_tol, d_tol),
              sprintf("first burst starts %+.3f ms from the first byte, within +-%.3f ms",
                      (start - first_byte) * 1e3, d_tol * 1e3))
      check(nrx == 0, sprintf("no receive microburst during the transfer (got %d)", nrx))
      check(nb1 - nb0 == ntx,
            sprintf("fabricscope_microbursts_total{direction=\"transmit\"} grew by %d = bursts listed",
                    nb1 - nb0))
      check(within(txa - txb, wire, wire * 1.01),
            sprintf("fabricscope_port_transmit_bytes_total grew by %d, within [wire, wire + 1%%]",
                    txa - txb))
      exit failed
    }'
}

period_seconds() {
  case "$1" in
    *us) awk -v v="${1%us}" 'BEGIN { print v / 1e6 }' ;;
    *ms) awk -v v="${1%ms}" 'BEGIN { print v / 1e3 }' ;;
    *s) awk -v v="${1%s}" 'BEGIN { print v }' ;;
    *) return 1 ;;
  esac
}

run_case() {  # period, e.g. 1ms
  local period=$1 period_s agent_log="$WORK/agent.$1.log" attempt passed=0 rc mode=coverage
  period_s=$(period_seconds "$period") || { log "bad period $period"; return 1; }
  case " $STRICT_PERIODS " in *" $period "*) mode=strict ;; esac
  # Frame size per case: at 1 ms and longer, jumbo frames (14 per sample at 1 Gbit/s) keep the
  # per-frame timer and softirq work, and with it the host's noise, six times lower; at 100 us
  # a sample needs standard frames to hold more than one or two of them.
  local mtu=1500 tbf_burst=16kb
  if awk -v p="$period_s" 'BEGIN { exit !(p >= 0.001) }'; then mtu=9000 tbf_burst=64kb; fi
  mtu=${FABRICSCOPE_E2E_MTU:-$mtu}
  ip -n "$NS_TX" link set dev "$V_TX" mtu "$mtu" && ip -n "$NS_RX" link set dev "$V_RX" mtu "$mtu" ||
    { log "cannot set MTU $mtu on the veth pair"; return 1; }
  in_tx tc qdisc replace dev "$V_TX" root tbf rate "$RATE_SPEC" burst "$tbf_burst" latency 100ms ||
    { log "cannot reconfigure tbf"; return 1; }
  log "=== sample period $period ($mode; MTU $mtu, tbf rate $RATE_SPEC burst $tbf_burst) ==="
  if ! start_agent "$period" "$agent_log"; then
    log "the agent did not print its HTTP port within 10 s"
    dump_case "$agent_log"
    return 1
  fi

  # Idle: a published window ending >= 1 s after the start, with no traffic, holds no burst.
  local since
  since=$(date +%s.%N)
  if ! wait_window_after "$(awk -v t="$since" 'BEGIN { printf "%.6f", t + 1.0 }')"; then
    log "the agent published no window within 6 s of starting"
    dump_case "$agent_log"
    stop_agent
    return 1
  fi
  local idle_json idle_n
  idle_json=$(http /api/microbursts)
  idle_n=$(printf '%s' "$idle_json" | jq '.microbursts | length')
  if [ "$idle_n" != 0 ]; then
    log "  [FAIL] idle link: expected no microburst, got $idle_n: $idle_json"
    dump_case "$agent_log"
    stop_agent
    return 1
  fi
  log "  [ok] idle link (>= 1 s, no traffic): no microburst reported"

  for attempt in $(seq "$ATTEMPTS"); do
    if run_burst "$period_s" "$attempt" "$period" "$mode"; then
      passed=1
      break
    fi
    [ "$attempt" -lt "$ATTEMPTS" ] && log "  attempt $attempt failed; retrying with a fresh burst"
  done
  if [ "$passed" -ne 1 ]; then
    log "sample period $period: no attempt out of $ATTEMPTS passed"
    dump_case "$agent_log"
  fi
  stop_agent
  rc=$?
  if [ "$rc" -ne 0 ]; then
    log "  [FAIL] the agent exited with status $rc after SIGTERM"
    cat "$agent_log"
    passed=0
  fi
  [ "$passed" -eq 1 ]
}

for period in $PERIODS; do
  run_case "$period" || FAILED=1
done
if [ "$FAILED" -ne 0 ]; then
  log "FAIL: veth microburst end-to-end test"
  exit 1
fi
log "PASS: veth microburst end-to-end test ($PERIODS)"
exit 0
