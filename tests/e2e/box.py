"""The cluster in a box shared by tests/e2e's Python tests: four network namespaces as nodes
on a bridge in a fifth (the hub, where the aggregator runs), one agent and one rank of
fabricscope-ring-allreduce per node, all started and deleted here (cluster_in_a_box_test.py
describes the topology).

configure(agent, aggregator, ring, plugin) names the binaries before setup()."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

AGENT = AGGREGATOR = RING = PLUGIN = ""


def configure(agent, aggregator, ring, plugin):
    global AGENT, AGGREGATOR, RING, PLUGIN
    AGENT, AGGREGATOR, RING, PLUGIN = agent, aggregator, ring, plugin


TAG = str(os.getpid() % 100000)
HUB = f"fsbox{TAG}hub"
BRIDGE = f"fsb{TAG}br"
HUB_ADDR = "10.77.0.254"
WORK = tempfile.mkdtemp(prefix="fabricscope-box.")
NODES, NS, VETH, PEER, ADDR = 0, [], [], [], []


def resize(nodes):
    """Sets the number of node namespaces (4 at import; call before setup(), at most 250)."""
    global NODES, NS, VETH, PEER, ADDR
    NODES = nodes
    NS = [f"fsbox{TAG}n{i}" for i in range(NODES)]
    VETH = [f"fsb{TAG}n{i}" for i in range(NODES)]  # node side (< 16 characters)
    PEER = [f"fsb{TAG}p{i}" for i in range(NODES)]  # hub side
    ADDR = [f"10.77.0.{i + 1}" for i in range(NODES)]


resize(4)
PROCS = []

HEALTHY_TBF, HEALTHY_DECLARED = "40mbit", "80mbit"
SLOW_TBF = SLOW_DECLARED = "4mbit"
BYTES = 256 * 1024
ITERATIONS = 10


def log(*a):
    print("cluster-in-a-box:", *a, flush=True)


def skip(msg):
    log("SKIP:", msg)
    sys.exit(77)


def run(*cmd, check=True, ns=None, **kw):
    if ns:
        cmd = ("ip", "netns", "exec", ns) + cmd
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


def cleanup():
    for p in PROCS:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    for p in PROCS:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for ns in NS + [HUB]:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


FAILED = []


def check(cond, msg):
    if cond:
        log("ok:", msg)
    else:
        log("FAIL:", msg)
        FAILED.append(msg)


def setup():
    if os.geteuid() != 0:
        skip("needs root (network namespaces)")
    if shutil.which("ip") is None or shutil.which("tc") is None:
        skip("iproute2 is missing")
    for ns in [HUB] + NS:
        if run("ip", "netns", "add", ns, check=False).returncode != 0:
            skip("cannot create network namespaces")
    for ns in [HUB] + NS:
        # No IPv6: no router solicitations or neighbour discovery on the links.
        run("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1", ns=ns, check=False)
        run("ip", "link", "set", "lo", "up", ns=ns)
    if run("ip", "-n", HUB, "link", "add", BRIDGE, "type", "bridge", check=False).returncode:
        skip("no bridge support")
    run("ip", "-n", HUB, "addr", "add", f"{HUB_ADDR}/24", "dev", BRIDGE)
    run("ip", "-n", HUB, "link", "set", BRIDGE, "up")
    for i in range(NODES):
        r = run("ip", "-n", NS[i], "link", "add", VETH[i], "type", "veth", "peer", "name",
                PEER[i], "netns", HUB, check=False)
        if r.returncode != 0:
            skip("cannot create veth pairs: " + r.stderr.strip())
        run("ip", "-n", HUB, "link", "set", PEER[i], "master", BRIDGE)
        run("ip", "-n", HUB, "link", "set", PEER[i], "up")
        run("ip", "-n", NS[i], "addr", "add", f"{ADDR[i]}/24", "dev", VETH[i])
        # One frame per segment: tbf and the counters see wire-sized frames.
        run("ethtool", "-K", VETH[i], "tso", "off", "gso", "off", "gro", "off", ns=NS[i],
            check=False)
        run("ip", "-n", NS[i], "link", "set", VETH[i], "up")
        r = run("tc", "-n", NS[i], "qdisc", "add", "dev", VETH[i], "root", "tbf", "rate",
                HEALTHY_TBF, "burst", "8kb", "latency", "400ms", check=False)
        if r.returncode != 0:
            skip("tc tbf unavailable: " + r.stderr.strip())
        # Cubic keeps a shaper's queue busy the way the ring's bulk transfers would.
        run("sysctl", "-qw", "net.ipv4.tcp_congestion_control=cubic", ns=NS[i], check=False)


def shape(i, rate, burst="8kb", limit=None):
    args = ["tc", "-n", NS[i], "qdisc", "replace", "dev", VETH[i], "root", "tbf", "rate", rate,
            "burst", burst]
    args += ["limit", limit] if limit else ["latency", "400ms"]
    run(*args)


# The agents stream to the hub's bridge address, not loopback: the aggregator wants a token
# there (secure by default, exporters/README.md "Running across nodes"), made the way README says.
TOKEN_FILE = os.path.join(WORK, "token")


def ensure_token():
    if not os.path.exists(TOKEN_FILE):
        token = run("openssl", "rand", "-hex", "32").stdout.strip()
        fd = os.open(TOKEN_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, (token + "\n").encode())
        os.close(fd)


def start_aggregator(extra_args=()):
    ensure_token()
    out = open(os.path.join(WORK, "aggregator.log"), "w")
    p = subprocess.Popen(["ip", "netns", "exec", HUB, AGGREGATOR, f"--grpc-listen={HUB_ADDR}:0",
                          "--http-listen=127.0.0.1:0", f"--auth-token-file={TOKEN_FILE}",
                          f"--history-path={os.path.join(WORK, 'history.db')}", *extra_args],
                         stdout=subprocess.PIPE, stderr=out, text=True)
    PROCS.append(p)
    line = p.stdout.readline()
    m = re.search(r"grpc=[^ ]*:(\d+) http=[^ ]*:(\d+)", line)
    if not m:
        raise RuntimeError("aggregator did not start: " + line)
    return int(m.group(1)), int(m.group(2))


def http(port, path, host="127.0.0.1"):
    """The body at path, following redirects (a sharded aggregator's 307 to a communicator's
    owner)."""
    r = run("curl", "-sSL", "--max-time", "5", f"http://{host}:{port}{path}", ns=HUB)
    return r.stdout


def metric_values(port, name):
    """{labels-string: value} of one metric family's samples."""
    out = {}
    for line in http(port, "/metrics").splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, _, value = line.rpartition(" ")
            out[key[len(name):]] = float(value)
    return out


def wait_for(what, cond, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.2)
    raise RuntimeError("timed out waiting for " + what)


def delay_file(phase_name, rank):
    """The file whose integer becomes that rank's extra compute (ms) from its next iteration."""
    return os.path.join(WORK, f"{phase_name}-delay-{rank}")


def agent_socket(phase_name, node):
    """The GPU socket of node's agent in a phase (the ranks of every job on the node use it)."""
    return os.path.join(WORK, f"{phase_name}-n{node}.sock")


def start_rank(phase_name, node, rank, nranks, right_node, comm_hash, nbytes, iterations,
               compute_ms, delay_ms=0, port=7000, env=None, log_name=None):
    """One rank of fabricscope-ring-allreduce on `node`, sending to right_node, reporting to the
    node's agent of phase_name; env: added to its environment (a job's identity)."""
    out = open(os.path.join(WORK, f"{log_name or phase_name}-rank{rank}.log"), "w")
    p = subprocess.Popen(["ip", "netns", "exec", NS[node], RING, f"--rank={rank}",
                          f"--nranks={nranks}", f"--listen={ADDR[node]}:{port}",
                          f"--right={ADDR[right_node]}:{port}", f"--plugin={PLUGIN}",
                          f"--bytes={nbytes}", f"--iterations={iterations}",
                          f"--compute-ms={compute_ms}", f"--delay-ms={delay_ms}",
                          f"--delay-file={delay_file(phase_name, rank)}",
                          f"--comm-hash={comm_hash:x}", "--timeout=100"],
                         stdout=out, stderr=subprocess.STDOUT,
                         env=dict(os.environ, FABRICSCOPE_GPU_SOCKET=agent_socket(phase_name, node),
                                  **(env or {})))
    PROCS.append(p)
    return p


def phase(name, grpc_port, http_port, comm_hash, declared, delay_rank=-1, delay_ms=0,
          capture_node=-1, iterations=None, agent_args=None, nbytes=None, compute_ms=50,
          poll=None, min_instances=None, agent_env=None, http_host="127.0.0.1", on_start=None,
          rank_env=None):
    """Runs one all-reduce job with fresh agents; returns the instances of its communicator.

    grpc_port: the aggregator's, or a list (node i streams to grpc_port[i % len]: sharded
    aggregators); http_port (on http_host) answers for the communicator, or redirects there.
    on_start(): called once the ranks run, before the first query.

    capture_node: that node's agent also captures its veth (--capture), so its
    collectives are joined with the packet-level loss events too. agent_args: the agents'
    options beyond node, interface, line rate, aggregator and GPU socket (default: 1 ms
    samples and 200 ms windows; [] = the agents' defaults). poll(instances): called about
    every 200 ms with the communicator's instances so far while the job runs and until
    min_instances (default all) of them are matched. agent_env: {node index: {name: value}},
    environment added to that node's agent; rank_env: environment added to every rank (the
    job's identity, FABRICSCOPE_JOB_ID)."""
    iterations = iterations or ITERATIONS
    nbytes = nbytes or BYTES
    if agent_args is None:
        agent_args = ["--sample-period=1ms", "--window=200ms"]
    log(f"phase {name}: declared {declared}")
    ports = grpc_port if isinstance(grpc_port, list) else [grpc_port]
    agents = []
    for i in range(NODES):
        cfg = os.path.join(WORK, "agent.yaml")
        open(cfg, "w").write("node: x\n")
        sock = agent_socket(name, i)
        logf = open(os.path.join(WORK, f"{name}-agent-n{i}.log"), "w")
        p = subprocess.Popen(["ip", "netns", "exec", NS[i], AGENT, f"--config={cfg}",
                              f"--node=n{i}", f"--interfaces={VETH[i]}",
                              f"--line-rate={VETH[i]}={declared[i]}",
                              f"--aggregator={HUB_ADDR}:{ports[i % len(ports)]}",
                              f"--auth-token-file={TOKEN_FILE}",
                              f"--gpu-socket={sock}", "--status=off"] + agent_args +
                             ([f"--capture={VETH[i]}"] if i == capture_node else []),
                             stdout=logf, stderr=logf,
                             env=dict(os.environ, **((agent_env or {}).get(i, {}))))
        PROCS.append(p)
        agents.append((p, sock))
    for p, sock in agents:
        wait_for("agent GPU socket", lambda: os.path.exists(sock) or p.poll() is not None)
        if p.poll() is not None:
            raise RuntimeError(f"agent exited, see {WORK}")
    ranks = [start_rank(name, i, i, NODES, (i + 1) % NODES, comm_hash, nbytes, iterations,
                        compute_ms, delay_ms if i == delay_rank else 0, env=rank_env)
             for i in range(NODES)]
    comm = f"{comm_hash >> 32:08x}"
    if on_start is not None:
        on_start()

    def mine():
        body = json.loads(http(http_port, f"/api/collectives/slow?limit=0&comm={comm}",
                               http_host))
        return [c for c in body["collectives"] if c["comm"] == comm]

    deadline = time.monotonic() + 110
    while poll is not None and any(p.poll() is None for p in ranks):
        if time.monotonic() > deadline:
            break
        poll(mine())
        time.sleep(0.2)
    for i, p in enumerate(ranks):
        if p.wait(timeout=max(1, deadline - time.monotonic())) != 0:
            raise RuntimeError(f"rank {i} failed: see {WORK}/{name}-rank{i}.log")
    want = min_instances or iterations

    def instances():
        got = mine()
        if poll is not None:
            poll(got)
        return got if len(got) >= want else None

    try:
        got = wait_for(f"{want} matched instances of phase {name}", instances, 20)
    finally:
        for p, _ in agents:
            p.send_signal(signal.SIGTERM)
        for p, _ in agents:
            p.wait(timeout=10)
    json.dump(got, open(os.path.join(WORK, f"{name}.json"), "w"), indent=1)
    causes = {}
    for c in got:
        causes[c["cause"]] = causes.get(c["cause"], 0) + 1
    log(f"phase {name}: causes {causes}; skew " +
        ", ".join(f"{c['skew_seconds'] * 1e3:.0f}ms" for c in got[:5]))
    return got
