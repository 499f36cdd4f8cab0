#!/usr/bin/env python3
"""Remote-write end to end (issue 17 item 4): a standalone agent on the real fixture trees writes
every second to a real Prometheus (Debian `prometheus`, --web.enable-remote-write-receiver) and a
real VictoriaMetrics (Debian `victoria-metrics`), both started here on loopback. Checks:

  1. what each receiver holds equals the agent's /metrics at the same time, series by series
     (the fixture tree does not change, so the counters stand still);
  2. each receiver is stopped for a few seconds and started again on the same storage: the
     agent queues and retries, and afterwards both receivers hold one sample per snapshot for
     the whole run (count_over_time equal on both, none dropped).

Usage: remote_write_test.py AGENT SOURCE_DIR. Exits 77 (skipped) without prometheus or
victoria-metrics.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from box import wait_for  # noqa: E402  (polls a condition; RuntimeError on timeout)

AGENT, SRC = sys.argv[1], sys.argv[2]
T0 = time.monotonic()
COMPARED = ["fabricscope_port_transmit_bytes_total", "fabricscope_port_receive_packets_total",
            "fabricscope_port_errors_total", "fabricscope_port_line_rate_bytes_per_second",
            "fabricscope_port_link_state", "fabricscope_tcp_retransmitted_segments_total"]


def log(msg):
    print(f"{time.monotonic() - T0:5.1f}s {msg}", flush=True)


def fail(msg):
    log(f"FAIL: {msg}")
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.read().decode()
    except OSError:
        return None


def parse_exposition(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r'^([a-z_0-9]+)(?:\{(.*)\})? (\S+)$', line)
        if not m:
            continue
        labels = tuple(sorted(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or "")))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


class Receiver:
    def __init__(self, name, argv, port, query_base):
        self.name, self.argv, self.port, self.base = name, argv, port, query_base
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.DEVNULL, stderr=self.log)
        wait_for(f"{self.name} to answer", lambda: http_get(self.base + self.ready_path))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)

    def query(self, q, at=None):
        params = {"query": q}
        if at is not None:
            params["time"] = f"{at:.3f}"
        body = http_get(f"{self.base}/api/v1/query?{urllib.parse.urlencode(params)}")
        if body is None:
            return None
        data = json.loads(body)
        if data.get("status") != "success":
            fail(f"{self.name}: query {q}: {body[:300]}")
        out = {}
        for r in data["data"]["result"]:
            metric = dict(r["metric"])
            name = metric.pop("__name__", "")
            out[(name, tuple(sorted(metric.items())))] = float(r["value"][1])
        return out


def main():
    for tool in ("prometheus", "victoria-metrics"):
        if not shutil.which(tool):
            print(f"SKIP: {tool} is not installed (deploy/install-deps.sh)")
            sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="fabricscope-rw.")
    procs = []
    try:
        run(tmp, procs)
    except RuntimeError as e:
        fail(str(e))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    shutil.rmtree(tmp, ignore_errors=True)
    log("PASS: remote-write end-to-end test")


def start_receivers(tmp):
    prom_port, vm_port = free_port(), free_port()
    with open(f"{tmp}/prometheus.yml", "w") as f:
        f.write("global: {}\n")
    prom = Receiver("prometheus", [
        "prometheus", f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/prom",
        f"--web.listen-address=127.0.0.1:{prom_port}", "--web.enable-remote-write-receiver"],
        prom_port, f"http://127.0.0.1:{prom_port}")
    prom.ready_path = "/-/ready"
    # latencyOffset 0: samples are queryable as soon as they arrive (default: 30 s later).
    vm = Receiver("victoria-metrics", [
        "victoria-metrics", f"-httpListenAddr=127.0.0.1:{vm_port}",
        f"-storageDataPath={tmp}/vm", "-search.latencyOffset=0s", "-search.disableCache"],
        vm_port, f"http://127.0.0.1:{vm_port}")
    vm.ready_path = "/health"
    for r in (prom, vm):
        r.log = open(f"{tmp}/{r.name}.log", "w")
        r.start()
    return prom, vm


def start_agent(tmp, receivers, procs):
    tree = f"{tmp}/tree"
    shutil.copytree(f"{SRC}/tests/testdata/sysfs-real/class", f"{tree}/sys/class")
    shutil.copytree(f"{SRC}/tests/testdata/procfs-real/net", f"{tree}/proc/net")
    open(f"{tmp}/empty.yaml", "w").close()
    # One --remote-write-url per receiver, in both spellings a user may write: the flag repeated
    # (collectors/cli.h NormalizeFlagDashes joins them), "--flag=V" and "--flag V".
    first, *others = receivers
    urls = [f"--remote-write-url={first.base}/api/v1/write"]
    for r in others:
        urls += ["--remote_write_url", f"{r.base}/api/v1/write"]
    agent = subprocess.Popen([
        AGENT, f"--config={tmp}/empty.yaml", f"--sysfs-root={tree}/sys",
        f"--procfs-root={tree}/proc", "--http-listen=127.0.0.1:0", "--status=off",
        "--ethtool=off", "--gpu-socket=off", *urls,
        "--remote-write-interval=1s"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    procs.append(agent)
    port = None
    for line in agent.stdout:
        m = re.search(r"serving http://127\.0\.0\.1:(\d+)/metrics", line)
        if m:
            port = int(m.group(1))
            break
    if port is None:
        fail("the agent did not start")
    # Keep reading its log so that a full pipe never blocks it.
    threading.Thread(target=lambda: [None for _ in agent.stdout], daemon=True).start()
    return agent, f"http://127.0.0.1:{port}/metrics"


def compare(receivers, metrics_url):
    def exported():
        got = {k: v for k, v in parse_exposition(http_get(metrics_url)).items()
               if k[0] in COMPARED}
        return got if len(got) >= 20 else None  # the first window is in
    want = wait_for("the agent's first window on /metrics", exported)
    for r in receivers:
        def same():
            got = {}
            for name in COMPARED:
                got.update(r.query(name) or {})
            return got == want
        wait_for(f"{r.name} to hold what /metrics shows", same, timeout=20)
        log(f"[ok] {r.name}: the {len(want)} series of {len(COMPARED)} families equal /metrics")


def writer_state(metrics_url, url, family):
    fams = parse_exposition(http_get(metrics_url))
    return sum(v for (n, labels), v in fams.items() if n == family and ("url", url) in labels)


def restart(r, metrics_url):
    url = f"{r.base}/api/v1/write"
    r.stop()
    log(f"{r.name} stopped")
    wait_for(f"the agent to queue for {r.name}",
             lambda: writer_state(metrics_url, url, "fabricscope_remote_write_queue_samples") > 0
             and writer_state(metrics_url, url,
                              "fabricscope_remote_write_failed_requests_total") > 0)
    first = writer_state(metrics_url, url, "fabricscope_remote_write_queue_samples")
    wait_for(f"3 snapshots queued for {r.name}", lambda: writer_state(
        metrics_url, url, "fabricscope_remote_write_queue_samples") >= 3 * first, timeout=30)
    queued = writer_state(metrics_url, url, "fabricscope_remote_write_queue_samples")
    r.start()
    log(f"{r.name} started again with {queued:.0f} samples queued for it")
    wait_for(f"the queue for {r.name} to drain",
             lambda: writer_state(metrics_url, url, "fabricscope_remote_write_queue_samples") == 0,
             timeout=60)


def run(tmp, procs):
    prom, vm = start_receivers(tmp)
    procs += [prom.proc, vm.proc]
    agent, metrics_url = start_agent(tmp, (prom, vm), procs)
    started = time.time()
    compare((prom, vm), metrics_url)
    for r in (vm, prom):
        restart(r, metrics_url)
        procs.append(r.proc)
    # Every snapshot of the run on both: count the samples of a one-sample-per-snapshot series
    # over the run, at a time both have (a second ago, once both queues are empty).
    at = time.time() - 1
    window = int(at - started) + 2
    counts = []
    for r in (prom, vm):
        res = wait_for(f"{r.name} to answer", lambda: r.query(
            f"count_over_time(fabricscope_aggregator_nodes[{window}s])", at))
        counts.append(sum(res.values()))
    log(f"snapshots held over the last {window} s: prometheus {counts[0]:.0f}, "
        f"victoria-metrics {counts[1]:.0f}")
    if counts[0] != counts[1] or counts[0] < at - started - 3:
        fail(f"a receiver lost snapshots: {counts} over {at - started:.1f} s")
    log("[ok] both receivers hold every snapshot across their restarts")
    for r in (prom, vm):
        url = f"{r.base}/api/v1/write"
        dropped = writer_state(metrics_url, url, "fabricscope_remote_write_dropped_samples_total")
        sent = writer_state(metrics_url, url, "fabricscope_remote_write_sent_samples_total")
        if dropped != 0:
            fail(f"{r.name}: {dropped} samples dropped")
        log(f"[ok] {r.name}: {sent:.0f} samples sent, none dropped")
    compare((prom, vm), metrics_url)
    agent.send_signal(signal.SIGTERM)
    if agent.wait(timeout=30) != 0:
        fail("the agent did not exit 0")
    for r in (prom, vm):
        r.stop()


if __name__ == "__main__":
    main()
