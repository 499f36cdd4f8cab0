#!/usr/bin/env bash
# Jobs named from real cgroups (issue 36): the agent standalone with its GPU socket, and two
# jobs of two ranks each, real ring all-reduce processes (tests/tools fabricscope-ring-allreduce,
# reporting through the NCCL profiler plugin) started with an empty environment (env -i: only
# the socket path) inside the cgroups slurmstepd and the kubelet would give them:
#   * job A in a Slurm cgroup v1 hierarchy (pids): /slurm/uid_0/job_<A>/step_0/task_<r>
#     (src/plugins/cgroup/v1/xcgroup.c);
#   * job B in a pod's cgroup v2 directory with the kubelet's systemd driver:
#     /kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<uid>.slice/...
#     (pkg/kubelet/cm/cgroup_manager_linux.go).
# Then /api/jobs names both jobs (scheduler, where the id came from, their communicator),
# /api/collectives/slow?job=A returns only job A's collectives, each naming job A, an unknown
# job is a 404, /metrics has fabricscope_job_info for both and every per-communicator series
# carries its job_id, /api/diagnosis?job=A lists job A's communicator only, and the collective
# heat map for ?job=B draws job B's communicator and says so. The agent watches two RDMA devices
# of a real sysfs tree (tests/testdata/sysfs-real: mlx5_0 port 1, mlx4_0 ports 1 and 2) and reads
# the queue pairs from a stand-in for iproute2's `rdma -j res show qp` that prints job A's ranks
# on mlx5_0:1 and job B's on mlx4_0:2 (the JSON shape of rdma/res-qp.c res_qp_parse_cb; failing,
# as the real tool does without a device, until the ranks have started): the links heat map for
# ?job=A then draws mlx5_0:1 only, and for ?job=B mlx4_0:2 only; /heatmap/nodes?job=A answers
# for the job's node and an unknown job is a 404.
# Usage: job_identity_test.sh AGENT RING_ALLREDUCE NCCL_PLUGIN
# Needs root and both cgroup hierarchies; exits 77 (skip) without them. 0 = pass, 1 = fail.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

AGENT=${1:-}
RING=${2:-}
PLUGIN=${3:-}
log() { printf '%s\n' "$*"; }
skip() { log "SKIP: $*"; exit 77; }
die() { log "FAIL: $*"; FAILED=1; exit 1; }

[ -n "$AGENT" ] && [ -n "$RING" ] && [ -n "$PLUGIN" ] || { log "usage: $0 AGENT RING PLUGIN"; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "needs root to create cgroups (uid $(id -u))"
for tool in curl jq; do
  command -v "$tool" >/dev/null || { log "FAIL: $tool not installed (deploy/install-deps.sh)"; exit 1; }
done
V1=/sys/fs/cgroup/pids
V2=/sys/fs/cgroup/unified
[ -w "$V1/cgroup.procs" ] || skip "no writable cgroup v1 pids hierarchy at $V1"
[ -w "$V2/cgroup.procs" ] || skip "no writable cgroup v2 tree at $V2"

JOB_A=$((700000 + $$ % 100000))
POD_UID=$(printf '5c0ffee0-1d2e-4f5a-8b9c-%012d' $$)
POD_DIR="kubepods-besteffort-pod${POD_UID//-/_}.slice"
CG_A="$V1/slurm/uid_0/job_$JOB_A/step_0"
CG_B="$V2/kubepods.slice/kubepods-besteffort.slice/$POD_DIR"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fabricscope-jobs.XXXXXX") || exit 1
PIDS=()
MADE=()
FAILED=0
cleanup() {
  stop_pids "${PIDS[@]}"
  for ((i = ${#MADE[@]} - 1; i >= 0; i--)); do rmdir "${MADE[$i]}" 2>/dev/null; done
  if [ "$FAILED" -eq 0 ]; then rm -rf "$WORK"; else log "logs kept in $WORK"; fi
}
trap cleanup EXIT
trap 'FAILED=1; exit 130' INT TERM

# mkcg DIR: creates DIR and each missing parent, remembering them for cleanup.
mkcg() {
  local path="" part
  IFS=/ read -ra parts <<<"${1#/}"
  for part in "${parts[@]}"; do
    path="$path/$part"
    [ -d "$path" ] && continue
    mkdir "$path" 2>"$WORK/err" || skip "cannot create $path: $(cat "$WORK/err")"
    MADE+=("$path")
  done
}
for r in 0 1; do
  mkcg "$CG_A/task_$r"
  mkcg "$CG_B/cri-containerd-r$r.scope"
done

SOCK="$WORK/gpu.sock"
: >"$WORK/agent.yaml"
SYSFS="$(cd "$(dirname "${BASH_SOURCE[0]}")/../testdata/sysfs-real" && pwd)" || die "no sysfs-real"
cat >"$WORK/rdma" <<EOF
#!/bin/sh
[ "\$*" = "-j res show qp" ] || { echo "stand-in rdma: unexpected arguments: \$*" >&2; exit 2; }
exec cat "$WORK/qps.json"
EOF
chmod +x "$WORK/rdma"
"$AGENT" --config="$WORK/agent.yaml" --node=e2e-jobs --sysfs-root="$SYSFS" \
  --interfaces=mlx5_0,mlx4_0 --rdma-tool="$WORK/rdma" --qp-refresh-period=100ms \
  --http-listen=127.0.0.1:0 --status=off --gpu-socket="$SOCK" >"$WORK/agent.log" 2>&1 &
AGENT_PID=$!
PIDS+=("$AGENT_PID")
PORT=
for _ in $(seq 200); do
  PORT=$(sed -n 's|^fabricscope-agent standalone: serving http://127\.0\.0\.1:\([0-9]*\)/metrics$|\1|p' "$WORK/agent.log")
  [ -n "$PORT" ] && [ -S "$SOCK" ] && break
  kill -0 "$AGENT_PID" 2>/dev/null || break
  sleep 0.05
done
[ -n "$PORT" ] && [ -S "$SOCK" ] || { cat "$WORK/agent.log"; die "agent did not start"; }
http() { curl -sS --max-time 5 "http://127.0.0.1:$PORT$1"; }

# rank CGROUP RANK PORT RIGHT COMM: one rank, moved into CGROUP before it execs, with an empty
# environment but for the agent's socket. It runs 2.5 s: a producer's ports reach the aggregator
# with the windows that close while it is connected (GpuProducer lists connected producers).
rank() {
  sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec env -i "$@"' sh "$1" \
    FABRICSCOPE_GPU_SOCKET="$SOCK" "$RING" --rank="$2" --nranks=2 --listen="127.0.0.1:$3" \
    --right="127.0.0.1:$4" --plugin="$PLUGIN" --bytes=262144 --iterations=25 --compute-ms=100 \
    --comm-hash="$5" --timeout=60 >"$WORK/rank-$5-$2.log" 2>&1 &
  PIDS+=("$!")
}
BASE=$((20000 + $$ % 20000))
COMM_A=a11ce00000000001
COMM_B=b0b0000000000002
rank "$CG_A/task_0" 0 "$BASE" $((BASE + 1)) "$COMM_A"
rank "$CG_A/task_1" 1 $((BASE + 1)) "$BASE" "$COMM_A"
rank "$CG_B/cri-containerd-r0.scope" 0 $((BASE + 2)) $((BASE + 3)) "$COMM_B"
rank "$CG_B/cri-containerd-r1.scope" 1 $((BASE + 3)) $((BASE + 2)) "$COMM_B"
# qp DEVICE PORT PID LQPN: one connected RC queue pair of a rank, as rdma/res-qp.c prints it.
qp() {
  printf '{"ifindex":0,"ifname":"%s","port":%s,"lqpn":%s,"rqpn":%s,"type":"RC","state":"RTS","rq-psn":1,"sq-psn":2,"path-mig-state":"MIGRATED","pdn":3,"pid":%s,"comm":"fabricscope-rin"}' \
    "$1" "$2" "$4" $(($4 + 1000)) "$3"
}
N=${#PIDS[@]}
printf '[%s,%s,%s,%s]\n' "$(qp mlx5_0 1 "${PIDS[N - 4]}" 100)" "$(qp mlx5_0 1 "${PIDS[N - 3]}" 101)" \
  "$(qp mlx4_0 2 "${PIDS[N - 2]}" 102)" "$(qp mlx4_0 2 "${PIDS[N - 1]}" 103)" >"$WORK/qps.json.new"
mv "$WORK/qps.json.new" "$WORK/qps.json"

# Both jobs with their communicator and both ranks (each rank's communicator comes with its own
# agent window), job A's collectives matched (classified ones come ahead of their window), and
# job A's duration series, which come with a window, within 30 s.
ok=0
for _ in $(seq 300); do
  if http /api/jobs >"$WORK/jobs.json" 2>/dev/null &&
    http "/api/collectives/slow?limit=0&job=$JOB_A" >"$WORK/slow-a.json" 2>/dev/null &&
    [ "$(jq '[.jobs[] | select((.comms | length > 0) and .ranks >= 2)] | length' "$WORK/jobs.json")" -ge 2 ] &&
    [ "$(jq '.collectives | length' "$WORK/slow-a.json" 2>/dev/null || echo 0)" -ge 3 ] &&
    http /metrics >"$WORK/metrics.txt" 2>/dev/null &&
    grep -q "^fabricscope_collective_duration_seconds_count{.*comm=\"${COMM_A:0:8}\"" "$WORK/metrics.txt"; then
    ok=1
    break
  fi
  sleep 0.1
done
[ "$ok" -eq 1 ] || { cat "$WORK/jobs.json" 2>/dev/null; die "the jobs or job A's collectives did not appear"; }

job() { jq -c --arg id "$1" '.jobs[] | select(.id == $id)' "$WORK/jobs.json"; }
A=$(job "$JOB_A")
B=$(job "$POD_UID")
[ -n "$A" ] || die "no job $JOB_A in /api/jobs: $(cat "$WORK/jobs.json")"
[ -n "$B" ] || die "no job $POD_UID in /api/jobs: $(cat "$WORK/jobs.json")"
[ "$(jq -r '.scheduler + " " + .source + " " + .step' <<<"$A")" = "slurm cgroup 0" ] ||
  die "job A: $A"
# The plugin read the same pod uid from its own /proc/self/cgroup and claimed it: the claim agrees.
[ "$(jq -r '.scheduler + " " + .source + " " + .pod_uid' <<<"$B")" = \
  "kubernetes cgroup+environment $POD_UID" ] || die "job B: $B"
[ "$(jq -r '.comms | join(",")' <<<"$A")" = "${COMM_A:0:8}" ] || die "job A's communicators: $A"
[ "$(jq -r '.comms | join(",")' <<<"$B")" = "${COMM_B:0:8}" ] || die "job B's communicators: $B"
[ "$(jq -r '.ranks' <<<"$A")" -eq 2 ] || die "job A's ranks: $A"
# Only job A's collectives, each naming job A.
[ "$(jq -r '[.collectives[] | .comm + "/" + .job] | unique | join(",")' "$WORK/slow-a.json")" = \
  "${COMM_A:0:8}/$JOB_A" ] || die "?job=$JOB_A returned others: $(head -c 600 "$WORK/slow-a.json")"
CODE=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/api/collectives/slow?job=no-such-job")
[ "$CODE" = 404 ] || die "an unknown job answered $CODE"
http /metrics >"$WORK/metrics.txt" || die "GET /metrics failed"
grep -q "^fabricscope_job_info{.*job_id=\"$JOB_A\".*scheduler=\"slurm\"" "$WORK/metrics.txt" ||
  die "no fabricscope_job_info for job A"
grep -q "^fabricscope_job_info{.*job_id=\"$POD_UID\".*scheduler=\"kubernetes\"" "$WORK/metrics.txt" ||
  die "no fabricscope_job_info for job B"
# The per-communicator series carry their communicator's job (job_id, joined with
# fabricscope_job_info), every one of them.
grep -q "^fabricscope_collective_duration_seconds_count{.*comm=\"${COMM_A:0:8}\".*job_id=\"$JOB_A\"" \
  "$WORK/metrics.txt" || die "job A's collective durations carry no job_id=$JOB_A"
UNLABELLED=$(grep -E '^fabricscope_(collective_(duration_seconds|bus_[a-z_]+)|rank_pair_bytes_total|diagnosis_[a-z_]+)[{_].*comm="' \
  "$WORK/metrics.txt" | grep -vc 'job_id="')
[ "$UNLABELLED" -eq 0 ] || die "$UNLABELLED per-communicator series without job_id"
# The diagnosis and the collective heat map for job A: its communicator only, named.
http "/api/diagnosis?job=$JOB_A" >"$WORK/diag-a.json" || die "GET /api/diagnosis?job= failed"
[ "$(jq -r '[.communicators[] | .comm + "/" + .job] | unique | join(",")' "$WORK/diag-a.json")" = \
  "${COMM_A:0:8}/$JOB_A" ] || die "/api/diagnosis?job=$JOB_A: $(head -c 600 "$WORK/diag-a.json")"
http "/heatmap/collectives?format=json&job=$POD_UID" >"$WORK/hm-b.json" ||
  die "GET /heatmap/collectives?job= failed"
jq -r .title "$WORK/hm-b.json" | grep -q "comm ${COMM_B:0:8} (job $POD_UID)" ||
  die "job B's collective heat map: $(jq -r .title "$WORK/hm-b.json")"
# The per-node records of job B only, its two ranks.
http "/api/collectives?job=$POD_UID&limit=2" >"$WORK/coll-b.json" || die "GET /api/collectives?job= failed"
[ "$(jq -r '[.collectives[] | .comm[0:8]] | unique | join(",")' "$WORK/coll-b.json")" = "${COMM_B:0:8}" ] &&
  [ "$(jq '.collectives | length' "$WORK/coll-b.json")" -eq 2 ] ||
  die "/api/collectives?job=$POD_UID&limit=2: $(head -c 600 "$WORK/coll-b.json")"
CODE=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/api/diagnosis?job=no-such-job")
[ "$CODE" = 404 ] || die "/api/diagnosis for an unknown job answered $CODE"
# Each job's links: the port its ranks' queue pairs are on, the other rail left out.
links() {
  http "/heatmap/links?format=json&seconds=60&job=$1" | jq -r '[.rows[] | sub(" [tr]x$"; "")] | unique | join(",")'
}
ok=0
for _ in $(seq 100); do
  LA=$(links "$JOB_A") && LB=$(links "$POD_UID") && [ "$LA" = "e2e-jobs/mlx5_0:1" ] &&
    [ "$LB" = "e2e-jobs/mlx4_0:2" ] && ok=1 && break
  sleep 0.1
done
CODE=$(curl -s -o "$WORK/nodes-a.json" -w '%{http_code}' "http://127.0.0.1:$PORT/heatmap/nodes?format=json&job=$JOB_A")
[ "$CODE" = 200 ] && jq -r .title "$WORK/nodes-a.json" | grep -q "between job $JOB_A's 1 node" ||
  die "/heatmap/nodes?job=$JOB_A answered $CODE: $(head -c 300 "$WORK/nodes-a.json")"
CODE=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/heatmap/nodes?job=no-such-job")
[ "$CODE" = 404 ] || die "/heatmap/nodes for an unknown job answered $CODE"
http "/api/kernels?job=$JOB_A" | jq -e '.kernels | type == "array"' >/dev/null ||
  die "/api/kernels?job=$JOB_A did not answer a kernel list"
CODE=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/api/kernels?job=no-such-job")
[ "$CODE" = 404 ] || die "/api/kernels for an unknown job answered $CODE"
[ "$ok" -eq 1 ] || die "links by job: job A on '${LA:-}', job B on '${LB:-}' (want mlx5_0:1 and mlx4_0:2)"
log "jobs: $JOB_A (slurm, cgroup v1) and pod $POD_UID (kubernetes, cgroup v2), $(jq '.collectives | length' "$WORK/slow-a.json") collectives of job A"
log "PASS"
