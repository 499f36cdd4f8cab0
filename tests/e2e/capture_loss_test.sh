#!/usr/bin/env bash
# Real loss, captured live: three network namespaces (sender -> router -> receiver) joined by
# veth pairs, the router's link towards the receiver shaped by a tbf whose small queue drops
# packets (tail drop, as a congested switch port), one real TCP transfer. fabricscope-agent captures on the sender's veth (as a GPU node's agent would on its
# NIC, with the loss further along the path) while tshark captures the same interface in
# parallel. The agent's retransmission and out-of-order counts must equal the numbers of frames
# tshark flags tcp.analysis.retransmission and tcp.analysis.out_of_order, and their sum must
# equal the kernel's RetransSegs delta in the sending namespace: every retransmitted segment
# leaves through that veth (GSO is off, so one segment is one frame), and a capture at the
# sender cannot see real reordering, so Wireshark's out-of-order rule (a segment below the next
# expected sequence number within the initial RTT, tiny on veth) fires only on quick
# retransmissions there.
#
# tshark can start a moment after it prints "Capturing on" and miss the first frames; then the
# agent's live counts are compared with the kernel only, and tshark is compared with
# fabricscope-pcap on tshark's own file (the same input for both analyzers).
#
# Usage: capture_loss_test.sh AGENT_BINARY BURST_TOOL_BINARY PCAP_CLI_BINARY
# Needs root, ip netns, tbf and tshark; exits 77 (skipped) without them.
set -uo pipefail
AGENT=${1:?agent binary}
BURST=${2:?burst tool binary}
PCAPCLI=${3:?fabricscope-pcap binary}
BYTES=${FABRICSCOPE_E2E_LOSS_BYTES:-3000000}
# 50 Mbit/s: far below what even a CPU-starved sender pushes through a veth, so TCP's slow start
# always overruns the small queue (at 200 Mbit/s a sender starved by parallel builds sometimes
# stayed under the rate and nothing was dropped).
RATE=${FABRICSCOPE_E2E_LOSS_RATE:-50mbit}

skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root (network namespaces)"
command -v tshark >/dev/null || skip "tshark is not installed"
ip netns list >/dev/null 2>&1 || skip "ip netns unavailable"

TAG=$$
TX=fs-cap-tx-$TAG; RT=fs-cap-rt-$TAG; RX=fs-cap-rx-$TAG
WORK=$(mktemp -d /tmp/fabricscope-capture.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  for n in "$TX" "$RT" "$RX"; do ip netns del "$n" 2>/dev/null; done
  [ "${KEEP:-0}" = 1 ] || rm -rf "$WORK"
}
trap cleanup EXIT INT TERM
fail() { echo "FAIL: $*"; echo "--- agent log"; tail -20 "$WORK/agent.log"; KEEP=1; echo "logs in $WORK"; exit 1; }

for n in "$TX" "$RT" "$RX"; do ip netns add "$n" || skip "cannot create namespaces"; done
ip -n "$TX" link add ctx type veth peer name crt1 netns "$RT" || skip "no veth"
ip -n "$RT" link add crt2 type veth peer name crx netns "$RX" || skip "no veth"
ip -n "$TX" addr add 10.216.1.1/24 dev ctx
ip -n "$RT" addr add 10.216.1.2/24 dev crt1
ip -n "$RT" addr add 10.216.2.2/24 dev crt2
ip -n "$RX" addr add 10.216.2.1/24 dev crx
for pair in "$TX ctx" "$RT crt1" "$RT crt2" "$RX crx"; do
  set -- $pair
  ip -n "$1" link set "$2" up
  ip -n "$1" link set "$2" gso_max_segs 1 2>/dev/null  # one segment per frame
  ip netns exec "$1" ethtool -K "$2" tso off gso off gro off >/dev/null 2>&1
done
for n in "$TX" "$RT" "$RX"; do ip -n "$n" link set lo up; done
ip -n "$TX" route add default via 10.216.1.2
ip -n "$RX" route add default via 10.216.2.2
ip netns exec "$RT" sysctl -qw net.ipv4.ip_forward=1
tc -n "$RT" qdisc add dev crt2 root tbf rate "$RATE" burst 16kb limit 24kb || skip "tbf unavailable"

printf 'node: capture-test\n' > "$WORK/agent.yaml"
ip netns exec "$TX" "$AGENT" --config="$WORK/agent.yaml" --interfaces=ctx --capture=ctx \
  --window=200ms --http-listen=127.0.0.1:0 --status=off --gpu-socket=off > "$WORK/agent.log" 2>&1 &
PIDS+=($!)
port=""
for _ in $(seq 100); do
  port=$(grep -o 'serving http://127.0.0.1:[0-9]*' "$WORK/agent.log" | grep -o '[0-9]*$')
  [ -n "$port" ] && break
  kill -0 "${PIDS[0]}" 2>/dev/null || fail "agent exited"
  sleep 0.1
done
[ -n "$port" ] || fail "agent did not start"
metrics() { ip netns exec "$TX" curl -sf "http://127.0.0.1:$port/metrics"; }

ip netns exec "$TX" tshark -i ctx -f tcp -w "$WORK/parallel.pcapng" -q > "$WORK/tshark.log" 2>&1 &
TSHARK=$!
PIDS+=($TSHARK)
for _ in $(seq 100); do grep -q "Capturing on" "$WORK/tshark.log" && break; sleep 0.1; done
grep -q "Capturing on" "$WORK/tshark.log" || fail "tshark did not start: $(cat "$WORK/tshark.log")"

retrans() {
  ip netns exec "$TX" awk '/^Tcp:/ { if (seen) { print $col } else { for (i = 1; i <= NF; i++) if ($i == "RetransSegs") col = i; seen = 1 } }' /proc/net/snmp
}
before=$(retrans)
ip netns exec "$RX" "$BURST" receive --listen=10.216.2.1:5201 --timeout=60 > "$WORK/rx.log" 2>&1 &
PIDS+=($!)
ip netns exec "$TX" "$BURST" send --connect=10.216.2.1:5201 --bytes="$BYTES" --timeout=60 \
  > "$WORK/tx.log" 2>&1 || fail "transfer failed: $(cat "$WORK/tx.log")"
after=$(retrans)
kernel=$((after - before))

# The agent reports what it analyzed each 200 ms window: wait until its frame count stops
# growing and covers at least what tshark saw.
sleep_for_windows() { local a b; a=$(metrics | awk '/^fabricscope_capture_packets_total/ {print $2}'); for _ in $(seq 50); do sleep 0.2; b=$(metrics | awk '/^fabricscope_capture_packets_total/ {print $2}'); [ "$a" = "$b" ] && [ -n "$b" ] && return; a=$b; done; }
sleep_for_windows
kill -INT $TSHARK; wait $TSHARK 2>/dev/null
ours=$(metrics | awk '/^fabricscope_flow_retransmits_total\{.*kind="(retransmission|fast_retransmission|spurious_retransmission)"/ {s+=$2} END {print s+0}')
ours_ooo=$(metrics | awk '/^fabricscope_flow_lost_packets_total\{.*kind="out_of_order"/ {s+=$2} END {print s+0}')
theirs_ooo=$(tshark -r "$WORK/parallel.pcapng" -Y tcp.analysis.out_of_order 2>/dev/null | wc -l)
frames=$(metrics | awk '/^fabricscope_capture_packets_total/ {print $2}')
theirs=$(tshark -r "$WORK/parallel.pcapng" -Y tcp.analysis.retransmission 2>/dev/null | wc -l)
tframes=$(tshark -r "$WORK/parallel.pcapng" 2>/dev/null | wc -l)
drops=$(metrics | awk '/^fabricscope_capture_dropped_packets_total/ {s+=$2} END {print s+0}')
echo "frames: agent $frames, tshark $tframes; capture drops $drops"
echo "retransmissions: agent $ours, tshark $theirs; out-of-order: agent $ours_ooo, tshark $theirs_ooo; kernel RetransSegs delta $kernel (tbf $RATE, small queue)"
[ "$theirs" -gt 0 ] || fail "no retransmission happened: the tbf queue dropped nothing"
[ "$drops" = 0 ] || fail "the capture dropped packets: counts are not comparable"
[ "$frames" -ge "$tframes" ] || fail "agent analyzed $frames frames, tshark captured $tframes"
# 1. The agent's live analysis against the kernel's own count.
[ "$kernel" = "$((ours + ours_ooo))" ] ||
  fail "kernel RetransSegs delta $kernel != agent's $ours retransmitted + $ours_ooo out-of-order frames"
# 2. Against tshark on the parallel capture, frame for frame when it saw every frame.
if [ "$frames" = "$tframes" ]; then
  [ "$ours" = "$theirs" ] || fail "agent counted $ours retransmissions, tshark $theirs"
  [ "$ours_ooo" = "$theirs_ooo" ] || fail "agent counted $ours_ooo out-of-order frames, tshark $theirs_ooo"
else
  echo "tshark missed the first $((frames - tframes)) frames: comparing it with fabricscope-pcap on its file"
fi
# 3. Our offline analysis of tshark's file against tshark's.
json=$("$PCAPCLI" --json "$WORK/parallel.pcapng") || fail "fabricscope-pcap failed on the capture"
offline=$(printf '%s' "$json" | jq '.tcp.retransmissions')
offline_ooo=$(printf '%s' "$json" | jq '.tcp.out_of_order')
echo "offline on tshark's file: fabricscope-pcap $offline / $offline_ooo, tshark $theirs / $theirs_ooo"
[ "$offline" = "$theirs" ] && [ "$offline_ooo" = "$theirs_ooo" ] ||
  fail "fabricscope-pcap and tshark disagree on the same file"
echo "PASS: live capture agrees with tshark and the kernel"
