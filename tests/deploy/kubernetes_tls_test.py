#!/usr/bin/python3
"""Structural check of deploy/kubernetes-tls, the cert-manager overlay (no cluster).

Usage: kubernetes_tls_test.py OVERLAY_DIR AGENT_BIN AGGREGATOR_BIN

Applies the overlay's JSON patches (RFC 6902 "add", the only op it uses) to the base's
workloads itself, then checks: cert-manager objects (cert-manager.io/v1) in the fabricscope
namespace whose issuerRefs name Issuers defined here; the aggregator's Certificate names the
base Service's DNS name, which is the agents' --tls-server-name, with "server auth" usage; every
--tls-* flag is one the daemon's --help lists and points at a file that a mounted volume of the
Certificate's Secret provides under cert-manager's key names (tls.crt, tls.key, ca.crt); the
agents get ca.crt alone, never the aggregator's key; Secrets are mounted whole or by items, never
by subPath (a subPath mount never sees a renewal). Where kubectl is installed, `kubectl
kustomize` must render the overlay to the same workloads. Exits 1 listing every problem.
"""
import copy
import os
import shutil
import subprocess
import sys

import yaml

problems = []


def fail(where, msg):
    problems.append(f"{where}: {msg}")


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def json_pointer_add(doc, path, value):
    """RFC 6902 add: the last token "-" appends to an array."""
    tokens = [t.replace("~1", "/").replace("~0", "~") for t in path.lstrip("/").split("/")]
    cur = doc
    for t in tokens[:-1]:
        cur = cur[int(t)] if isinstance(cur, list) else cur.setdefault(t, {})
    last = tokens[-1]
    if isinstance(cur, list):
        cur.append(value) if last == "-" else cur.insert(int(last), value)
    else:
        cur[last] = value


def help_flags(binary):
    out = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    text = out.stdout + out.stderr
    # Abseil lists --tls_ca; the daemons take --tls-ca as well (README), so compare with dashes.
    return {w.split("=")[0].replace("_", "-") for w in text.replace("(", " ").split()
            if w.startswith("--")}


def mounted_files(spec, container, certs):
    """Path -> (secret, key) for every secret volume of `container` (items or whole)."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    files = {}
    for m in container.get("volumeMounts", []):
        v = volumes.get(m["name"])
        if v is None or "secret" not in v:
            continue
        if "subPath" in m:
            fail(container["name"], f"secret volume {m['name']} mounted by subPath")
        secret = v["secret"]["secretName"]
        keys = [(i["key"], i["path"]) for i in v["secret"].get("items", [])]
        if not keys and secret in certs:
            keys = [(k, k) for k in ("tls.crt", "tls.key", "ca.crt")]
        for key, rel in keys:
            files[os.path.join(m["mountPath"], rel)] = (secret, key)
    return files


def main():
    overlay, agent_bin, aggregator_bin = sys.argv[1:4]
    kust = load_all(os.path.join(overlay, "kustomization.yaml"))[0]
    base = None
    objects = []
    for r in kust.get("resources", []):
        p = os.path.normpath(os.path.join(overlay, r))
        if os.path.isdir(p):
            base = p
            for name in load_all(os.path.join(p, "kustomization.yaml"))[0]["resources"]:
                objects += load_all(os.path.join(p, name))
        else:
            objects += load_all(p)
    if base is None:
        fail("kustomization", "no base directory among resources")
    workloads = {(o["kind"], o["metadata"]["name"]): o for o in objects
                 if o.get("kind") in ("Deployment", "DaemonSet")}
    patched = copy.deepcopy(workloads)
    for p in kust.get("patches", []):
        key = (p["target"]["kind"], p["target"]["name"])
        if key not in patched:
            fail("patches", f"target {key} is not a workload of the base")
            continue
        for op in load_all(os.path.join(overlay, p["path"]))[0]:
            if op.get("op") != "add":
                fail(p["path"], f"op {op.get('op')!r}: only add is handled here")
                continue
            json_pointer_add(patched[key], op["path"], op["value"])

    cm = [o for o in objects if o.get("apiVersion", "").startswith("cert-manager.io")]
    issuers = {o["metadata"]["name"] for o in cm if o["kind"] == "Issuer"}
    certs = {}
    for o in cm:
        where = f"{o['kind']} {o['metadata'].get('name')}"
        if o.get("apiVersion") != "cert-manager.io/v1":
            fail(where, f"apiVersion {o.get('apiVersion')}")
        if o["metadata"].get("namespace") != "fabricscope":
            fail(where, "not in namespace fabricscope")
        if o["kind"] == "Certificate":
            ref = o["spec"].get("issuerRef", {})
            if ref.get("kind") == "Issuer" and ref.get("name") not in issuers:
                fail(where, f"issuerRef {ref.get('name')} is no Issuer here")
            certs[o["spec"]["secretName"]] = o
        elif o["kind"] == "Issuer" and "ca" in o["spec"]:
            if o["spec"]["ca"].get("secretName") not in certs:
                fail(where, "its CA Secret is made by no Certificate here")
    service = next(o for o in objects if o.get("kind") == "Service")
    svc_name = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    serving = [c for c in certs.values() if svc_name in c["spec"].get("dnsNames", [])]
    if len(serving) != 1:
        fail("Certificates", f"{len(serving)} name the Service {svc_name}, expected one")
    elif "server auth" not in serving[0]["spec"].get("usages", []):
        fail("Certificates", "the aggregator's lacks the server auth usage")

    for (kind, name), w in patched.items():
        binary = agent_bin if kind == "DaemonSet" else aggregator_bin
        flags = help_flags(binary)
        spec = w["spec"]["template"]["spec"]
        c = spec["containers"][0]
        files = mounted_files(spec, c, certs)
        tls_args = [a for a in c.get("args", []) if a.startswith("--tls-")]
        if not tls_args:
            fail(name, "no --tls-* flag")
        for a in tls_args:
            flag, _, value = a.partition("=")
            if flag not in flags:
                fail(name, f"{flag} is not in {os.path.basename(binary)} --help")
            if flag == "--tls-server-name":
                if value != svc_name:
                    fail(name, f"--tls-server-name={value}, the Service is {svc_name}")
            elif value not in files:
                fail(name, f"{a}: no mounted Secret provides {value}")
            elif files[value][0] not in certs:
                fail(name, f"{a}: Secret {files[value][0]} is made by no Certificate here")
        if kind == "DaemonSet":
            leaked = [p for p, (_, key) in files.items() if key == "tls.key"]
            if leaked:
                fail(name, f"the agents mount the aggregator's private key at {leaked}")

    kubectl = shutil.which("kubectl")
    if kubectl:
        out = subprocess.run([kubectl, "kustomize", overlay], capture_output=True, text=True,
                             timeout=60)
        if out.returncode != 0:
            fail("kubectl kustomize", out.stderr.strip())
        else:
            rendered = {(o["kind"], o["metadata"]["name"]): o
                        for o in yaml.safe_load_all(out.stdout) if o}
            for key, w in patched.items():
                got = rendered.get(key, {}).get("spec", {}).get("template", {}).get("spec")
                if got != w["spec"]["template"]["spec"]:
                    fail("kubectl kustomize", f"{key} differs from the patches applied here")
    else:
        print("kubectl not installed: the overlay's own render is not compared")

    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"deploy/kubernetes-tls: {len(cm)} cert-manager objects, {len(patched)} workloads patched")
    return 0


if __name__ == "__main__":
    sys.exit(main())
