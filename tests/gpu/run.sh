#!/usr/bin/env bash
# The GPU check of issue 5, for a machine with an NVIDIA GPU, PyTorch, NCCL and CUDA but none of
# our Debian libraries: it starts the packed agent (tests/gpu/pack.sh) in standalone mode with its
# GPU ingest socket in a temporary directory, runs a short PyTorch loop (matrix products and
# all_reduce on a world-size-1 NCCL process group, one GPU) with the NCCL profiler plugin and the
# CUPTI injection library loaded, and checks that
#   1. NCCL loaded the plugin (and which table: ncclProfiler_v6 on NCCL 2.29+, _v5 on 2.28, _v4
#      on 2.27) and called init with real arguments and finalize (NCCL_DEBUG=INFO log lines),
#   2. CUPTI started, did not stand down, and recorded the real kernels (its exit summary),
#   3. the agent received them: fabricscope_gpu_kernels_total{device} on /metrics equals what
#      the library sent, and /api/kernels lists kernels with names, durations > 0 and device 0,
#      at least one GEMM per iteration, and at least one span per iteration inside the loop's
#      wall-clock interval (CUPTI's times are CLOCK_MONOTONIC, which the agent converts to Unix
#      time: a misaligned clock puts them hours or years away),
#   4. the producers reached the agent (well-formed datagrams on its GPU socket).
# NCCL 2.28 emits no collective events for 1-rank communicators (ABI §6.2, collectors/nccl/profiler_abi.h), so no
# collective records are expected; the count on /api/collectives is printed for information.
# Prints one PASS/FAIL line per check and exits 1 when any check failed. Runs in about a minute.
#
# Usage (from the repository root of a copy of the working tree):
#   tests/gpu/run.sh [--pack DIR] [--dry-run] [--keep]
#     --pack DIR   the output of tests/gpu/pack.sh (default: the first build*/gpu-pack found)
#     --dry-run    no GPU needed: print the plan and check the pack and the script, exit 0
#     --keep       keep the temporary directory (logs) for inspection
# Environment: PYTHON (default python3), FABRICSCOPE_GPU_ITERS (default 50).
# Exit: 0 all checks passed, 1 a check failed, 2 usage/setup error, 77 no GPU (and no --dry-run).
set -uo pipefail
script=$(realpath "$0")
cd "$(dirname "$script")/../.." || exit 2

pack=""
dry_run=0
keep=0
while (($#)); do
  case $1 in
    --pack) pack=$2; shift 2 ;;
    --pack=*) pack=${1#--pack=}; shift ;;
    --dry-run) dry_run=1; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$script" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
python=${PYTHON:-python3}
iters=${FABRICSCOPE_GPU_ITERS:-50}
start_s=$(date +%s)

if [[ -z $pack ]]; then
  for d in build*/gpu-pack build*/*/gpu-pack; do
    [[ -x $d/bin/fabricscope-agent ]] && { pack=$d; break; }
  done
fi

failures=0
declare -a summary=()
check() {  # NAME CONDITION_EXIT_STATUS DETAIL
  if [[ $2 == 0 ]]; then summary+=("PASS  $1: $3"); else summary+=("FAIL  $1: $3"); failures=$((failures + 1)); fi
  echo "${summary[-1]}"
}

plan() {
  cat <<PLAN
run.sh plan (pack: ${pack:-<none found>}):
  - report GPU (nvidia-smi), driver, Python, torch, NCCL, glibc versions
  - load gpu/libfabricscope-cupti.so and gpu/libnccl-profiler-fabricscope.so in Python (ctypes);
    if the host's glibc is too old for them, rebuild both from source with the host's g++
  - start the agent standalone: --http-listen=127.0.0.1:PORT, gpu_socket in a temp dir
  - run $iters iterations of matmul + all_reduce (world size 1, NCCL) with
    CUDA_INJECTION64_PATH, NCCL_PROFILER_PLUGIN, NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,PROFILE
  - check: plugin loaded, init and finalize logged; CUPTI traced (no stand-down), exit summary;
    agent /metrics fabricscope_gpu_kernels_total == kernels sent; /api/kernels names, durations,
    device 0, times inside the loop's wall-clock interval; datagrams received
PLAN
}

if ((dry_run)); then
  plan
  bash -n "$script" && echo "dry run: script parses"
  if [[ -n $pack ]]; then
    for f in bin/fabricscope-agent lib/ld-linux-x86-64.so.2 gpu/libfabricscope-cupti.so \
             gpu/libnccl-profiler-fabricscope.so; do
      [[ -e $pack/$f ]] && echo "dry run: $pack/$f present" || echo "dry run: $pack/$f MISSING"
    done
    [[ -f $pack/MANIFEST ]] && sed 's/^/dry run: manifest: /' "$pack/MANIFEST"
  fi
  exit 0
fi

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "run.sh: SKIP: no NVIDIA GPU here (nvidia-smi -L failed); use --dry-run to check the script"
  exit 77
fi
[[ -n $pack && -x $pack/bin/fabricscope-agent ]] || {
  echo "run.sh: no pack (tests/gpu/pack.sh output) found; pass --pack DIR" >&2; exit 2; }
pack=$(cd "$pack" && pwd)

tmp=$(mktemp -d /tmp/fabricscope-gpu.XXXXXX)
agent_pid=""
cleanup() {
  [[ -n $agent_pid ]] && kill "$agent_pid" 2>/dev/null && wait "$agent_pid" 2>/dev/null
  if ((keep)); then echo "run.sh: logs kept in $tmp"; else rm -rf "$tmp"; fi
}
trap cleanup EXIT

echo "== environment"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
echo "glibc: $(ldd --version 2>&1 | head -n1)"
"$python" - <<'PY' 2>&1 || true
import platform, torch
nccl = torch.cuda.nccl.version()
nccl = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else nccl
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "| nccl", nccl, "| gpus", torch.cuda.device_count())
PY
sed 's/^/pack: /' "$pack/MANIFEST" 2>/dev/null

echo "== libraries"
# libcupti.so.13: the host's (CUDA toolkit, ld.so.cache or the nvidia-cuda-cupti wheel), else the
# packed one. Its directory goes on the workload's LD_LIBRARY_PATH (never the pack's lib/).
wheel_dirs=$("$python" -c 'import nvidia, os; [print(os.path.join(p, s)) for p in nvidia.__path__ for s in ("cu13", "cuda_cupti")]' 2>/dev/null)
cupti_lib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/extras/CUPTI/lib64 $(for w in $wheel_dirs; do echo "$w/lib"; done); do
  [[ -e $d/libcupti.so.13 ]] && { cupti_lib=$d/libcupti.so.13; break; }
done
[[ -z $cupti_lib ]] && cupti_lib=$(ldconfig -p 2>/dev/null | awk '$1 == "libcupti.so.13" {print $NF; exit}')
[[ -z $cupti_lib && -e $pack/cupti/libcupti.so.13 ]] && cupti_lib=$pack/cupti/libcupti.so.13
echo "libcupti.so.13: ${cupti_lib:-not found}"
workload_ld_path=${LD_LIBRARY_PATH:-}
[[ -n $cupti_lib ]] && workload_ld_path=$(dirname "$cupti_lib")${workload_ld_path:+:$workload_ld_path}
# shellcheck disable=SC2046  # word splitting wanted: a list of directories
cupti_h=$(find /usr/local/cuda/include /usr/local/cuda/extras/CUPTI/include $(for w in $wheel_dirs; do echo "$w/include"; done) \
  -maxdepth 1 -name cupti.h 2>/dev/null | head -n1)

cupti_so=$pack/gpu/libfabricscope-cupti.so
nccl_so=$pack/gpu/libnccl-profiler-fabricscope.so
loads() {  # SO: can the host's Python (its glibc, its libstdc++) load it?
  LD_LIBRARY_PATH=$workload_ld_path "$python" -c 'import ctypes, sys; ctypes.CDLL(sys.argv[1])' "$1" 2>&1
}
for so in "$cupti_so" "$nccl_so"; do
  if ! err=$(loads "$so"); then
    echo "cannot load the packed $(basename "$so") here: $err"
    if ! command -v g++ >/dev/null; then
      check "load $(basename "$so")" 1 "does not load and no g++ to rebuild it: $err"
      continue
    fi
    mkdir -p "$tmp/build"
    case $(basename "$so") in
      libfabricscope-cupti.so)
        [[ -n $cupti_h && -n $cupti_lib ]] || { echo "no cupti.h or libcupti.so.13 to build with"; continue; }
        # cupti.h includes cuda.h: from the same include directory or the toolkit's.
        g++ -std=c++20 -O2 -fPIC -shared -fvisibility=hidden -I. -isystem "$(dirname "$cupti_h")" \
          -isystem /usr/local/cuda/include \
          collectors/cupti/{activity,batcher,buffer_pool,options,injection}.cc collectors/gpu/producer.cc \
          -Wl,--version-script=collectors/cupti/exports.map "$cupti_lib" \
          -static-libstdc++ -static-libgcc -o "$tmp/build/libfabricscope-cupti.so" && cupti_so=$tmp/build/libfabricscope-cupti.so ;;
      libnccl-profiler-fabricscope.so)
        g++ -std=c++20 -O2 -fPIC -shared -fvisibility=hidden -I. \
          collectors/nccl/{profiler,plugin_exports}.cc collectors/gpu/producer.cc -lpthread \
          -Wl,--version-script=collectors/nccl/exports.map -static-libstdc++ -static-libgcc \
          -o "$tmp/build/libnccl-profiler-fabricscope.so" && nccl_so=$tmp/build/libnccl-profiler-fabricscope.so ;;
    esac
    echo "rebuilt here with $(g++ --version | head -n1)"
  fi
done
check "GPU libraries load in the host's Python" "$( (loads "$cupti_so" >/dev/null && loads "$nccl_so" >/dev/null); echo $?)" \
  "$cupti_so, $nccl_so"

echo "== agent"
port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
socket=$tmp/gpu.sock
cat > "$tmp/agent.yaml" <<YAML
gpu_socket: $socket
YAML
"$pack/lib/ld-linux-x86-64.so.2" --library-path "$pack/lib" "$pack/bin/fabricscope-agent" \
  --config="$tmp/agent.yaml" --http-listen="127.0.0.1:$port" --window=1s >"$tmp/agent.log" 2>&1 &
agent_pid=$!
url=http://127.0.0.1:$port
fetch() { "$python" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1" 2>/dev/null; }
for _ in $(seq 100); do
  [[ -S $socket ]] && fetch "$url/healthz" >/dev/null && break
  kill -0 "$agent_pid" 2>/dev/null || break
  sleep 0.1
done
agent_ok=1; [[ -S $socket ]] && fetch "$url/healthz" >/dev/null && agent_ok=0
check "agent standalone with GPU socket" "$agent_ok" "$url, socket $socket"
if ((agent_ok)); then tail -n 20 "$tmp/agent.log"; fi

echo "== workload ($iters x matmul + all_reduce, world size 1)"
cat > "$tmp/workload.py" <<'PY'
import json, os, sys, time
import torch, torch.distributed as dist
iters = int(sys.argv[1])
torch.cuda.set_device(0)  # cuInit: the driver loads CUDA_INJECTION64_PATH here
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%s" % sys.argv[2], rank=0, world_size=1)
a = torch.randn(2048, 2048, device="cuda")
b = torch.randn(2048, 2048, device="cuda")
torch.cuda.synchronize()
t0 = time.time()
for _ in range(iters):
    c = a @ b
    dist.all_reduce(c)
    a = c / c.norm()
torch.cuda.synchronize()
t1 = time.time()
dist.destroy_process_group()
print("WORKLOAD " + json.dumps({"iters": iters, "t0": t0, "t1": t1, "device": torch.cuda.get_device_name(0)}), flush=True)
PY
mport=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
env LD_LIBRARY_PATH="$workload_ld_path" \
  CUDA_INJECTION64_PATH="$cupti_so" NCCL_PROFILER_PLUGIN="$nccl_so" \
  FABRICSCOPE_GPU_SOCKET="$socket" FABRICSCOPE_CUPTI_VERBOSE=1 \
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,PROFILE \
  timeout 180 "$python" "$tmp/workload.py" "$iters" "$mport" >"$tmp/workload.log" 2>&1
rc=$?
check "workload exits 0" "$((rc != 0))" "exit $rc ($(wc -l <"$tmp/workload.log") log lines)"
((rc != 0)) && tail -n 30 "$tmp/workload.log"
grep -E 'NCCL INFO NCCL version|PROFILER|[Pp]rofiler|fabricscope' "$tmp/workload.log" | head -n 20 | sed 's/^/  log: /'

log=$tmp/workload.log
# NCCL logs the table it picked: "PROFILER/Plugin: Loaded fabricscope (vN)" (src/plugin/profiler/
# profiler_vN.cc): v6 from NCCL 2.29, v5 on 2.28, v4 on 2.27.
abi=$(grep -m1 -o 'PROFILER/Plugin: Loaded fabricscope (v[0-9])' "$log" | grep -o 'v[0-9]')
nccl_version=$(grep -m1 -o 'NCCL version [0-9.+a-z]*' "$log" | sed 's/NCCL version //')
check "NCCL picked a table we export (v6, v5 or v4)" "$( [[ $abi == v6 || $abi == v5 || $abi == v4 ]]; echo $?)" \
  "NCCL ${nccl_version:-?} loaded ncclProfiler_${abi:-<none logged>}"
check "NCCL loaded the profiler plugin and called init" \
  "$(grep -q 'fabricscope profiler: mask' "$log"; echo $?)" \
  "$(grep -m1 -o 'fabricscope profiler: mask.*' "$log" || echo 'no init line (NCCL_DEBUG_SUBSYS=PROFILE)')"
check "NCCL called finalize" "$(grep -q 'fabricscope profiler: finalized' "$log"; echo $?)" \
  "$(grep -m1 -o 'fabricscope profiler: finalized.*' "$log" || echo 'no finalize line')"
check "CUPTI library traced (no stand-down)" \
  "$(grep -q 'fabricscope-cupti: tracing kernels' "$log" && ! grep -q 'fabricscope-cupti: .*standing down' "$log"; echo $?)" \
  "$(grep -m1 -o 'fabricscope-cupti: .*' "$log" || echo 'no fabricscope-cupti line')"
exit_line=$(grep -m1 -o 'fabricscope-cupti: exit: .*' "$log")
sent=$(sed -n 's/.* \([0-9]*\) records sent .*/\1/p' <<<"$exit_line")
kernels=$(sed -n 's/.*exit: \([0-9]*\) kernels.*/\1/p' <<<"$exit_line")
check "CUPTI recorded kernels and sent them" "$(( ${kernels:-0} < iters || ${sent:-0} == 0 ))" \
  "${exit_line:-no exit summary}"

echo "== agent contents"
# The agent hands records to its embedded aggregator once per window: poll until the kernel count
# stops changing (at most 15 s).
workload=$(sed -n 's/^WORKLOAD //p' "$log")
[[ -n $workload ]] || workload="{}"
"$python" - "$url" "${sent:-0}" "$iters" "$workload" >"$tmp/agent_checks.txt" 2>&1 <<'PY'
import json, re, sys, time, urllib.request
url, sent, iters, workload = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), json.loads(sys.argv[4])
def get(path):
    return urllib.request.urlopen(url + path, timeout=5).read().decode()
def metric_sum(text, name, label_filter=""):
    total, found = 0.0, False
    for line in text.splitlines():
        m = re.match(r'^%s(\{[^}]*\})? ([0-9.eE+-]+)$' % name, line)
        if m and label_filter in (m.group(1) or ""):
            total += float(m.group(2)); found = True
    return total if found else None
last, stable, deadline = None, 0, time.time() + 15
while time.time() < deadline:
    metrics = get("/metrics")
    k = metric_sum(metrics, "fabricscope_gpu_kernels_total")
    stable = stable + 1 if k is not None and k == last and k > 0 else 0
    if stable >= 3: break
    last = k
    time.sleep(0.5)
def report(name, ok, detail):
    print(("PASS" if ok else "FAIL") + "\t" + name + "\t" + detail)
kernels = metric_sum(metrics, "fabricscope_gpu_kernels_total") or 0
dev0 = metric_sum(metrics, "fabricscope_gpu_kernels_total", 'device="0"') or 0
report("agent counted every kernel CUPTI sent", kernels == sent and kernels > 0,
       "fabricscope_gpu_kernels_total %d (device 0: %d), sent %d" % (kernels, dev0, sent))
for name in ("fabricscope_gpu_kernel_seconds_total", "fabricscope_gpu_ingest_datagrams_total",
             "fabricscope_plugin_dropped_events_total", "fabricscope_gpu_ingest_dropped_datagrams_total"):
    for line in metrics.splitlines():
        if line.startswith(name): print("INFO\tmetric\t" + line)
spans = json.loads(get("/api/kernels?limit=100000")).get("kernels", [])
named = [s for s in spans if s.get("name")]
timed = [s for s in spans if s.get("duration_seconds", 0) > 0]
on0 = [s for s in spans if s.get("device") == 0]
report("/api/kernels: names, durations, device 0", len(spans) > 0 and len(named) == len(spans)
       and len(timed) == len(spans) and len(on0) == len(spans),
       "%d spans, %d named, %d with duration > 0, %d on device 0" % (len(spans), len(named), len(timed), len(on0)))
gemm = [s for s in spans if re.search(r"gemm|nvjet|cutlass|xmma|cublas", s["name"], re.I)]
report("matrix-product kernels recorded", len(gemm) >= iters,
       "%d GEMM-like kernels for %d matmuls" % (len(gemm), iters))
names = {}
for s in spans:
    names.setdefault(s["name"][:90], []).append(s["duration_seconds"])
for n, d in sorted(names.items(), key=lambda x: -len(x[1]))[:8]:
    print("INFO\tkernel\t%5d x %-90s mean %.1f us" % (len(d), n, 1e6 * sum(d) / len(d)))
nccl = [s for s in spans if s.get("is_nccl")]
print("INFO\tnccl kernels\t%d (world size 1: NCCL may launch none)" % len(nccl))
if workload and spans:
    t0, t1 = workload["t0"], workload["t1"]
    inside = [s for s in spans if t0 - 0.05 <= s["start_unix_seconds"] <= t1 + 0.05]
    ends = [s for s in inside if s["end_unix_seconds"] <= t1 + 0.05]
    report("kernel times on the agent's clock", len(inside) >= iters and len(ends) == len(inside),
           "%d of %d spans start inside the loop [%.3f, %.3f] (unix s, +-50 ms), all of them end "
           "by its end: %s" % (len(inside), len(spans), t0, t1, len(ends) == len(inside)))
else:
    report("kernel times on the agent's clock", False, "no workload times or no spans")
colls = json.loads(get("/api/collectives?limit=1000")).get("collectives", [])
print("INFO\tcollectives\t%d on /api/collectives (expected 0 at world size 1)" % len(colls))
conns = metric_sum(metrics, "fabricscope_gpu_ingest_datagrams_total") or 0
report("producers reached the agent", conns > 0, "%d datagrams" % conns)
PY
while IFS=$'\t' read -r status name detail; do
  case $status in
    PASS) check "$name" 0 "$detail" ;;
    FAIL) check "$name" 1 "$detail" ;;
    INFO) echo "  $name: $detail" ;;
    *) echo "  $status $name $detail" ;;
  esac
done <"$tmp/agent_checks.txt"
grep -q '^PASS\|^FAIL' "$tmp/agent_checks.txt" || check "agent queries" 1 "$(tail -n 5 "$tmp/agent_checks.txt")"

kill "$agent_pid" 2>/dev/null; wait "$agent_pid" 2>/dev/null; agent_pid=""
echo "== summary ($(( $(date +%s) - start_s )) s, $(date -u +%Y-%m-%dT%H:%M:%SZ))"
printf '%s\n' "${summary[@]}"
if ((failures)); then echo "run.sh: $failures check(s) failed"; exit 1; fi
echo "run.sh: all checks passed"
