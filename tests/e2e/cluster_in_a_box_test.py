#!/usr/bin/env python3
"""Cluster in a box: four network namespaces as four nodes, real traffic, real processes.

Topology: namespaces n0..n3 (the nodes) each hold one veth (10.77.0.{1..4}/24) whose peer is
enslaved to a bridge in a fifth namespace, hub (10.77.0.254/24), where fabricscope-aggregator
listens (gRPC on the bridge address, HTTP on the hub's loopback). Every node's veth egress is
shaped with tc tbf; the node runs one fabricscope-agent sampling its veth at 1 ms and one rank
of fabricscope-ring-allreduce: a ring all-reduce over TCP between ring neighbours (real data,
checked), each collective reported through the real NCCL profiler plugin
(libnccl-profiler-fabricscope.so) by the test harness, into the agent's GPU ingest socket.

Declared line rates: a healthy node's veth is shaped to half its declared rate (TCP through
the shaper then peaks at ~0.5 of line rate: a link with headroom). Three phases, each with
fresh agents and its own communicator:
  compute  rank 3 computes 300 ms longer before every collective (a compute straggler): the
           aggregator must call the instances compute_straggler with rank 3 / n3 as the
           bottleneck and give rank 3 the highest straggler score;
  slow     n1's link trained down: shaped and declared at a tenth of the others' rate (a
           straggler by network): n1's collectives network_saturated with microbursts on its
           veth, the instances' bottleneck n1 and its veth, the others waiting_on_peers;
  lossy    n2's shaper has a queue of two frames (tail drops, TCP retransmits): its
           collectives network_lossy, the instances' bottleneck n2; n2's agent also captures
           its veth, and its collectives carry the TCP retransmissions the capture saw.
Then: the rank heat map shows ring-neighbour traffic only, /metrics passes promtool check
metrics, and the heat-map SVGs rendered by headless Chromium show the expected hot cells.

Usage: cluster_in_a_box_test.py AGENT AGGREGATOR RING PLUGIN OUT_DIR
Exit 77 (skipped) without root, namespaces, veth, bridge or tbf; 0 on success; 1 on failure.
"""

import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import urllib.parse
import zlib

AGENT, AGGREGATOR, RING, PLUGIN, OUT = sys.argv[1:6]
TAG = str(os.getpid() % 100000)
NODES = 4
HUB = f"fsbox{TAG}hub"
NS = [f"fsbox{TAG}n{i}" for i in range(NODES)]
VETH = [f"fsb{TAG}n{i}" for i in range(NODES)]  # node side (< 16 characters)
PEER = [f"fsb{TAG}p{i}" for i in range(NODES)]  # hub side
BRIDGE = f"fsb{TAG}br"
HUB_ADDR = "10.77.0.254"
ADDR = [f"10.77.0.{i + 1}" for i in range(NODES)]
WORK = tempfile.mkdtemp(prefix="fabricscope-box.")
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


def start_aggregator():
    out = open(os.path.join(WORK, "aggregator.log"), "w")
    p = subprocess.Popen(["ip", "netns", "exec", HUB, AGGREGATOR, f"--grpc-listen={HUB_ADDR}:0",
                          "--http-listen=127.0.0.1:0"], stdout=subprocess.PIPE, stderr=out,
                         text=True)
    PROCS.append(p)
    line = p.stdout.readline()
    m = re.search(r"grpc=[^ ]*:(\d+) http=[^ ]*:(\d+)", line)
    if not m:
        raise RuntimeError("aggregator did not start: " + line)
    return int(m.group(1)), int(m.group(2))


def http(port, path):
    r = run("curl", "-sS", "--max-time", "5", f"http://127.0.0.1:{port}{path}", ns=HUB)
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


def phase(name, grpc_port, http_port, comm_hash, declared, delay_rank=-1, delay_ms=0,
          capture_node=-1):
    """Runs one all-reduce job with fresh agents; returns the instances of its communicator.

    capture_node: that node's agent also captures its veth (--capture), so its
    collectives are joined with the packet-level loss events too."""
    log(f"phase {name}: declared {declared}")
    agents = []
    for i in range(NODES):
        cfg = os.path.join(WORK, "agent.yaml")
        open(cfg, "w").write("node: x\n")
        sock = os.path.join(WORK, f"{name}-n{i}.sock")
        logf = open(os.path.join(WORK, f"{name}-agent-n{i}.log"), "w")
        p = subprocess.Popen(["ip", "netns", "exec", NS[i], AGENT, f"--config={cfg}",
                              f"--node=n{i}", f"--interfaces={VETH[i]}",
                              f"--line-rate={VETH[i]}={declared[i]}", "--sample-period=1ms",
                              "--window=200ms", f"--aggregator={HUB_ADDR}:{grpc_port}",
                              f"--gpu-socket={sock}", "--status=off"] +
                             ([f"--capture={VETH[i]}"] if i == capture_node else []),
                             stdout=logf, stderr=logf)
        PROCS.append(p)
        agents.append((p, sock))
    for p, sock in agents:
        wait_for("agent GPU socket", lambda: os.path.exists(sock) or p.poll() is not None)
        if p.poll() is not None:
            raise RuntimeError(f"agent exited, see {WORK}")
    ranks = []
    for i in range(NODES):
        env = dict(os.environ, FABRICSCOPE_GPU_SOCKET=agents[i][1])
        out = open(os.path.join(WORK, f"{name}-rank{i}.log"), "w")
        p = subprocess.Popen(["ip", "netns", "exec", NS[i], RING, f"--rank={i}",
                              f"--nranks={NODES}", f"--listen={ADDR[i]}:7000",
                              f"--right={ADDR[(i + 1) % NODES]}:7000", f"--plugin={PLUGIN}",
                              f"--bytes={BYTES}", f"--iterations={ITERATIONS}",
                              "--compute-ms=50", f"--delay-ms={delay_ms if i == delay_rank else 0}",
                              f"--comm-hash={comm_hash:x}", "--timeout=100"],
                             stdout=out, stderr=subprocess.STDOUT, env=env)
        PROCS.append(p)
        ranks.append(p)
    for i, p in enumerate(ranks):
        if p.wait(timeout=110) != 0:
            raise RuntimeError(f"rank {i} failed: see {WORK}/{name}-rank{i}.log")
    comm = f"{comm_hash >> 32:08x}"

    def instances():
        body = json.loads(http(http_port, "/api/collectives/slow?limit=0"))
        mine = [c for c in body["collectives"] if c["comm"] == comm]
        return mine if len(mine) >= ITERATIONS else None

    try:
        got = wait_for(f"{ITERATIONS} matched instances of phase {name}", instances, 20)
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


def majority(instances, pred):
    return sum(1 for c in instances if pred(c)) >= 0.7 * len(instances)


def png_pixels(path):
    """Decodes an 8-bit RGB/RGBA non-interlaced PNG: (width, height, rows of (r, g, b))."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, "unsupported PNG"
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(h):
        f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return w, h, rows


def near(p, q, tol=40):
    return all(abs(a - b) <= tol for a, b in zip(p, q))


def render(svg_path, png_path):
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return False
    run(browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
        f"--screenshot={png_path}", "--window-size=1400,900", "file://" + svg_path,
        timeout=120, check=False)
    return os.path.exists(png_path)


def cell_centres(svg, color):
    """Centres of the <rect> cells filled with `color` (#rrggbb) in the SVG."""
    out = []
    for m in re.finditer(r"<rect ([^>]*)/?>", svg):
        attrs = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if attrs.get("fill", "").lower() == color.lower() and "width" in attrs:
            x, y = float(attrs.get("x", 0)), float(attrs.get("y", 0))
            out.append((x + float(attrs["width"]) / 2, y + float(attrs["height"]) / 2))
    return out


def check_picture(name, svg, png, hot, cold):
    """The PNG is not blank, and the SVG's hot and cold cells show their colours in it."""
    w, h, rows = png_pixels(png)
    colours = set()
    for r in rows[::7]:
        colours.update(r[::7])
    check(len(colours) > 8, f"{name}: the rendering is not blank ({len(colours)} colours)")
    for colour, label in ((hot, "hot"), (cold, "cold")):
        centres = cell_centres(svg, colour)
        seen = [rows[int(y)][int(x)] for x, y in centres if int(x) < w and int(y) < h]
        rgb = tuple(int(colour[k:k + 2], 16) for k in (1, 3, 5))
        check(seen and all(near(p, rgb) for p in seen),
              f"{name}: {len(seen)} {label} cells drawn in {colour}")


def main():
    os.makedirs(OUT, exist_ok=True)
    try:
        setup()
        grpc_port, http_port = start_aggregator()
        healthy = [HEALTHY_DECLARED] * NODES

        # Compute straggler first (the straggler score is a sliding window per rank).
        got = phase("compute", grpc_port, http_port, 0xc0c0c0c0_00000001, healthy, 3, 300)
        check(majority(got, lambda c: c["cause"] == "compute_straggler" and
                       c["bottleneck"] and c["bottleneck"]["rank"] == 3 and
                       c["bottleneck"]["node"] == "n3"),
              "compute phase: instances are compute_straggler with rank 3 on n3 as bottleneck")
        check(majority(got, lambda c: c["skew_seconds"] > 0.2),
              "compute phase: arrival skew above 200 ms")
        scores = metric_values(http_port, "fabricscope_straggler_score")
        s3 = scores.get('{node="n3",rank="3"}', 0)
        others = max(v for k, v in scores.items() if 'rank="3"' not in k)
        check(s3 > 0.5 and others < 0.1,
              f"straggler score: rank 3 {s3:.2f}, the others at most {others:.2f}")
        collectives_svg = http(http_port, "/heatmap/collectives?comm=c0c0c0c0")

        # A slow link: n1 trained down to a tenth.
        shape(1, SLOW_TBF, burst="2kb")
        declared = list(healthy)
        declared[1] = SLOW_DECLARED
        got = phase("slow", grpc_port, http_port, 0x51051051_00000002, declared)
        shape(1, HEALTHY_TBF)
        check(majority(got, lambda c: c["cause"] == "network_saturated" and
                       c["bottleneck"]["node"] == "n1" and c["bottleneck"]["port"] == VETH[1]),
              f"slow phase: instances network_saturated, bottleneck n1 port {VETH[1]}")
        n1 = [r for c in got for r in c["ranks"] if r["node"] == "n1"]
        check(majority(n1, lambda r: r["cause"] == "network_saturated" and
                       re.search(r"[1-9]\d* microbursts", r["detail"])),
              "slow phase: n1's collectives overlap microbursts and are network_saturated")
        peers = [r for c in got for r in c["ranks"] if r["node"] != "n1"]
        check(majority(peers, lambda r: r["cause"] == "waiting_on_peers"),
              "slow phase: the other ranks wait on peers")
        overlap = metric_values(http_port, "fabricscope_port_microburst_overlap_ratio")
        n1_overlap = max((v for k, v in overlap.items() if 'node="n1"' in k), default=0)
        check(n1_overlap > 0.3, f"microburst overlap ratio of n1's port {n1_overlap:.2f}")

        # A lossy link: n2's shaper queue holds two frames.
        shape(2, HEALTHY_TBF, burst="3kb", limit="3kb")
        got = phase("lossy", grpc_port, http_port, 0x1055e5ee_00000003, healthy,
                    capture_node=2)
        shape(2, HEALTHY_TBF)
        check(majority(got, lambda c: c["cause"] == "network_lossy" and
                       c["bottleneck"]["node"] == "n2"),
              "lossy phase: instances network_lossy, bottleneck n2")
        # n2's agent also captured its veth: the retransmissions it saw are joined per collective.
        n2 = [r for c in got for r in c["ranks"] if r["node"] == "n2"]
        check(majority(n2, lambda r: re.search(r"[1-9]\d* loss events in the capture",
                                               r["detail"])),
              "lossy phase: n2's collectives carry the capture's loss events "
              f"(e.g. {n2[0]['detail'] if n2 else 'none'!r})")

        causes = metric_values(http_port, "fabricscope_collectives_by_cause_total")
        check(all(causes.get(f'{{cause="{c}"}}', 0) >= 7 for c in
                  ("compute_straggler", "network_saturated", "network_lossy")),
              f"fabricscope_collectives_by_cause_total: {causes}")
        skew = metric_values(http_port, "fabricscope_collective_arrival_skew_seconds_count")
        check(sum(skew.values()) >= 3 * ITERATIONS, f"arrival skew histogram count {skew}")

        # Rank x rank bytes of the compute phase's communicator: ring neighbours only.
        ranks = json.loads(http(http_port, "/heatmap/ranks?comm=c0c0c0c0&format=json"))
        values = ranks["values"]
        nonzero = {(s, d) for s in range(len(values)) for d in range(len(values[s]))
                   if values[s][d]}
        ring = {(s, (s + 1) % NODES) for s in range(NODES)}
        check(len(values) == NODES and ring <= nonzero and
              all((d - s) % NODES in (1, NODES - 1) for s, d in nonzero),
              f"rank heat map: ring-neighbour traffic only ({sorted(nonzero)})")

        body = http(http_port, "/metrics")
        open(os.path.join(WORK, "metrics.txt"), "w").write(body)
        r = subprocess.run(["promtool", "check", "metrics"], input=body, capture_output=True,
                           text=True)
        check(r.returncode == 0, "promtool check metrics: " + (r.stdout + r.stderr).strip()[:300])

        # The pictures.
        ranks_svg = http(http_port, "/heatmap/ranks?comm=c0c0c0c0")
        index = http(http_port, "/heatmap")
        check("/heatmap/collectives" in index and "/heatmap/ranks" in index,
              "the heat-map index links /heatmap/collectives and /heatmap/ranks")
        for name, svg, hot, cold in (("collectives", collectives_svg, "#fde725", "#440154"),
                                     ("ranks", ranks_svg, "#fde725", "#440154")):
            svg_path = os.path.join(OUT, f"heatmap_{name}.svg")
            png_path = os.path.join(OUT, f"heatmap_{name}.png")
            open(svg_path, "w").write(svg)
            if os.path.exists(png_path):
                os.remove(png_path)
            if not render(svg_path, png_path):
                check(False, f"{name}: chromium rendered {png_path}")
                continue
            check_picture(name, svg, png_path, hot, cold)
        log("screenshots in", OUT)
    except RuntimeError as e:
        FAILED.append(str(e))
        log("FAIL:", e)
    finally:
        cleanup()
    if FAILED:
        log(f"{len(FAILED)} failures; logs in {WORK}")
        return 1
    shutil.rmtree(WORK, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
