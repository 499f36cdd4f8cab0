#!/usr/bin/env python3
"""Two leaves and a spine in a box: the fabric model from real LLDP, and fabric_oversubscribed.

Topology: two leaf switches, each a bridge in its own namespace (leaf-a is the box's hub, where
the aggregator runs; leaf-b a sixth namespace); nodes n0, n1 hang on leaf-a and n2, n3 on leaf-b,
each by a veth shaped with tbf at 40 Mb/s (declared 80 Mb/s: host ports with headroom). The two
bridges are joined by one veth pair, the spine link, shaped at 60 Mb/s each way: below the 80 Mb/s
the two nodes of a leaf can send. lldpd runs in every node and leaf namespace, each on its own
control socket, and announces real LLDP frames over the veths (the leaves as "leaf-a" and
"leaf-b"); each agent reads its node's lldpd (--lldpd-socket). The aggregator's topology file
names the two leaves and their one 60 Mb/s uplink, and no node: LLDP places the nodes.

Two jobs run one after the other, a ring all-reduce over TCP on all four nodes each:
  ordered      ranks 0..3 on n0..n3: two ring hops stay on a leaf, one hop crosses the spine
               each way (one 40 Mb/s flow: 2/3 of the spine). Not fabric_oversubscribed; leaf-
               local share 0.5.
  alternating  ranks 0..3 on n0, n2, n1, n3: every hop crosses, two flows share the spine each
               way (each gets 30 Mb/s, the host ports run at 0.375 of their declared rate). Named
               fabric_oversubscribed at leaf-a or leaf-b; leaf-local share 0.

Then the aggregator's live page in headless Chromium shows both leaves, each job's leaf-local
share and the alternating ring's instances naming the leaf's uplinks.

Usage: fabric_leaves_test.py AGENT AGGREGATOR RING PLUGIN
Exit 77 (skipped) without root, namespaces, bridge, tbf or lldpd; 0 on success; 1 on failure
(a step of the set-up that fails once those exist is a failure). ~10 s.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import box  # noqa: E402
import cdp  # noqa: E402
from box import (ADDR, FAILED, HUB, HUB_ADDR, NS, PEER, PROCS, TAG, TOKEN_FILE,  # noqa: E402
                 VETH, WORK, check, configure, http, log, metric_values, run, skip, start_rank,
                 wait_for)

AGENT, AGGREGATOR, RING, PLUGIN = sys.argv[1:5]
configure(AGENT, AGGREGATOR, RING, PLUGIN)

LEAF_B = f"fsbox{TAG}lb"
LEAF_OF_NODE = [HUB, HUB, LEAF_B, LEAF_B]
LEAF_NAME = {HUB: "leaf-a", LEAF_B: "leaf-b"}
SPINE = (f"fsb{TAG}sa", f"fsb{TAG}sb")  # leaf-a's end, leaf-b's end
HOST_TBF, HOST_DECLARED, SPINE_TBF = "40mbit", "80mbit", "60mbit"
BYTES, ITERATIONS = 512 * 1024, 8


def lldp_socket(ns):
    return os.path.join(WORK, f"lldp-{ns}.sock")


def start_lldpd(ns, ifaces, hostname=None):
    """lldpd in ns sending on ifaces every second, on its own control socket. It starts paused
    until a client says resume (lldpcli(8)); tests/agent/lldp_neighbors_test.cc says why the
    test resumes it itself."""
    run("lldpd", "-u", lldp_socket(ns), "-I", ",".join(ifaces), ns=ns)
    wait_for(f"lldpd in {ns}", lambda: run("lldpcli", "-u", lldp_socket(ns), "resume",
                                           check=False).returncode == 0, 10)
    run("lldpcli", "-u", lldp_socket(ns), "configure", "lldp", "tx-interval", "1")
    if hostname:
        run("lldpcli", "-u", lldp_socket(ns), "configure", "system", "hostname", hostname)


def setup():
    if os.geteuid() != 0:
        skip("needs root (network namespaces)")
    for tool in ("ip", "tc", "lldpd", "lldpcli"):
        if shutil.which(tool) is None:
            skip(f"{tool} is missing (deploy/install-deps.sh installs it)")
    # lldpcli connects as lldpd's user (_lldpd): the sockets' folder must let it through.
    os.chmod(WORK, 0o755)
    for ns in [HUB, LEAF_B] + NS:
        if run("ip", "netns", "add", ns, check=False).returncode != 0:
            skip("cannot create network namespaces")
        run("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
            "net.ipv6.conf.default.disable_ipv6=1", ns=ns, check=False)
        run("ip", "link", "set", "lo", "up", ns=ns)
    for leaf in (HUB, LEAF_B):
        if run("ip", "-n", leaf, "link", "add", box.BRIDGE, "type", "bridge",
               check=False).returncode:
            skip("no bridge support")
        run("ip", "-n", leaf, "link", "set", box.BRIDGE, "up")
    run("ip", "-n", HUB, "addr", "add", f"{HUB_ADDR}/24", "dev", box.BRIDGE)
    run("ip", "-n", HUB, "link", "add", SPINE[0], "type", "veth", "peer", "name", SPINE[1],
        "netns", LEAF_B)
    for leaf, end in ((HUB, SPINE[0]), (LEAF_B, SPINE[1])):
        run("ip", "-n", leaf, "link", "set", end, "master", box.BRIDGE)
        run("ip", "-n", leaf, "link", "set", end, "up")
        # The spine's egress at each end: leaf-a -> leaf-b and leaf-b -> leaf-a.
        if run("tc", "-n", leaf, "qdisc", "add", "dev", end, "root", "tbf", "rate", SPINE_TBF,
               "burst", "8kb", "latency", "400ms", check=False).returncode:
            skip("tc tbf unavailable")
    for i, ns in enumerate(NS):
        leaf = LEAF_OF_NODE[i]
        run("ip", "-n", ns, "link", "add", VETH[i], "type", "veth", "peer", "name", PEER[i],
            "netns", leaf)
        run("ip", "-n", leaf, "link", "set", PEER[i], "master", box.BRIDGE)
        run("ip", "-n", leaf, "link", "set", PEER[i], "up")
        run("ip", "-n", ns, "addr", "add", f"{ADDR[i]}/24", "dev", VETH[i])
        run("ethtool", "-K", VETH[i], "tso", "off", "gso", "off", "gro", "off", ns=ns,
            check=False)
        run("ip", "-n", ns, "link", "set", VETH[i], "up")
        run("tc", "-n", ns, "qdisc", "add", "dev", VETH[i], "root", "tbf", "rate", HOST_TBF,
            "burst", "8kb", "latency", "400ms")
    for leaf in (HUB, LEAF_B):
        ports = [PEER[i] for i in range(len(NS)) if LEAF_OF_NODE[i] == leaf]
        start_lldpd(leaf, ports, LEAF_NAME[leaf])
    for i, ns in enumerate(NS):
        start_lldpd(ns, [VETH[i]])


def cleanup():
    box.cleanup()
    for ns in [HUB, LEAF_B] + NS:  # lldpd daemonizes: no pid of ours to go by
        subprocess.run(f"ip netns pids {ns} | xargs -r kill -9", shell=True, capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def start_agents(grpc_port):
    agents = []
    for i, ns in enumerate(NS):
        logf = open(os.path.join(WORK, f"agent-n{i}.log"), "w")
        sock = box.agent_socket("fabric", i)
        cfg = os.path.join(WORK, "agent.yaml")  # not the host's /etc/fabricscope/agent.yaml
        open(cfg, "w").write("node: x\n")
        p = subprocess.Popen(["ip", "netns", "exec", ns, AGENT, f"--config={cfg}", f"--node=n{i}",
                              f"--interfaces={VETH[i]}", f"--line-rate={VETH[i]}={HOST_DECLARED}",
                              f"--aggregator={HUB_ADDR}:{grpc_port}",
                              f"--auth-token-file={TOKEN_FILE}", f"--gpu-socket={sock}",
                              f"--lldpd-socket={lldp_socket(ns)}", "--lldp-refresh-period=1s",
                              "--sample-period=1ms", "--window=200ms", "--status=off"],
                             stdout=logf, stderr=logf)
        PROCS.append(p)
        agents.append(p)
    for i, p in enumerate(agents):
        wait_for("agent GPU socket",
                 lambda: os.path.exists(box.agent_socket("fabric", i)) or p.poll() is not None)
        if p.poll() is not None:
            raise RuntimeError(f"agent n{i} exited, see {WORK}/agent-n{i}.log")


def run_job(name, http_port, comm_hash, nodes):
    """Rank r on nodes[r], sending to rank r+1; returns its matched instances."""
    ranks = [start_rank("fabric", nodes[r], r, len(nodes), nodes[(r + 1) % len(nodes)],
                        comm_hash, BYTES, ITERATIONS, 20, env={"FABRICSCOPE_JOB_ID": name},
                        log_name=name)
             for r in range(len(nodes))]
    for r, p in enumerate(ranks):
        if p.wait(timeout=100) != 0:
            raise RuntimeError(f"{name} rank {r} failed: see {WORK}/{name}-rank{r}.log")
    comm = f"{comm_hash >> 32:08x}"

    def matched():
        body = json.loads(http(http_port, f"/api/collectives/slow?limit=0&comm={comm}"))
        got = [c for c in body["collectives"] if c["comm"] == comm]
        return got if len(got) >= ITERATIONS else None

    got = wait_for(f"{ITERATIONS} matched instances of {name}", matched, 20)
    json.dump(got, open(os.path.join(WORK, f"{name}.json"), "w"), indent=1)
    causes = {}
    for c in got:
        causes[c["cause"]] = causes.get(c["cause"], 0) + 1
    log(f"job {name}: causes {causes}; " +
        "; ".join(f"{c['duration_seconds'] * 1e3:.0f} ms {c['evidence']}" for c in got[:2]))
    return got


def local_share(http_port, job):
    for labels, value in metric_values(http_port, "fabricscope_traffic_local_ratio").items():
        if 'scope="leaf"' in labels and f'job_id="{job}"' in labels and "comm=" not in labels:
            return value
    return None


def check_live_page(http_port):
    """The aggregator's live page in headless Chromium: #leaves lists both leaves with their
    nodes, #leaves-local the last job's leaf-local share, #slow-collectives the alternating ring's
    instances with the leaf whose uplinks held them back; no console error."""
    b = cdp.Browser(prefix=["ip", "netns", "exec", HUB], width=1400, height=1200)
    try:
        b.open(f"http://127.0.0.1:{http_port}/")
        rows = b.wait_for("#leaves rows", """(() => { const r = [...document.querySelectorAll(
            '#leaves tbody tr')].map(tr => tr.textContent); return r.length ? r : null; })()""",
                          timeout=15)
        check(len(rows) == 2 and rows[0].startswith("leaf-afile") and
              rows[1].startswith("leaf-bfile"), f"live page: #leaves lists both leaves ({rows})")
        local = b.wait_for("#leaves-local", "document.getElementById('leaves-local').textContent"
                           " || null", timeout=10)
        # The ordered job's bytes may have left the 10 s horizon by now: the last job's stay.
        check("alternating 0" in local, f"live page: the job's leaf-local share ({local})")
        slow = b.wait_for("#slow-collectives rows", """[...document.querySelectorAll(
            '#slow-collectives tbody tr')].map(tr => tr.textContent)""", timeout=10)
        check(any("fabric_oversubscribed" in r and "uplinks carried" in r for r in slow),
              "live page: #slow-collectives names the leaf's uplinks")
        errors = b.errors()
        check(not errors, "live page: no console error: " + "; ".join(errors))
    except cdp.CdpError as e:
        check(False, f"live page: {e}")
    finally:
        b.close()


def main():
    try:
        setup()
    except RuntimeError as e:
        cleanup()
        log(f"FAIL: set-up: {e}")
        return 1
    try:
        topology = os.path.join(WORK, "topology.yaml")
        open(topology, "w").write(
            "leaves:\n"
            f"  - {{name: leaf-a, uplinks: 1, uplink_speed: {SPINE_TBF}}}\n"
            f"  - {{name: leaf-b, uplinks: 1, uplink_speed: {SPINE_TBF}}}\n")
        grpc_port, http_port = box.start_aggregator([f"--topology-file={topology}"])
        start_agents(grpc_port)

        def placed():
            f = json.loads(http(http_port, "/api/fabric"))
            nodes = {leaf["name"]: leaf["nodes"] for leaf in f["leaves"]}
            return f if nodes == {"leaf-a": ["n0", "n1"], "leaf-b": ["n2", "n3"]} else None

        f = wait_for("the nodes on their leaves from LLDP", placed, 30)
        check(all(leaf["source"] == "file" for leaf in f["leaves"]),
              "LLDP's chassis names are the file's leaves (no LLDP-only leaf)")
        check(f["disagreements"] == [] and f["multi_leaf_nodes"] == [],
              "no disagreement, no node on two leaves")

        ordered = run_job("ordered", http_port, 0xf1ab0001c0ffee01, [0, 1, 2, 3])
        share_ordered = local_share(http_port, "ordered")
        alternating = run_job("alternating", http_port, 0xf1ab0002c0ffee02, [0, 2, 1, 3])
        share_alternating = local_share(http_port, "alternating")

        named = [c for c in alternating if c["cause"] == "fabric_oversubscribed"]
        check(len(named) >= 0.7 * len(alternating),
              f"alternating ring: {len(named)} of {len(alternating)} fabric_oversubscribed")
        check(all("leaf leaf-" in c["evidence"] and "uplinks carried" in c["evidence"]
                  for c in named), "the evidence names the leaf and its uplinks' share")
        check(all(c["bottleneck"] and c["bottleneck"]["node"] in ("n0", "n1", "n2", "n3")
                  for c in named), "a rank that sent across is the bottleneck")
        check(not any(c["cause"] == "fabric_oversubscribed" for c in ordered),
              "ordered ring: never fabric_oversubscribed")
        check(share_ordered is not None and abs(share_ordered - 0.5) < 0.05,
              f"ordered ring's leaf-local share 0.5 ({share_ordered})")
        check(share_alternating is not None and share_alternating < 0.05,
              f"alternating ring's leaf-local share 0 ({share_alternating})")
        check_live_page(http_port)
    finally:
        cleanup()
    if FAILED:
        log(f"{len(FAILED)} check(s) failed; logs in {WORK}")
        return 1
    shutil.rmtree(WORK, ignore_errors=True)
    log("all checks passed")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: (cleanup(), sys.exit(1)))
    sys.exit(main())
