#!/usr/bin/python3
"""Structural check of deploy/kubernetes (no cluster, no schema download).

Usage: kubernetes_manifests_test.py MANIFEST_DIR CONFIG_DIR

Checks, for every YAML document: apiVersion/kind among the known ones with their required
fields; namespaced objects in the fabricscope namespace; workload selectors that match their
pod template labels; container ports (1..65535, named <= 15 chars, unique); probes, Service
targetPorts and ServiceMonitor endpoints that name existing ports; volume mounts that name
volumes; ConfigMaps that exist; the agent DaemonSet on the host network with /sys read-only,
/run/fabricscope mounted and only NET_RAW added; keys of the embedded config files that the
daemons know (those of deploy/config/*.yaml); kustomization resources = the files here.
Exits 1 listing every problem.
"""
import os
import re
import sys

import yaml

KINDS = {  # kind -> apiVersion
    "Namespace": "v1",
    "ConfigMap": "v1",
    "Service": "v1",
    "DaemonSet": "apps/v1",
    "Deployment": "apps/v1",
    "ServiceMonitor": "monitoring.coreos.com/v1",
    "Kustomization": "kustomize.config.k8s.io/v1beta1",
}
NAMESPACE = "fabricscope"
problems = []


def fail(where, msg):
    problems.append(f"{where}: {msg}")


def get(obj, path, where, required=True):
    cur = obj
    for key in path.split("."):
        if not isinstance(cur, dict) or key not in cur:
            if required:
                fail(where, f"missing {path}")
            return None
        cur = cur[key]
    return cur


def config_keys(path):
    """Top-level keys of an example config, commented out or not ("# key: value")."""
    keys = set()
    with open(path) as f:
        for line in f:
            m = re.match(r"^#?\s?([a-z_]+):", line)
            if m and not line.startswith("#  "):
                keys.add(m.group(1))
    return keys


def check_pod_spec(spec, where, configmaps):
    volumes = {v.get("name"): v for v in spec.get("volumes", [])}
    containers = spec.get("containers") or []
    if not containers:
        fail(where, "no containers")
    for c in containers:
        cw = f"{where} container {c.get('name')}"
        for key in ("name", "image"):
            if key not in c:
                fail(cw, f"missing {key}")
        names, numbers = set(), set()
        for p in c.get("ports", []):
            n = p.get("containerPort")
            if not isinstance(n, int) or not 1 <= n <= 65535:
                fail(cw, f"containerPort {n!r} is not 1..65535")
            numbers.add(n)
            if "name" in p:
                if len(p["name"]) > 15 or p["name"] in names:
                    fail(cw, f"port name {p['name']!r} longer than 15 or repeated")
                names.add(p["name"])
            if spec.get("hostNetwork") and p.get("hostPort", n) != n:
                fail(cw, "with hostNetwork, hostPort must equal containerPort")
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            pr = c.get(probe)
            if pr is None:
                continue
            port = get(pr, "httpGet.port", f"{cw} {probe}")
            if port is not None and port not in names and port not in numbers:
                fail(cw, f"{probe} port {port!r} is not a container port")
            if get(pr, "httpGet.path", f"{cw} {probe}") != "/healthz":
                fail(cw, f"{probe} does not probe /healthz")
        for m in c.get("volumeMounts", []):
            if m.get("name") not in volumes:
                fail(cw, f"volumeMount {m.get('name')!r} names no volume")
        sc = c.get("securityContext", {})
        if sc.get("privileged") or sc.get("allowPrivilegeEscalation", True):
            fail(cw, "privileged or allowPrivilegeEscalation not false")
        if (sc.get("capabilities", {}).get("drop") or []) != ["ALL"]:
            fail(cw, "capabilities.drop is not [ALL]")
    for name, v in volumes.items():
        if "configMap" in v and v["configMap"].get("name") not in configmaps:
            fail(where, f"volume {name} names ConfigMap {v['configMap'].get('name')!r}, not defined")
    return containers, volumes


def main():
    manifest_dir, config_dir = sys.argv[1], sys.argv[2]
    docs = []
    for fname in sorted(os.listdir(manifest_dir)):
        if not fname.endswith(".yaml"):
            continue
        with open(os.path.join(manifest_dir, fname)) as f:
            try:
                for i, d in enumerate(yaml.safe_load_all(f)):
                    if d is not None:
                        docs.append((f"{fname}#{i}", d))
            except yaml.YAMLError as e:
                fail(fname, f"YAML: {e}")
    by_kind = {}
    for where, d in docs:
        kind = d.get("kind")
        if kind not in KINDS:
            fail(where, f"unknown kind {kind!r}")
            continue
        if d.get("apiVersion") != KINDS[kind]:
            fail(where, f"{kind} apiVersion {d.get('apiVersion')!r}, expected {KINDS[kind]}")
        if kind != "Kustomization":
            get(d, "metadata.name", where)
        if kind not in ("Namespace", "Kustomization") and get(d, "metadata.namespace", where) != NAMESPACE:
            fail(where, f"not in namespace {NAMESPACE}")
        by_kind.setdefault(kind, []).append((where, d))

    configmaps = {get(d, "metadata.name", w): (w, d) for w, d in by_kind.get("ConfigMap", [])}
    workloads = {}  # name -> (labels, containers)
    for kind in ("DaemonSet", "Deployment"):
        for where, d in by_kind.get(kind, []):
            sel = get(d, "spec.selector.matchLabels", where) or {}
            labels = get(d, "spec.template.metadata.labels", where) or {}
            if not sel or any(labels.get(k) != v for k, v in sel.items()):
                fail(where, f"selector {sel} does not match template labels {labels}")
            spec = get(d, "spec.template.spec", where) or {}
            containers, volumes = check_pod_spec(spec, where, configmaps)
            workloads[d["metadata"]["name"]] = (labels, containers, spec, volumes)
    if set(workloads) != {"fabricscope-agent", "fabricscope-aggregator"}:
        fail("workloads", f"expected the agent DaemonSet and aggregator Deployment, got {sorted(workloads)}")

    # The agent: host network, /sys read-only, /run/fabricscope, NET_RAW only.
    if "fabricscope-agent" in workloads:
        _, containers, spec, volumes = workloads["fabricscope-agent"]
        where = "DaemonSet fabricscope-agent"
        if spec.get("hostNetwork") is not True:
            fail(where, "hostNetwork is not true")
        mounts = {m["mountPath"]: m for c in containers for m in c.get("volumeMounts", [])}
        if not mounts.get("/sys", {}).get("readOnly"):
            fail(where, "/sys is not mounted read-only")
        for path in ("/sys", "/run/fabricscope"):
            m = mounts.get(path)
            if m is None or get(volumes.get(m["name"], {}), "hostPath.path", where) != path:
                fail(where, f"{path} is not the host's {path}")
        for c in containers:
            added = c.get("securityContext", {}).get("capabilities", {}).get("add")
            if added != ["NET_RAW"]:
                fail(where, f"capabilities.add {added}, expected [NET_RAW]")

    services = {}
    for where, d in by_kind.get("Service", []):
        sel = get(d, "spec.selector", where) or {}
        matched = [n for n, (labels, *_rest) in workloads.items()
                   if sel and all(labels.get(k) == v for k, v in sel.items())]
        if len(matched) != 1:
            fail(where, f"selector {sel} matches workloads {matched}, expected one")
            continue
        _, containers, _, _ = workloads[matched[0]]
        names = {p.get("name") for c in containers for p in c.get("ports", [])}
        numbers = {p.get("containerPort") for c in containers for p in c.get("ports", [])}
        for p in get(d, "spec.ports", where) or []:
            if p.get("targetPort") not in names | numbers:
                fail(where, f"targetPort {p.get('targetPort')!r} is no container port of {matched[0]}")
        services[d["metadata"]["name"]] = d

    for where, d in by_kind.get("ServiceMonitor", []):
        sel = get(d, "spec.selector.matchLabels", where) or {}
        matched = [s for s in services.values()
                   if sel and all(s["metadata"].get("labels", {}).get(k) == v for k, v in sel.items())]
        if len(matched) != 1:
            fail(where, f"selector {sel} matches {len(matched)} Services, expected one")
            continue
        port_names = {p.get("name") for p in matched[0]["spec"]["ports"]}
        for ep in get(d, "spec.endpoints", where) or []:
            if ep.get("port") not in port_names:
                fail(where, f"endpoint port {ep.get('port')!r} is not a port of the Service")
            if ep.get("path", "/metrics") != "/metrics":
                fail(where, "endpoint path is not /metrics")
        if NAMESPACE not in (get(d, "spec.namespaceSelector.matchNames", where, False) or [NAMESPACE]):
            fail(where, "namespaceSelector leaves out the namespace")

    # Embedded config files: keys the daemons know.
    for name, example in (("fabricscope-agent", "agent.yaml"), ("fabricscope-aggregator", "aggregator.yaml")):
        if name not in configmaps:
            fail("ConfigMaps", f"{name} missing")
            continue
        where, d = configmaps[name]
        text = (d.get("data") or {}).get(example)
        if text is None:
            fail(where, f"no data.{example}")
            continue
        known = config_keys(os.path.join(config_dir, example))
        cfg = yaml.safe_load(text) or {}
        for key in cfg:
            if key not in known:
                fail(where, f"{example}: key {key!r} is not in deploy/config/{example}")

    # Token files the configs name lie in a Secret volume their workload mounts (the Secret
    # itself is made by the user: deploy/README.md "Kubernetes").
    for name, example, key in (("fabricscope-agent", "agent.yaml", "auth_token_file"),
                               ("fabricscope-aggregator", "aggregator.yaml", "auth.token_file")):
        if name not in configmaps or name not in workloads:
            continue
        cfg = yaml.safe_load((configmaps[name][1].get("data") or {}).get(example) or "") or {}
        path = cfg
        for part in key.split("."):
            path = path.get(part) if isinstance(path, dict) else None
        if path is None:
            fail(name, f"{example} names no {key}: agents would stream without a token")
            continue
        _, containers, _, volumes = workloads[name]
        mounts = [m for c in containers for m in c.get("volumeMounts", [])
                  if path.startswith(m["mountPath"].rstrip("/") + "/")]
        if not mounts or "secret" not in volumes.get(mounts[0]["name"], {}):
            fail(name, f"{key} {path} is not in a mounted Secret volume")

    for where, d in by_kind.get("Kustomization", []):
        listed = set(d.get("resources") or [])
        present = {f for f in os.listdir(manifest_dir) if f.endswith(".yaml") and f != "kustomization.yaml"}
        if listed != present:
            fail(where, f"resources {sorted(listed)} differ from the files {sorted(present)}")

    if problems:
        print("\n".join(problems))
        return 1
    print(f"{len(docs)} documents checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
