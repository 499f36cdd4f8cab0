#!/usr/bin/env python3
"""Sharded aggregators end to end (issue 18): three fabricscope-aggregator processes with the
same --peers in the hub namespace of the cluster in a box (tests/e2e/box.py), six node
namespaces, each with one agent at 1 ms and one rank of fabricscope-ring-allreduce reported
through the real NCCL plugin; node i streams to aggregator i % 3, so every aggregator holds two
of the communicator's six ranks and none sees it whole. Rank 3 computes 300 ms longer before
every collective: a compute straggler.

Checked, for a job on three aggregators and then for another after a fourth joined (started
with the four-peer list, the three others reloaded with SIGHUP): the owner computed here by an
independent rendezvous hashing answers /api/collectives/slow?comm=, the others answer 307 to it;
every instance is matched there with all six ranks, named compute_straggler with rank 3 as the
bottleneck; the others forwarded their nodes' records to it
(fabricscope_aggregator_forwarded_records_total{peer=owner}, none left queued or dropped) and
match none of the communicator's instances themselves; after the change the first job's
instances are held once, where they were matched. A third job's owner is stopped before it
and started again while it runs, once its peers hold records of three instances for it: every
instance is still matched whole there, nothing dropped.

Usage: shards_test.py AGENT AGGREGATOR RING PLUGIN
Exit 77 (skipped) without root, namespaces, veth, bridge or tbf; 0 on success; 1 on failure.
"""

import json
import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import box  # noqa: E402

AGENT, AGGREGATOR, RING, PLUGIN = sys.argv[1:5]
box.configure(AGENT, AGGREGATOR, RING, PLUGIN)
box.resize(6)
SHARDS = 3  # at the start; a fourth joins by a reload
GRPC = [9471 + i for i in range(SHARDS + 1)]
HTTP = [9481 + i for i in range(SHARDS + 1)]
MASK = (1 << 64) - 1
PROCS = {}


def name(i):
    return f"{box.HUB_ADDR}:{GRPC[i]}"


def fnv1a64(text):
    h = 0xcbf29ce484222325
    for c in text.encode():
        h = ((h ^ c) * 0x100000001b3) & MASK
    return h


def mix64(z):
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & MASK
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & MASK
    return z ^ (z >> 31)


def owner_of(comm, shards):
    """Rendezvous hashing as exporters/shard/peer_ring.h defines it, written again here: the
    highest mix64(fnv1a64(gRPC address) ^ mix64(label)), ties to the smaller address."""
    label = comm >> 32
    weights = [(mix64(fnv1a64(name(i)) ^ mix64(label)), name(i), i) for i in range(shards)]
    return max(weights, key=lambda w: (w[0], [-ord(c) for c in w[1]]))[2]


def comm_owned_by(owner, shards, start):
    comm = start
    while owner_of(comm, shards) != owner:
        comm += 1 << 32
    return comm


def write_config(i, shards):
    """The peer list goes in the config file (flags would override a reload's)."""
    entries = ",".join(f"{name(j)}={box.HUB_ADDR}:{HTTP[j]}" for j in range(shards))
    path = os.path.join(box.WORK, f"aggregator{i}.yaml")
    with open(path, "w") as f:
        f.write(f'peers: "{entries}"\n')
    return path


def start(i, shards):
    box.ensure_token()
    out = open(os.path.join(box.WORK, f"aggregator{i}.log"), "w")
    p = subprocess.Popen(["ip", "netns", "exec", box.HUB, AGGREGATOR,
                          f"--config={write_config(i, shards)}", f"--grpc-listen={name(i)}",
                          f"--http-listen={box.HUB_ADDR}:{HTTP[i]}",
                          f"--auth-token-file={box.TOKEN_FILE}"],
                         stdout=subprocess.PIPE, stderr=out, text=True)
    box.PROCS.append(p)
    PROCS[i] = p
    line = p.stdout.readline()
    if not re.search(r"grpc=[^ ]*:(\d+) http=[^ ]*:(\d+)", line):
        raise RuntimeError(f"aggregator {i} did not start: {line}; see {box.WORK}")


def status(i, path):
    """HTTP status of path on aggregator i, redirects not followed."""
    r = box.run("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "5",
                f"http://{box.HUB_ADDR}:{HTTP[i]}{path}", ns=box.HUB)
    return int(r.stdout or 0)


def metric(i, name, labels=""):
    body = box.http(HTTP[i], "/metrics", box.HUB_ADDR)
    for line in body.splitlines():
        key, _, value = line.rpartition(" ")
        if key == name + labels:
            return float(value)
    return None


def slow(i, label=""):
    """The instances aggregator i holds (its own matching, redirects not followed)."""
    query = f"&comm={label}" if label else ""
    body = box.run("curl", "-sS", "--max-time", "5",
                   f"http://{box.HUB_ADDR}:{HTTP[i]}/api/collectives/slow?limit=0{query}",
                   ns=box.HUB).stdout
    return json.loads(body)["collectives"] if not label else body


def check_job(tag, comm, shards, owner_away=False):
    """A job of comm's on the six nodes (node i to aggregator i % 3), rank 3 late: matched whole
    on the owner, whose peers forwarded their nodes' ranks. owner_away: the owner (one without
    nodes of its own) is stopped before the job and started again once the others hold records
    of three instances for it."""
    label = f"{comm >> 32:08x}"
    owner = owner_of(comm, shards)
    path = f"/api/collectives/slow?limit=0&comm={label}"
    codes = [status(i, path) for i in range(shards)]
    box.check(codes == [200 if i == owner else 307 for i in range(shards)],
              f"{tag}: the owner aggregator {owner} answers, the others redirect: {codes}")
    before = {i: forwarded(i, owner) for i in range(SHARDS) if i != owner}
    on_start = None
    if owner_away:
        PROCS[owner].send_signal(signal.SIGTERM)
        PROCS[owner].wait(timeout=10)

        def on_start():
            for i in before:
                box.wait_for(f"aggregator {i} holding records for the stopped owner",
                             lambda: (metric(i, "fabricscope_aggregator_forward_queue_records",
                                             peer_label(owner)) or 0) >= 2 * 3, 60)
            box.log(f"{tag}: records queued for the stopped owner; starting it again")
            start(owner, shards)

    got = box.phase(tag, GRPC[:SHARDS], HTTP[(owner + 1) % shards], comm,
                    [box.HEALTHY_DECLARED] * box.NODES, 3, 300, http_host=box.HUB_ADDR,
                    on_start=on_start)
    whole = [c for c in got
             if sorted(r["node"] for r in c["ranks"]) == [f"n{i}" for i in range(6)]]
    box.check(len(got) >= box.ITERATIONS and len(whole) == len(got),
              f"{tag}: {len(whole)} of {len(got)} instances matched with all six ranks")
    named = [c for c in got if c["cause"] == "compute_straggler" and c["bottleneck"]["rank"] == 3]
    box.check(len(named) >= 0.7 * len(got),
              f"{tag}: {len(named)} of {len(got)} compute_straggler, rank 3 the bottleneck")
    for i in before:
        # Nodes i and i + 3 stream to aggregator i: 2 ranks of every instance.
        want = before[i] + 2 * len(got)
        box.wait_for(f"aggregator {i}'s records acked by the owner",
                     lambda: forwarded(i, owner) >= want, 10)
        queued = metric(i, "fabricscope_aggregator_forward_queue_records", peer_label(owner))
        dropped = metric(i, "fabricscope_aggregator_forward_dropped_records_total",
                         peer_label(owner))
        box.check(forwarded(i, owner) == want and queued == 0 and dropped == 0,
                  f"{tag}: aggregator {i} forwarded {forwarded(i, owner) - before[i]:.0f} "
                  f"records, {queued} queued, {dropped} dropped")
        box.check(not [c for c in slow(i) if c["comm"] == label],
                  f"{tag}: aggregator {i} matched none of them itself")
    return label


def peer_label(i):
    return f'{{peer="{name(i)}"}}'


def forwarded(i, owner):
    return metric(i, "fabricscope_aggregator_forwarded_records_total", peer_label(owner)) or 0


def main():
    try:
        box.setup()
        for i in range(SHARDS):
            start(i, SHARDS)
        first = check_job("three", comm_owned_by(1, SHARDS, 0x5a4d5e00_00000018), SHARDS)
        # A fourth aggregator joins: started with the four-peer list, the others reloaded.
        start(SHARDS, SHARDS + 1)
        for i in range(SHARDS):
            write_config(i, SHARDS + 1)
            PROCS[i].send_signal(signal.SIGHUP)
        for i in range(SHARDS + 1):
            box.wait_for(f"aggregator {i} with four peers",
                         lambda: metric(i, "fabricscope_aggregator_peers") == 4, 10)
        check_job("four", comm_owned_by(SHARDS, SHARDS + 1, 0x4a4d5e00_00000019), SHARDS + 1)
        # The owner of a third job's communicator restarts while the job runs: its peers keep
        # the records meanwhile and deliver them to the new process, which matches them all.
        check_job("restart", comm_owned_by(SHARDS, SHARDS + 1, 0x3a4d5e00_0000001a),
                  SHARDS + 1, owner_away=True)
        # The first job's instances stay where they were matched, once.
        held = [len([c for c in slow(i) if c["comm"] == first]) for i in range(SHARDS + 1)]
        box.check(sorted(held) == [0, 0, 0, box.ITERATIONS],
                  f"the first job's instances are held once: {held}")
    except RuntimeError as e:
        box.log("FAIL:", e)
        box.FAILED.append(str(e))
    finally:
        box.cleanup()
    if box.FAILED:
        box.log(f"{len(box.FAILED)} check(s) failed; logs in {box.WORK}")
        return 1
    box.log("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
