#!/usr/bin/env bash
# Installs every build, test and run-time dependency of fabricscope from Debian packages.
# Idempotent: packages already present are skipped, and apt is only touched when one is missing.
# Usage: deploy/install-deps.sh   (as root, or with sudo available)
set -euo pipefail

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  # libraries (Debian 12 packages only: README "Quick start")
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  prometheus-cpp-dev libcpp-httplib-dev
  # Prometheus remote-write: snappy block compression of each WriteRequest
  libsnappy-dev
  # the agent's parse of `rdma -j res show qp`, per-port attribution (agent/qp_ports.cc)
  libsimdjson-dev
  # the event history's database (exporters/history/history_store.h)
  libsqlite3-dev
  # tcmalloc, the agent's and the aggregator's allocator (CMakeLists.txt: FABRICSCOPE_MALLOC)
  libgoogle-perftools-dev
  libpcap-dev libibverbs-dev libibumad-dev
  # the agent spool's CRC32C (ISA-L crc32_iscsi)
  libisal-dev
  libabsl-dev libgoogle-glog-dev libsystemd-dev libyaml-cpp-dev
  # libxcrypt's crypt_r for the web config's bcrypt hashes; OpenSSL (TLS, SHA-256)
  libcrypt-dev libssl-dev
  # libcap-ng: the agent drops the capabilities it does not use once its sources are open
  libcap-ng-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  # tests: namespaces, traffic shaping, a real Prometheus (promtool, the remote-write receiver)
  # and a real VictoriaMetrics (the other remote-write receiver)
  iproute2 prometheus victoria-metrics curl procps jq
  # tests/e2e fault matrix: random packet loss (nft numgen random; this kernel has no sch_netem)
  nftables
  # tests: certificates and tokens made in the test (tls_test, the e2e tokens)
  openssl
  # tests/e2e: xmllint checks that the heat-map SVGs are well-formed XML
  libxml2-utils
  # LLDP neighbours (agent/lldp_neighbors.h): the agent runs lldpd's lldpcli; the tests run
  # lldpd in network namespaces. Optional on a node: without it the agent is host-only.
  lldpd
  # tests: tshark as the reference RoCEv2 decoder (tests/collectors/pcap; DEBIAN_FRONTEND=noninteractive
  # answers no to non-root capture); clang and its libFuzzer runtime for tests/fuzz/run.sh
  tshark clang libclang-rt-14-dev
  # tests: node_exporter as the reference parser of the same sysfs/procfs trees; setpriv
  prometheus-node-exporter util-linux
  # tests/e2e: headless Chromium renders the heat-map SVGs to PNG (cluster-in-a-box test)
  chromium
  # deploy/ tests: systemd-analyze (units), dpkg-dev and file (CPack's .deb, dpkg-shlibdeps),
  # shellcheck (maintainer scripts), python3-yaml (Kubernetes manifests)
  systemd dpkg-dev file shellcheck python3-yaml
  # tests/lint: the size limits (no file over 600 lines, no function over 120; Universal Ctags)
  universal-ctags
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# --no-install-recommends keeps the prometheus package from pulling a web UI build chain.
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
# The prometheus package starts a server on :9090 when installed on a machine with systemd;
# fabricscope's tests start their own on loopback ports, so a stray one is harmless.
echo "install-deps: done"
