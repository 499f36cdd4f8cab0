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
  shared   two jobs: job B's bulk all-reduce between n1 and n2 runs throughout job A's ring:
           A's instances are named from the other flow on n1's or n2's link, and their
           bottleneck, /api/diagnosis?job=A and the live page's job selector name job B;
           /heatmap/links?job=B draws n1's and n2's links only.
Then: the rank heat map shows ring-neighbour traffic only, /metrics passes promtool check
metrics, and the heat-map SVGs rendered by headless Chromium show the expected hot cells. After
the compute phase, the aggregator's live page in Chromium lists the straggler's instances in
#slow-collectives and a click opens the communicator's heat map (tests/e2e/cdp.py).

Usage: cluster_in_a_box_test.py AGENT AGGREGATOR RING PLUGIN OUT_DIR
Exit 77 (skipped) without root, namespaces, veth, bridge or tbf; 0 on success; 1 on failure.
"""

import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cdp  # noqa: E402
from box import (FAILED, HEALTHY_DECLARED, HEALTHY_TBF, HUB, ITERATIONS, NODES,  # noqa: E402
                 SLOW_DECLARED, SLOW_TBF, VETH, WORK, check, cleanup, configure, http, log,
                 metric_values, phase, run, setup, shape, start_aggregator, start_rank)

AGENT, AGGREGATOR, RING, PLUGIN, OUT = sys.argv[1:6]
configure(AGENT, AGGREGATOR, RING, PLUGIN)


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


def check_live_page(http_port):
    """The aggregator's live page (issue 19) after the straggler phase, in headless Chromium in
    the hub's namespace: #slow-collectives fills with the compute_straggler instances naming
    n3 rank 3; a click on one opens the collective heat map of its communicator (the image
    loads) and the flight-recorder plot or the note that none came; no console error."""
    b = cdp.Browser(prefix=["ip", "netns", "exec", HUB], width=1400, height=1200)
    try:
        b.open(f"http://127.0.0.1:{http_port}/")
        rows = b.wait_for("#slow-collectives rows", """[...document.querySelectorAll(
            '#slow-collectives tbody tr')].map(tr => tr.textContent)""", timeout=15)
        check(any("compute_straggler" in r and "n3 rank 3" in r for r in rows),
              f"live page: #slow-collectives names the straggler n3 rank 3 ({len(rows)} rows)")
        b.click("#slow-collectives tbody tr")
        title = b.wait_for("the collective heat map", """(() => {
            const img = document.getElementById('cd-heatmap');
            return !document.getElementById('collective-detail').hidden && img.complete &&
              img.naturalWidth > 0 ? document.getElementById('cd-title').textContent : null;
        })()""", timeout=10)
        check("c0c0c0c0" in title, f"live page: a click opens the collective's heat map ({title})")
        detail = b.evaluate("document.getElementById('cd-recording').textContent + "
                            "document.querySelectorAll('#cd-recording polyline').length")
        check(detail.endswith("2") or "no flight recording" in detail,
              "live page: the flight-recorder samples are plotted, or the page says none came")
        href = b.evaluate("document.getElementById('cd-timeline').getAttribute('href')")
        check(href.startswith("/api/timeline?comm=c0c0c0c0&from="),
              f"live page: the detail links its timeline (+-2 s): {href}")
        rows = b.wait_for("#history rows", """(() => {
            const r = [...document.querySelectorAll('#history tbody tr')];
            return r.length ? r.map(tr => tr.textContent) : null; })()""", timeout=20)
        check(any("compute_straggler" in r and "n3 rank 3" in r for r in rows),
              f"live page: #history lists the straggler's instances ({len(rows)} rows)")
        b.screenshot(os.path.join(OUT, "live_page_cluster.png"))
        b.pump(0.5)
        errors = b.errors()
        check(not errors, "live page: no console error: " + "; ".join(errors))
        check(b.evaluate("document.getElementById('conn').hidden"),
              "live page: no failed read or render error")
    except cdp.CdpError as e:
        check(False, f"live page: {e}")
    finally:
        b.close()


def check_timeline(http_port, got):
    """/api/timeline (issue 37) of one compute_straggler instance +-2 s, as the live page links
    it, checked event by event: a process per node, a thread per rank; the instance's slice on
    every rank, rank 3's starting last; flow arrows from rank 3's slice to each other rank's;
    n3's port has a counter track that covers the instance; and the trace is the Trace Event
    Format's JSON object form."""
    inst = next((c for c in reversed(got) if c["cause"] == "compute_straggler" and
                 c["bottleneck"] and c["bottleneck"]["rank"] == 3), None)
    check(inst is not None, "timeline: a compute_straggler instance to draw")
    if inst is None:
        return
    start = min(r["start_unix_seconds"] for r in inst["ranks"])
    frm, to = start - 2, start + inst["duration_seconds"] + 2
    body = http(http_port, f"/api/timeline?comm=c0c0c0c0&from={frm:.6f}&to={to:.6f}")
    try:
        trace = json.loads(body)
    except ValueError:
        check(False, f"timeline: JSON ({body[:200]!r})")
        return
    ev = trace["traceEvents"]
    procs = {e["pid"]: e["args"]["name"] for e in ev
             if e["ph"] == "M" and e["name"] == "process_name"}
    ranks = {(e["pid"], e["tid"]): e["args"]["rank"] for e in ev
             if e["ph"] == "M" and e["name"] == "thread_name" and "rank" in e["args"]}
    check(sorted(procs.values()) == [f"n{i}" for i in range(NODES)] and
          sorted(ranks.values()) == list(range(NODES)),
          f"timeline: a process per node and a thread per rank ({procs}, {sorted(ranks.values())})")
    mine = [e for e in ev if e["ph"] == "X" and e.get("cat") == "collective" and
            e["args"]["seq"] == inst["seq"]]
    by_rank = {ranks.get((e["pid"], e["tid"])): e for e in mine}
    check(sorted(by_rank) == list(range(NODES)),
          f"timeline: instance {inst['seq']} has a slice on every rank ({sorted(by_rank)})")
    if 3 in by_rank and len(by_rank) == NODES:
        late = by_rank[3]
        check(all(late["ts"] > e["ts"] for r, e in by_rank.items() if r != 3),
              "timeline: rank 3's collective starts last")
        check(abs(late["ts"] / 1e6 - (start - frm) - inst["skew_seconds"]) < 0.01,
              "timeline: its start is the instance's skew after the first rank's")
    flows = [e for e in ev if e["ph"] in "sf" and e.get("cat") == "straggler" and
             e["args"]["seq"] == inst["seq"]]
    starts = [ranks.get((e["pid"], e["tid"])) for e in flows if e["ph"] == "s"]
    ends = sorted(ranks.get((e["pid"], e["tid"])) for e in flows if e["ph"] == "f")
    check(starts == [3, 3, 3] and ends == [0, 1, 2],
          f"timeline: flow arrows from rank 3 to the ranks that waited ({starts} -> {ends})")
    n3 = next(p for p, n in procs.items() if n == "n3")
    counter = sorted(e["ts"] for e in ev if e["ph"] == "C" and e["pid"] == n3)
    # A counter's value holds until its next point: covered when one is at or before its start.
    check(counter and counter[0] <= (start - frm) * 1e6,
          f"timeline: n3's port counter track covers the instance ({len(counter)} points)")
    check(trace.get("displayTimeUnit") == "ns" and trace["distributedInfo"]["backend"] == "nccl",
          "timeline: displayTimeUnit and distributedInfo")


# The two jobs of the shared phase: A, a ring over the four nodes; B, bulk transfers between n1
# and n2 (named by the FABRICSCOPE_JOB_* claim: no scheduler cgroup in the box, so the agents
# take the claim as is; e2e.job_identity tests the cgroups).
JOB_A, JOB_B = {"FABRICSCOPE_JOB_ID": "7001", "FABRICSCOPE_JOB_NAME": "llama"}, \
    {"FABRICSCOPE_JOB_ID": "8812", "FABRICSCOPE_JOB_NAME": "bulk"}


def shared_phase(grpc_port, http_port, healthy):
    """Job B's bulk all-reduce (1 MiB, no compute) runs between n1 and n2 from before job A's
    first collective to after its last: A's instances are named from the other flow on n1's or
    n2's link (shared_flow), their bottleneck names job B as having shared the node, and so
    does /api/diagnosis?job=7001. Returns A's instances."""
    bulk = []

    def start_bulk():
        for rank, (node, right) in enumerate(((1, 2), (2, 1))):
            bulk.append(start_rank("shared", node, rank, 2, right, 0xb0b0b0b0_00000005,
                                   1 << 20, 100000, 0, port=7001, env=JOB_B,
                                   log_name="shared-b"))

    try:
        return phase("shared", grpc_port, http_port, 0xa0a0a0a0_00000004, healthy,
                     rank_env=JOB_A, on_start=start_bulk)
    finally:
        for p in bulk:
            p.terminate()
        for p in bulk:
            p.wait(timeout=10)


def check_jobs_on_page(http_port):
    """The live page after the shared phase: #jobs lists both jobs; picking job A in the
    selector shows A's diagnosis only, naming job B on its bottleneck's node, and A's
    collectives only."""
    b = cdp.Browser(prefix=["ip", "netns", "exec", HUB], width=1400, height=1200)
    try:
        b.open(f"http://127.0.0.1:{http_port}/")
        rows = b.wait_for("#jobs rows with both jobs", """(() => {
            const r = [...document.querySelectorAll('#jobs tbody tr')].map(tr => tr.textContent);
            return r.some(t => t.startsWith('7001')) && r.some(t => t.startsWith('8812')) ? r : null;
        })()""", timeout=15)
        check(len(rows) >= 2, f"live page: #jobs lists jobs 7001 and 8812 ({len(rows)} rows)")
        b.evaluate("""(() => { const s = document.getElementById('job'); s.value = '7001';
            s.dispatchEvent(new Event('change')); return true; })()""")
        diag = b.wait_for("job 7001's diagnosis", """(() => {
            const r = [...document.querySelectorAll('#diagnosis tbody tr')]
                .map(tr => tr.textContent);
            return r.length > 0 && r.every(t => t.startsWith('7001 (llama)')) ? r : null;
        })()""", timeout=15)
        check(any("job 8812 (bulk)" in r for r in diag),
              f"live page: job 7001's diagnosis names job 8812 (bulk) ({diag[0][:200]!r})")
        slow = b.evaluate("""[...document.querySelectorAll('#slow-collectives tbody tr')]
            .map(tr => tr.firstChild.textContent)""")
        check(slow and all(s == "7001 (llama)" for s in slow),
              f"live page: the slow collectives of job 7001 only ({sorted(set(slow))})")
        errors = b.errors()
        check(not errors, "live page (jobs): no console error: " + "; ".join(errors))
    except cdp.CdpError as e:
        check(False, f"live page (jobs): {e}")
    finally:
        b.close()


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
        # One job alone on the nodes: no instance names another communicator as sharing one.
        check(all(not c["bottleneck"] or not c["bottleneck"]["shared_with"] for c in got),
              "compute phase: no other communicator shared a node (a clean run names none)")
        scores = metric_values(http_port, "fabricscope_straggler_score")
        s3 = scores.get('{node="n3",rank="3"}', 0)
        others = max(v for k, v in scores.items() if 'rank="3"' not in k)
        check(s3 > 0.5 and others < 0.1,
              f"straggler score: rank 3 {s3:.2f}, the others at most {others:.2f}")
        check_live_page(http_port)
        check_timeline(http_port, got)
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

        # Two jobs on shared nodes: B's bulk traffic on n1's and n2's links slows A's all-reduce.
        got = shared_phase(grpc_port, http_port, healthy)
        named = [c for c in got if c["job"] == "7001" and c["bottleneck"] and
                 c["bottleneck"]["node"] in ("n1", "n2") and
                 any(s["job"] == "8812" for s in c["bottleneck"]["shared_with"])]
        check(majority(got, lambda c: c in named),
              f"shared phase: {len(named)} of {len(got)} instances of job 7001 have their "
              "bottleneck on n1 or n2 and name job 8812 there "
              f"(e.g. {got[0]['bottleneck'] if got else None})")
        check(any("also carried job 8812 (bulk)" in c["bottleneck"]["shared"] for c in named),
              "shared phase: the bottleneck says n1 or n2 also carried job 8812 (bulk)")
        diag = json.loads(http(http_port, "/api/diagnosis?job=7001"))["communicators"]
        check(len(diag) == 1 and diag[0]["comm"] == "a0a0a0a0" and diag[0]["job"] == "7001" and
              "also carried job 8812 (bulk)" in diag[0]["sentence"],
              f"/api/diagnosis?job=7001 names job 8812 ({diag[0]['sentence'] if diag else diag})")
        jobs = {j["id"]: j for j in json.loads(http(http_port, "/api/jobs"))["jobs"]}
        check(jobs.get("7001", {}).get("comms") == ["a0a0a0a0"] and
              jobs.get("8812", {}).get("comms") == ["b0b0b0b0"] and
              jobs["8812"]["nodes"] == ["n1", "n2"],
              f"/api/jobs: 7001 on a0a0a0a0, 8812 on b0b0b0b0 on n1 and n2 ({sorted(jobs)})")
        # Job B's share of the links: its two nodes only, and the share where it ran.
        hm = json.loads(http(http_port, "/heatmap/links?format=json&job=8812"))
        peak = max((v for row in hm["values"] for v in row if v is not None), default=0)
        check({r.split("/")[0] for r in hm["rows"]} == {"n1", "n2"} and peak > 0.1,
              f"/heatmap/links?job=8812: n1's and n2's links, peak utilization x share "
              f"{peak:.2f} ({hm['title']})")
        check_jobs_on_page(http_port)

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
