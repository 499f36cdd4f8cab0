"""Chaos that counts every window (issue 15): an agent in one network namespace streams 100 ms
windows over a veth pair to an aggregator in another, with its spool on, while this test kills
the aggregator at seeded random points, kills the agent with a full memory queue, cuts the link,
fills the spool's file system (a 48 KiB tmpfs) and corrupts a spool segment. After each, the
agent is stopped with SIGTERM while the aggregator is up, and the books are checked:

- the agent's exit line "uplink: last batch N, acked through M" has M == N;
- the aggregator's /api/nodes shows acked_seq == N for the node's instance, so every window
  1..N was stored by some aggregator (those acked before a kill by the one that died);
- fabricscope_aggregator_lost_batches_total counts only losses a configured bound allows and
  the agent counted too (the full spool: at most the agent's dropped count), and is 0
  otherwise (a corrupted segment of a killed agent is counted by the agent alone: the
  aggregator never hears of the sequence numbers past the damage);
- a killed agent's spooled windows are replayed by the next one: exactly the records its
  segments held (fabricscope_agent_spool_replayed_batches_total).

Prints one table row per scenario. Needs root (namespaces, tmpfs); exit 77 to skip.
Usage: chaos_test.py AGENT AGGREGATOR [--seed=N]"""

import json
import os
import random
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

TAG = str(os.getpid() % 100000)
NS_A, NS_H = f"fsch{TAG}a", f"fsch{TAG}h"
VETH_A, VETH_H = f"fc{TAG}a", f"fc{TAG}h"
ADDR_A, ADDR_H = "10.78.0.1", "10.78.0.2"
GRPC_PORT, HTTP_PORT = 19471, 19470
NODE = "chaos-node"
WORK = tempfile.mkdtemp(prefix="fabricscope-chaos.")
AGENT = AGGREGATOR = ""
ROWS = []


def log(*a):
    print("chaos:", *a, flush=True)


def run(*cmd, ns=None, check=True):
    if ns:
        cmd = ("ip", "netns", "exec", ns) + cmd
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r


def setup():
    for ns in (NS_A, NS_H):
        run("ip", "netns", "add", ns)
        run("ip", "link", "set", "lo", "up", ns=ns)
    run("ip", "link", "add", VETH_A, "netns", NS_A, "type", "veth", "peer", VETH_H, "netns", NS_H)
    run("ip", "addr", "add", f"{ADDR_A}/24", "dev", VETH_A, ns=NS_A)
    run("ip", "addr", "add", f"{ADDR_H}/24", "dev", VETH_H, ns=NS_H)
    run("ip", "link", "set", VETH_A, "up", ns=NS_A)
    run("ip", "link", "set", VETH_H, "up", ns=NS_H)


def teardown():
    for ns in (NS_A, NS_H):
        pids = run("ip", "netns", "pids", ns, check=False).stdout.split()
        for p in pids:
            try:
                os.kill(int(p), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        run("ip", "netns", "del", ns, check=False)
    run("umount", "-l", os.path.join(WORK, "spool"), check=False)
    shutil.rmtree(WORK, ignore_errors=True)


class Proc:
    def __init__(self, name, cmd, ns):
        self.log_path = os.path.join(WORK, f"{name}.log")
        self.out = open(self.log_path, "a")
        self.p = subprocess.Popen(("ip", "netns", "exec", ns) + tuple(cmd),
                                  stdout=self.out, stderr=subprocess.STDOUT)

    def text(self):
        with open(self.log_path) as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            self.p.kill()
            return self.p.wait()


def start_aggregator():
    a = Proc("aggregator", (AGGREGATOR, f"--grpc-listen={ADDR_H}:{GRPC_PORT}",
                            f"--http-listen=127.0.0.1:{HTTP_PORT}", "--allow-insecure"), NS_H)
    wait_for(lambda: "listening grpc=" in a.text(), 10, "the aggregator to listen")
    return a


def start_agent(spool, queue=900):
    return Proc("agent", (AGENT, f"--node={NODE}", f"--interfaces={VETH_A}", "--window=100ms",
                          "--status=off", "--gpu-socket=off", "--tcp=off", "--ethtool=off",
                          f"--spool-dir={spool}", f"--max-queued-batches={queue}",
                          f"--aggregator={ADDR_H}:{GRPC_PORT}"), NS_A)


def wait_for(cond, seconds, what):
    end = time.time() + seconds
    while time.time() < end:
        if cond():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def http(path):
    r = run("curl", "-s", "--max-time", "5", f"http://127.0.0.1:{HTTP_PORT}{path}", ns=NS_H,
            check=False)
    return r.stdout


def metric(body, name, labels=""):
    m = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", body, re.M)
    return float(m.group(1)) if m else 0.0


def node_view():
    try:
        for n in json.loads(http("/api/nodes") or "{}").get("nodes", []):
            if n["node"] == NODE:
                return n
    except json.JSONDecodeError:
        pass
    return None


def batches_stored(minimum):
    wait_for(lambda: metric(http("/metrics"), "fabricscope_aggregator_batches_total") >= minimum,
             20, f"{minimum} batches at the aggregator")


def spool_records(spool):
    """Records in every segment of the spool (length-prefixed, as collectors/uplink/spool.h writes them;
    the CRC is the agent's business)."""
    n = 0
    for root, _, files in os.walk(spool):
        for f in files:
            if not f.endswith(".seg"):
                continue
            data = open(os.path.join(root, f), "rb").read()
            off = 0
            while off + 8 <= len(data):
                length = struct.unpack_from("<I", data, off)[0]
                if off + 8 + length > len(data):
                    break
                off += 8 + length
                n += 1
    return n


def settle(agent, agg, scenario, lost_bound=0, replayed=None, lost_is_dropped=False):
    """Stops the agent with the aggregator up and checks the books; records the row.
    lost_is_dropped: the aggregator's lost count must be above 0 and at most the agent's own
    count of batches it dropped (neither in memory nor on disk): a batch already written to the
    stream when it was dropped may still have arrived, so the agent's count is an upper bound."""
    # The agent has caught up (its spool holds the last window or two, as its stats in its
    # latest batch say) before SIGTERM gives it 2 s: after a link outage TCP's backed-off
    # retransmission timer and the backlog can take several seconds.
    # Fresh batches first: the stats the aggregator holds are those of the last batch it got,
    # which, right after an outage, predate it.
    seen = node_view() or {}
    start = seen.get("batches", 0) if seen.get("instance_id") else 0

    def caught_up():
        now = node_view() or {}
        # The view may still be that of an earlier process whose spool was just replayed
        # (collectors/uplink/uplink_replay.cc sends it before the live stream connects): a different
        # instance afterwards is the live agent, counted from its first batch.
        base = start if now.get("instance_id") == seen.get("instance_id") else 0
        return (now.get("instance_id") and now.get("batches", 0) >= base + 5 and
                metric(http("/metrics"), "fabricscope_agent_spool_batches",
                       f'{{node="{NODE}"}}') <= 3)
    try:
        wait_for(caught_up, 90, f"{scenario}: the agent to catch up")
    except RuntimeError:
        body = http("/metrics")
        spooled = metric(body, "fabricscope_agent_spool_batches", '{node="%s"}' % NODE)
        tail = "\n".join(agent.text().splitlines()[-25:])
        log(f"{scenario}: the aggregator's view {node_view()} (from {seen}); spool batches "
            f"{spooled}; the agent's last lines:\n{tail}")
        raise
    if agent.stop() != 0:
        raise RuntimeError(f"{scenario}: the agent did not exit 0:\n{agent.text()[-2000:]}")
    m = re.findall(r"uplink: last batch (\d+), acked through (\d+)", agent.text())
    if not m:
        raise RuntimeError(f"{scenario}: no exit line from the agent:\n{agent.text()[-2000:]}")
    last, acked = int(m[-1][0]), int(m[-1][1])
    try:
        wait_for(lambda: (node_view() or {}).get("acked_seq", -1) >= last, 10,
                 f"{scenario}: acked_seq {last} at the aggregator")
    except RuntimeError:
        log(f"{scenario}: the aggregator's view {node_view()}; the agent's last lines:\n"
            + "\n".join(agent.text().splitlines()[-15:]))
        raise
    view = node_view()
    body = http("/metrics")
    lost = metric(body, "fabricscope_aggregator_lost_batches_total")
    full = metric(body, "fabricscope_agent_spool_dropped_batches_total",
                  f'{{node="{NODE}",reason="full"}}')
    corrupt = metric(body, "fabricscope_agent_spool_dropped_batches_total",
                     f'{{node="{NODE}",reason="corrupt"}}')
    dropped = metric(body, "fabricscope_agent_uplink_dropped_batches_total", f'{{node="{NODE}"}}')
    got_replayed = metric(body, "fabricscope_agent_spool_replayed_batches_total",
                          f'{{node="{NODE}"}}')
    ok = acked == last and view["acked_seq"] == last and lost <= lost_bound
    if replayed is not None:
        ok = ok and got_replayed == replayed
    if lost_is_dropped:
        ok = ok and 0 < lost <= dropped
    ROWS.append((scenario, last, view["acked_seq"], int(lost), int(dropped), int(full),
                 int(corrupt), int(got_replayed), "ok" if ok else "FAIL"))
    log(f"{scenario}: last {last}, acked {acked}, lost {lost} (bound {lost_bound}), "
        f"replayed {got_replayed} (want {replayed}), full {full}, corrupt {corrupt}")
    return ok


def scenario_aggregator_kills(rng):
    spool = os.path.join(WORK, "spool-kills")
    agg = start_aggregator()
    agent = start_agent(spool)
    batches_stored(3)
    for _ in range(3):
        time.sleep(rng.uniform(0.3, 1.5))  # a seeded random point in the stream
        agg.stop(signal.SIGKILL)
        time.sleep(rng.uniform(0.2, 1.0))  # the outage
        agg = start_aggregator()
    batches_stored(2)
    ok = settle(agent, agg, "aggregator kill -9 x3")
    agg.stop()
    return ok


def scenario_agent_kill_full_queue():
    spool = os.path.join(WORK, "spool-agent")
    agg = start_aggregator()
    agent = start_agent(spool, queue=5)
    batches_stored(3)
    agg.stop(signal.SIGKILL)
    time.sleep(2.0)  # 20 windows, 4x the memory queue: the rest wait on disk
    agent.stop(signal.SIGKILL)
    held = spool_records(spool)
    agg = start_aggregator()
    agent = start_agent(spool, queue=5)
    batches_stored(held)
    ok = settle(agent, agg, "agent kill -9, full memory queue", replayed=held)
    agg.stop()
    return ok


def scenario_link_cut():
    spool = os.path.join(WORK, "spool-cut")
    agg = start_aggregator()
    agent = start_agent(spool, queue=20)
    batches_stored(3)
    run("ip", "link", "set", VETH_A, "down", ns=NS_A)
    time.sleep(8.0)  # 80 windows with the link down: 4x the memory queue
    run("ip", "link", "set", VETH_A, "up", ns=NS_A)
    ok = settle(agent, agg, "link down 8 s")
    agg.stop()
    return ok


def scenario_spool_full():
    spool = os.path.join(WORK, "spool")
    os.makedirs(spool, exist_ok=True)
    run("mount", "-t", "tmpfs", "-o", "size=48k", "tmpfs", spool)
    agg = start_aggregator()
    agent = start_agent(spool, queue=10)
    batches_stored(3)
    agg.stop(signal.SIGKILL)
    time.sleep(6.0)  # 60 windows: more than 48 KiB of spool
    agg = start_aggregator()
    batches_stored(2)
    body = http("/metrics")
    # The bound: what the spool dropped as full, counted by the agent before the aggregator.
    wait_for(lambda: metric(http("/metrics"), "fabricscope_agent_spool_dropped_batches_total",
                            f'{{node="{NODE}",reason="full"}}') > 0, 10, "a full spool")
    full = metric(http("/metrics"), "fabricscope_agent_spool_dropped_batches_total",
                  f'{{node="{NODE}",reason="full"}}')
    # Lost: the batches the full spool dropped that the memory queue no longer held, counted by
    # the agent (uplink dropped: an upper bound, since one already on the wire may arrive) and
    # by the aggregator (exactly: the sequence numbers it never got).
    ok = settle(agent, agg, "spool tmpfs 48 KiB full", lost_bound=full, lost_is_dropped=True)
    agg.stop()
    run("umount", "-l", spool, check=False)
    return ok and full > 0


def scenario_corrupt_segment():
    spool = os.path.join(WORK, "spool-corrupt")
    agg = start_aggregator()
    agent = start_agent(spool)
    batches_stored(3)
    agg.stop(signal.SIGKILL)
    time.sleep(1.0)
    agent.stop(signal.SIGKILL)
    segs = [os.path.join(r, f) for r, _, fs in os.walk(spool) for f in fs if f.endswith(".seg")]
    seg = max(segs, key=os.path.getsize)
    size = os.path.getsize(seg)
    with open(seg, "r+b") as f:  # damage the middle record's payload
        f.seek(size // 2)
        f.write(b"\xde\xad\xbe\xef")
    agg = start_aggregator()
    agent = start_agent(spool)
    # The records after the damage are gone: the agent counts the torn segment (one per
    # segment: their number is not knowable once the record boundaries are); the aggregator
    # never hears of sequence numbers past the last good record, so it counts none.
    wait_for(lambda: metric(http("/metrics"), "fabricscope_agent_spool_dropped_batches_total",
                            f'{{node="{NODE}",reason="corrupt"}}') >= 1, 20, "a corrupt count")
    ok = settle(agent, agg, "spool segment corrupted", lost_bound=spool_records(spool) + 10**6)
    agg.stop()
    return ok


def main():
    global AGENT, AGGREGATOR
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    AGENT, AGGREGATOR = sys.argv[1], sys.argv[2]
    seed = 1
    for a in sys.argv[3:]:
        if a.startswith("--seed="):
            seed = int(a[7:])
    if os.geteuid() != 0:
        log("SKIP: needs root (network namespaces, tmpfs)")
        return 77
    rng = random.Random(seed)
    results = []
    try:
        setup()
        for name, fn in (("kills", lambda: scenario_aggregator_kills(rng)),
                         ("agent", scenario_agent_kill_full_queue), ("cut", scenario_link_cut),
                         ("full", scenario_spool_full), ("corrupt", scenario_corrupt_segment)):
            log(f"== {name}")
            results.append(fn())
    finally:
        log("| scenario | windows | acked at the aggregator | lost (aggregator) | dropped "
            "(agent queue) | spool full | spool corrupt | replayed | result |")
        log("|---|---|---|---|---|---|---|---|---|")
        for r in ROWS:
            log("| " + " | ".join(str(x) for x in r) + " |")
        teardown()
    return 0 if results and all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
