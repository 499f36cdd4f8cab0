// fabricscope-agent: samples port counters below 1 ms and streams window summaries and
// microbursts to an aggregator, or serves /metrics itself (standalone mode).
#include <linux/capability.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <tuple>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "agent/agent.h"
#include "agent/options.h"
#include "agent/privileges.h"
#include "collectors/cli.h"
#include "collectors/clock.h"
#include "exporters/http_server.h"
#include "exporters/service_notifier.h"
#include "glog/logging.h"

// String flags: an empty value means "not given", so the config file or the built-in default
// (stated in each help text) applies. Precedence: flag > config file > default.
ABSL_FLAG(std::string, config, "",
          "YAML config file. Default /etc/fabricscope/agent.yaml when it exists. Flags given on "
          "the command line override its values.");
ABSL_FLAG(std::string, node, "", "Node name reported to the aggregator. Default: the host name.");
ABSL_FLAG(std::string, sysfs_root, "", "Where sysfs is mounted. Default /sys.");
ABSL_FLAG(std::string, procfs_root, "", "Where procfs is mounted. Default /proc.");
ABSL_FLAG(std::string, sample_period, "",
          "Time between counter samples, e.g. 100us, 500us, 1ms. Default 1ms.");
ABSL_FLAG(std::string, window, "", "Summary window sent to the aggregator. Default 1s.");
ABSL_FLAG(std::string, slow_sample_period, "",
          "Period of the second sampler thread, which reads error counters, hw_counters, ethtool "
          "statistics, TCP counters and link state, so that slow or firmware-backed reads never "
          "delay the fast byte counters. Default 10ms (the mlx5 hw_counters lifespan).");
ABSL_FLAG(std::string, hw_lifespan, "",
          "Opt-in: write this hw_counters/lifespan (e.g. 1ms; 0..10s, whole ms) on every RDMA "
          "port at start and restore the old value at exit. Default: leave it alone.");
ABSL_FLAG(std::string, tcp, "",
          "Read TCP counters from <procfs>/net/{snmp,netstat}: on, off. "
          "Default on.");
ABSL_FLAG(std::string, ethtool, "",
          "Read SIOCETHTOOL statistics of the watched interfaces: on, "
          "off. Default on.");
ABSL_FLAG(std::string, pma, "",
          "InfiniBand PerfMgt targets read with PortCounters/PortCountersExtended MADs through "
          "libibumad, as a second source beside sysfs: \"local\" and/or LID:PORT entries (a "
          "switch port: its LID and port number), comma-separated. Default: off.");
ABSL_FLAG(std::string, pma_ca, "", "CA that sends the PerfMgt MADs. Default: the first IB CA.");
ABSL_FLAG(std::string, pma_port, "", "Port of --pma-ca that sends the MADs. Default 1.");
ABSL_FLAG(std::string, pma_period, "",
          "Time between PerfMgt queries (each is a blocking round trip, on its own thread). "
          "Default 1s.");
ABSL_FLAG(std::string, capture, "",
          "Capture packets on this interface (libpcap; needs CAP_NET_RAW) and analyze RoCEv2 "
          "and TCP flows for loss, retransmissions, NAKs, CNPs and ECN marks. Default: off.");
ABSL_FLAG(std::string, capture_filter, "",
          "BPF filter of the capture (pcap-filter(7)). Default \"udp dst port 4791 or tcp\".");
ABSL_FLAG(std::string, capture_snaplen, "",
          "Bytes captured per packet: headers only. Default 160.");
ABSL_FLAG(std::string, gpu_socket, "",
          "Unix socket (SOCK_SEQPACKET) where the NCCL profiler plugin and the CUPTI library of "
          "training processes send collective and kernel records; \"off\" disables. Default "
          "/run/fabricscope/gpu.sock (its directory is created).");
ABSL_FLAG(std::string, gpu_socket_mode, "",
          "Octal mode of the GPU socket. Default 0660: its owner and --gpu-socket-group may "
          "connect. 0666 lets every local user in.");
ABSL_FLAG(std::string, gpu_socket_group, "",
          "Group of the GPU socket: make the users who run training jobs members of it. "
          "Default fabricscope (the package creates it); when it does not exist the socket "
          "keeps the agent's group and a warning says so. \"-\" = the agent's group.");
ABSL_FLAG(std::string, gpu_allowed_uids, "",
          "Comma-separated uids (SO_PEERCRED) allowed to connect to the GPU socket. Default: any.");
ABSL_FLAG(std::string, gpu_max_connections, "",
          "Producer connections served at once; more are refused and counted. Default 256.");
ABSL_FLAG(std::string, gpu_queue_slots, "",
          "GPU records queued between the ingest and pipeline threads (256 bytes each); a full "
          "queue drops and counts. Default 16384.");
ABSL_FLAG(std::string, gpu_max_collectives_per_batch, "",
          "Collectives sent one by one per window; the rest count in the totals only. "
          "Default 4096.");
ABSL_FLAG(std::string, gpu_max_kernel_spans_per_batch, "",
          "Kernel spans sent one by one per window (NCCL kernels first); the rest are summarized "
          "per device and kernel name. Default 1024.");
ABSL_FLAG(std::string, gpu_rank_pairs_top_k, "",
          "Standalone: rank pairs exported in fabricscope_rank_pair_bytes_total (top by bytes). "
          "Default 20.");
ABSL_FLAG(std::string, interfaces, "",
          "Comma-separated ports to watch: RDMA device (mlx5_0), device:port (mlx5_0:1) or "
          "interface (eth0). Default: every RDMA port and every non-virtual interface; lo only "
          "when nothing else exists.");
ABSL_FLAG(std::string, line_rate, "",
          "Comma-separated line-rate overrides NAME=RATE, e.g. eth0=10gbit,mlx5_0:1=200gbit "
          "(tc units: bit, kbit, mbit, gbit, tbit). Needed for utilization and microbursts on "
          "links that report no speed (virtio, veth).");
ABSL_FLAG(std::string, burst_enter, "",
          "Microburst starts at a sample with utilization >= this fraction of line rate. "
          "Default 0.9.");
ABSL_FLAG(std::string, burst_exit, "",
          "Microburst ends at the first sample below this fraction of line rate. Default 0.7.");
ABSL_FLAG(std::string, aggregator, "",
          "Aggregator HOST:PORT to stream to over gRPC. Default: none, i.e. standalone mode: the "
          "aggregator runs in this process and serves /metrics.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA bundle that signed the aggregator's certificate: TLS to the aggregator. "
          "Default: plain text. Files are re-read every 60 s.");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of this agent, for mTLS (with --tls-key and --tls-ca). An "
          "aggregator with --tls-client-ca wants the node name as its DNS SAN or CN.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name to check the aggregator's certificate against. Default: the host of "
          "--aggregator.");
ABSL_FLAG(std::string, auth_token_file, "",
          "File whose first line is the token the aggregator asks for (its --auth-token-file, "
          "or this node's entry in its --node-tokens-file). Sent on every stream; pair it with "
          "--tls-ca where the network is not trusted. Default: none.");
ABSL_FLAG(std::string, http_listen, "",
          "Standalone mode: HOST:PORT serving /metrics, /healthz, /api/* and /heatmap/*. "
          "Default 127.0.0.1:9470 (this host only: they carry no authentication); "
          "0.0.0.0:9470 lets a scraper on another host in. Port 0 picks a free port, printed "
          "at start.");
ABSL_FLAG(std::string, web_config, "",
          "Standalone mode: web configuration file in the Prometheus exporters' format "
          "(tls_server_config: cert_file, key_file, client_auth_type, client_ca_file; "
          "basic_auth_users: name: bcrypt hash): HTTPS and/or basic auth on every endpoint but "
          "/healthz. Default: plain HTTP, no auth.");
ABSL_FLAG(std::string, health_listen, "",
          "Streaming mode (--aggregator): HOST:PORT serving /healthz alone, for Kubernetes "
          "probes. Port 0 picks a free port, printed at start. Default: off.");
ABSL_FLAG(std::string, ring_slots, "",
          "Samples buffered between the sampler and the pipeline. Default 8192.");
ABSL_FLAG(std::string, max_queued_batches, "",
          "Unacked batches kept while the aggregator is away; the oldest is dropped beyond "
          "this. Default 900 (15 minutes of 1 s windows).");
ABSL_FLAG(std::string, spool_dir, "",
          "Streaming mode: keep every unacked batch on disk here too (crash-safe: CRC32C-checked "
          "records, replayed with their original sequence numbers after a restart or an outage "
          "longer than --max-queued-batches). Default none (memory only); the systemd unit "
          "sets /var/lib/fabricscope/spool. Ignored in standalone mode. spool: {dir:} in the "
          "config.");
ABSL_FLAG(std::string, spool_max_bytes, "",
          "Most bytes the spool holds; past it the oldest batches are dropped and counted "
          "(fabricscope_agent_spool_dropped_batches_total{reason=\"full\"}). Bytes or "
          "KiB/MiB/GiB/TiB, 1MiB..1TiB. Default 256MiB.");
ABSL_FLAG(std::string, flight_recorder_seconds, "",
          "Seconds of raw sub-ms samples kept per port for drill-down (attached to batches "
          "around microbursts with loss). 0 = off. Default 10.");
ABSL_FLAG(std::string, series_bucket, "",
          "Bucket width of the per-port utilization series sent to the aggregator for the link "
          "heat map (e.g. 1ms, 100us). Default 1ms.");
ABSL_FLAG(std::string, collective_rails, "",
          "Ports a collective may use, for its correlation with port samples: names "
          "comma-separated (mlx5_0, mlx5_0:1, eth0). Default: every RDMA port, or every "
          "watched interface when there is none.");
ABSL_FLAG(std::string, collective_step_marker, "",
          "Collective function (e.g. AllReduce) whose instances mark training-iteration starts "
          "for the network share of step time. Default: share of wall time.");
ABSL_FLAG(std::string, status, "auto",
          "Status line on stderr once a second: auto (when stderr is a terminal), on, off.");

namespace {

using fabricscope::agent::AgentOptions;

int Fail(const std::string& msg, int code = 2) {
  fprintf(stderr, "fabricscope-agent: %s\n", msg.c_str());
  return code;
}

absl::Status ApplyFlags(AgentOptions* o) {
  auto flag = [](const absl::Flag<std::string>& f) { return absl::GetFlag(f); };
  if (auto v = flag(FLAGS_node); !v.empty()) o->node = v;
  if (auto v = flag(FLAGS_sysfs_root); !v.empty()) o->sysfs_root = v;
  if (auto v = flag(FLAGS_procfs_root); !v.empty()) o->procfs_root = v;
  using fabricscope::agent::ParseDurationNs;
  if (auto v = flag(FLAGS_sample_period); !v.empty()) {
    auto ns = ParseDurationNs(v, "--sample-period", 10'000, 1'000'000'000);
    if (!ns.ok()) return ns.status();
    o->sample_period_ns = *ns;
  }
  if (auto v = flag(FLAGS_window); !v.empty()) {
    auto ns = ParseDurationNs(v, "--window", 10'000'000, 3'600'000'000'000);
    if (!ns.ok()) return ns.status();
    o->window_ns = *ns;
  }
  if (auto v = flag(FLAGS_slow_sample_period); !v.empty()) {
    auto ns = ParseDurationNs(v, "--slow-sample-period", 10'000, 60'000'000'000);
    if (!ns.ok()) return ns.status();
    o->slow_sample_period_ns = *ns;
  }
  if (auto v = flag(FLAGS_hw_lifespan); !v.empty()) {
    auto ns = ParseDurationNs(v, "--hw-lifespan", 1'000'000, 10'000'000'000);
    if (!ns.ok()) return ns.status();
    o->hw_lifespan_ms = static_cast<uint32_t>(*ns / 1'000'000);
  }
  auto onoff = [](const std::string& v, const char* name, bool* out) -> absl::Status {
    if (v.empty()) return absl::OkStatus();
    if (v == "on" || v == "true") {
      *out = true;
    } else if (v == "off" || v == "false") {
      *out = false;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be on or off"));
    }
    return absl::OkStatus();
  };
  if (auto s = onoff(flag(FLAGS_tcp), "--tcp", &o->tcp); !s.ok()) return s;
  if (auto s = onoff(flag(FLAGS_ethtool), "--ethtool", &o->ethtool); !s.ok()) return s;
  if (auto v = flag(FLAGS_pma); !v.empty()) {
    auto t = fabricscope::agent::ParsePmaTargets(v);
    if (!t.ok()) return t.status();
    o->pma_targets = *t;
  }
  if (auto v = flag(FLAGS_pma_ca); !v.empty()) o->pma_ca = v;
  if (auto v = flag(FLAGS_pma_port); !v.empty()) {
    if (!absl::SimpleAtoi(v, &o->pma_port) || o->pma_port < 1 || o->pma_port > 254) {
      return absl::InvalidArgumentError("--pma-port must be 1..254");
    }
  }
  if (auto v = flag(FLAGS_pma_period); !v.empty()) {
    auto ns = ParseDurationNs(v, "--pma-period", 10'000'000, 3'600'000'000'000);
    if (!ns.ok()) return ns.status();
    o->pma_period_ns = *ns;
  }
  if (auto v = flag(FLAGS_capture); !v.empty()) o->capture_interface = v;
  if (auto v = flag(FLAGS_capture_filter); !v.empty()) o->capture_filter = v;
  if (auto v = flag(FLAGS_capture_snaplen); !v.empty()) {
    if (!absl::SimpleAtoi(v, &o->capture_snaplen)) {
      return absl::InvalidArgumentError("--capture-snaplen must be a number of bytes");
    }
  }
  if (auto v = flag(FLAGS_gpu_socket); !v.empty()) o->gpu_socket = v == "off" ? "" : v;
  if (auto v = flag(FLAGS_gpu_socket_mode); !v.empty()) {
    auto m = fabricscope::agent::ParseFileMode(v);
    if (!m.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--gpu-socket-mode: ", m.status().message()));
    }
    o->gpu_socket_mode = *m;
  }
  if (auto v = flag(FLAGS_gpu_socket_group); !v.empty()) o->gpu_socket_group = v == "-" ? "" : v;
  if (auto v = flag(FLAGS_gpu_allowed_uids); !v.empty()) {
    auto u = fabricscope::agent::ParseUidList(v);
    if (!u.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--gpu-allowed-uids: ", u.status().message()));
    }
    o->gpu_allowed_uids = *u;
  }
  const std::tuple<const absl::Flag<std::string>*, const char*, size_t*> gpu_sizes[] = {
      {&FLAGS_gpu_max_connections, "--gpu-max-connections", &o->gpu_max_connections},
      {&FLAGS_gpu_queue_slots, "--gpu-queue-slots", &o->gpu_queue_slots},
      {&FLAGS_gpu_max_collectives_per_batch, "--gpu-max-collectives-per-batch",
       &o->gpu_max_collectives_per_batch},
      {&FLAGS_gpu_max_kernel_spans_per_batch, "--gpu-max-kernel-spans-per-batch",
       &o->gpu_max_kernel_spans_per_batch},
      {&FLAGS_gpu_rank_pairs_top_k, "--gpu-rank-pairs-top-k", &o->gpu_rank_pairs_top_k}};
  for (const auto& [f, name, out] : gpu_sizes) {
    if (auto v = flag(*f); !v.empty() && !absl::SimpleAtoi(v, out)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be a number"));
    }
  }
  if (auto v = flag(FLAGS_interfaces); !v.empty()) {
    o->interfaces = absl::StrSplit(v, ',', absl::SkipWhitespace());
  }
  if (auto v = flag(FLAGS_line_rate); !v.empty()) {
    auto rates = fabricscope::agent::ParseLineRateList(v);
    if (!rates.ok()) return rates.status();
    for (const auto& [k, r] : *rates) o->line_rates[k] = r;
  }
  auto ratio = [](const std::string& v, const char* name, double* out) -> absl::Status {
    if (v.empty()) return absl::OkStatus();
    if (!absl::SimpleAtod(v, out)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": \"", v, "\" is not a number"));
    }
    return absl::OkStatus();
  };
  if (auto s = ratio(flag(FLAGS_burst_enter), "--burst-enter", &o->thresholds.enter); !s.ok())
    return s;
  if (auto s = ratio(flag(FLAGS_burst_exit), "--burst-exit", &o->thresholds.exit); !s.ok())
    return s;
  if (auto v = flag(FLAGS_aggregator); !v.empty()) o->aggregator = v;
  if (auto v = flag(FLAGS_tls_ca); !v.empty()) o->tls.ca = v;
  if (auto v = flag(FLAGS_tls_cert); !v.empty()) o->tls.cert = v;
  if (auto v = flag(FLAGS_tls_key); !v.empty()) o->tls.key = v;
  if (auto v = flag(FLAGS_tls_server_name); !v.empty()) o->tls.server_name = v;
  if (auto v = flag(FLAGS_auth_token_file); !v.empty()) o->auth_token_file = v;
  if (auto v = flag(FLAGS_http_listen); !v.empty()) o->http_listen = v;
  if (auto v = flag(FLAGS_web_config); !v.empty()) o->web_config = v;
  if (auto v = flag(FLAGS_health_listen); !v.empty()) o->health_listen = v;
  auto count = [](const std::string& v, const char* name, size_t* out) -> absl::Status {
    if (v.empty()) return absl::OkStatus();
    if (!absl::SimpleAtoi(v, out)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": \"", v, "\" is not a count"));
    }
    return absl::OkStatus();
  };
  if (auto s = count(flag(FLAGS_ring_slots), "--ring-slots", &o->ring_slots); !s.ok()) return s;
  if (auto v = flag(FLAGS_flight_recorder_seconds); !v.empty()) {
    if (!absl::SimpleAtod(v, &o->flight_recorder_seconds)) {
      return absl::InvalidArgumentError("--flight-recorder-seconds must be a number");
    }
  }
  if (auto v = flag(FLAGS_collective_rails); !v.empty()) {
    o->collectives.rails = absl::StrSplit(v, ',', absl::SkipEmpty());
  }
  if (auto v = flag(FLAGS_collective_step_marker); !v.empty()) o->collectives.step_marker = v;
  if (auto v = flag(FLAGS_series_bucket); !v.empty()) {
    auto ns = ParseDurationNs(v, "--series-bucket", 10'000, 1'000'000'000);
    if (!ns.ok()) return ns.status();
    o->series_bucket_ns = *ns;
  }
  if (auto s =
          count(flag(FLAGS_max_queued_batches), "--max-queued-batches", &o->max_queued_batches);
      !s.ok())
    return s;
  if (auto v = flag(FLAGS_spool_dir); !v.empty()) o->spool_dir = v;
  if (auto v = flag(FLAGS_spool_max_bytes); !v.empty()) {
    auto n = fabricscope::agent::ParseByteSize(v, "--spool-max-bytes");
    if (!n.ok()) return n.status();
    o->spool_max_bytes = *n;
  }
  if (!o->aggregator.empty()) {
    if (auto hp = fabricscope::exporters::SplitHostPort(o->aggregator); !hp.ok())
      return hp.status();
  }
  if (auto hp = fabricscope::exporters::SplitHostPort(o->http_listen); !hp.ok()) return hp.status();
  if (!o->health_listen.empty()) {
    if (auto hp = fabricscope::exporters::SplitHostPort(o->health_listen); !hp.ok())
      return hp.status();
  }
  return absl::OkStatus();
}

// Config file, then flags (flag > config file > default), then the cross-field checks. Called
// at start and again on SIGHUP, so a reload re-reads the file while the flags stay as given.
absl::StatusOr<AgentOptions> LoadOptions() {
  AgentOptions options;
  std::string config = absl::GetFlag(FLAGS_config);
  const bool explicit_config = !config.empty();
  if (!explicit_config) config = "/etc/fabricscope/agent.yaml";
  if (absl::Status s = fabricscope::agent::LoadYamlConfig(config, &options); !s.ok()) {
    if (explicit_config || !absl::IsNotFound(s)) return s;
  }
  if (absl::Status s = ApplyFlags(&options); !s.ok()) return s;
  if (absl::Status s = fabricscope::agent::ValidateOptions(options); !s.ok()) return s;
  return options;
}

void LogPorts(const fabricscope::agent::Agent& agent) {
  for (const std::string& note : agent.notes()) LOG(WARNING) << note;
  for (const auto& p : agent.ports()) {
    if (p.node_level) {
      LOG(INFO) << "watching " << p.device << " (node-wide, " << p.counters.size() << " counters)";
      continue;
    }
    LOG(INFO) << "watching " << (p.rdma ? p.Key() : p.device) << " ("
              << (p.rdma ? "RDMA" : "netdev") << ", " << p.counters.size()
              << " counters, line rate "
              << (p.line_rate_bytes_per_second
                      ? absl::StrCat(static_cast<double>(p.line_rate_bytes_per_second) * 8 / 1e9,
                                     " Gb/s")
                      : std::string("unknown"))
              << ")";
  }
}

// The ports as one line: "mlx5_0:1,eth0" (printed at start and after a reload).
std::string PortList(const fabricscope::agent::Agent& agent) {
  std::vector<std::string> names;
  for (const auto& p : agent.ports()) {
    if (!p.node_level) names.push_back(p.rdma ? p.Key() : p.device);
  }
  return absl::StrJoin(names, ",");
}

std::string Serving(const AgentOptions& options, const fabricscope::agent::Agent& agent) {
  if (options.aggregator.empty()) {
    const std::string host = fabricscope::exporters::SplitHostPort(options.http_listen)->first;
    return absl::StrCat("standalone: serving http://", host, ":", agent.http_port(), "/metrics");
  }
  std::string s = absl::StrCat("streaming to ", options.aggregator);
  if (agent.health_port() > 0) {
    absl::StrAppend(&s, ", health http://",
                    fabricscope::exporters::SplitHostPort(options.health_listen)->first, ":",
                    agent.health_port(), "/healthz");
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  fabricscope::collectors::ConfigureFlagUsage("fabricscope-agent 0.1.0");
  absl::SetProgramUsageMessage(
      "fabricscope agent: samples InfiniBand/RoCE port counters and network interface counters "
      "at sub-millisecond resolution, finds microbursts, and streams 1 s summaries to a "
      "fabricscope-aggregator (--aggregator) or serves Prometheus /metrics itself (standalone, "
      "the default).\n\n"
      "Usage: fabricscope-agent [flags]\n"
      "  e.g. fabricscope-agent --sample-period=100us --http-listen=127.0.0.1:9470\n"
      "SIGHUP re-reads the config file (flags stay as given) and rebuilds the port selection; "
      "SIGTERM or SIGINT flushes the last window and stops.\n"
      "Flags may be written with dashes or underscores (--sample-period = --sample_period).\n"
      "Exit status: 0 stopped by SIGTERM or SIGINT; 2 a bad flag value, config file or "
      "argument; 1 an environment that cannot be sampled (missing sysfs root, no matching "
      "port, a taken address), and also --help and an unknown flag (Abseil's flag parser).");
  std::vector<std::string> storage;
  std::vector<char*> args = fabricscope::collectors::NormalizeFlagDashes(argc, argv, storage);
  int nargs = static_cast<int>(args.size());
  std::vector<char*> rest = absl::ParseCommandLine(nargs, args.data());
  if (rest.size() > 1)
    return Fail(absl::StrCat("unexpected argument \"", rest[1], "\"; see --help"));
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  auto loaded = LoadOptions();
  if (!loaded.ok()) return Fail(std::string(loaded.status().message()));
  AgentOptions options = *std::move(loaded);
  const std::string status_mode = absl::GetFlag(FLAGS_status);
  if (status_mode != "auto" && status_mode != "on" && status_mode != "off") {
    return Fail("--status must be auto, on or off");
  }
  const bool status_line = status_mode == "on" || (status_mode == "auto" && isatty(STDERR_FILENO));

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts

  fabricscope::exporters::ServiceNotifier notifier;
  auto created = fabricscope::agent::Agent::Create(options);
  if (!created.ok()) return Fail(std::string(created.status().message()), 1);
  std::unique_ptr<fabricscope::agent::Agent> agent = *std::move(created);
  LogPorts(*agent);
  // Least privilege before any thread starts (capabilities are per thread, and threads inherit
  // their creator's): CAP_NET_RAW while capture is configured, CAP_CHOWN while the GPU socket is
  // to get a group, nothing else (agent/privileges.h).
  std::vector<unsigned> keep;
  if (!options.capture_interface.empty()) keep.push_back(CAP_NET_RAW);
  if (!options.gpu_socket.empty() && !options.gpu_socket_group.empty()) keep.push_back(CAP_CHOWN);
  if (auto caps = fabricscope::agent::DropCapabilitiesExcept(keep); caps.ok()) {
    LOG(INFO) << "capabilities kept: " << *caps;
  } else {
    LOG(WARNING) << caps.status().message();
  }
  if (absl::Status s = agent->Start(); !s.ok()) return Fail(std::string(s.message()), 1);
  printf("fabricscope-agent %s\n", Serving(options, *agent).c_str());
  printf("fabricscope-agent ports: %s\n", PortList(*agent).c_str());
  fflush(stdout);
  notifier.Ready(Serving(options, *agent));

  // The control loop: signals, the systemd watchdog, re-plugged devices (once a second) and the
  // status line. WATCHDOG=1 goes out only while every sampler thread ticks (StalledSampler), so
  // systemd restarts an agent whose sampling stalled. Pings every quarter of $WATCHDOG_USEC
  // (the loop wakes as often), so a late wake-up on a loaded machine stays far from the
  // deadline.
  const int64_t wd_ns = notifier.watchdog_interval_ns();
  const int64_t step_ns = wd_ns > 0 ? std::min<int64_t>(wd_ns / 2, 1'000'000'000) : 1'000'000'000;
  const timespec step{static_cast<time_t>(step_ns / 1'000'000'000),
                      static_cast<long>(step_ns % 1'000'000'000)};
  using fabricscope::collectors::MonotonicNowNs;
  int64_t last_ping_ns = 0, last_maintain_ns = MonotonicNowNs(), last_status_ns = 0;
  std::string stalled;
  int sig = 0;
  while (true) {
    sig = sigtimedwait(&signals, nullptr, &step);
    if (sig == SIGINT || sig == SIGTERM) break;
    if (sig == SIGHUP) {
      // Reload: the config file again with the same flags, a new Agent (port discovery and
      // selection, samplers, uplink) built before the old one stops, so a bad config or a
      // vanished interface leaves the running agent untouched.
      notifier.Reloading("re-reading the config file");
      LOG(INFO) << "SIGHUP: re-reading the config file";
      auto next_options = LoadOptions();
      absl::StatusOr<std::unique_ptr<fabricscope::agent::Agent>> next =
          next_options.ok() ? fabricscope::agent::Agent::Create(*next_options)
                            : next_options.status();
      if (!next.ok()) {
        LOG(ERROR) << "reload failed, the agent keeps running as it was: "
                   << next.status().message();
        notifier.Ready(absl::StrCat("reload failed (", next.status().message(), "); ",
                                    Serving(options, *agent)));
      } else {
        // Standalone on the same address: the in-process aggregator keeps serving across the
        // reload. Otherwise the old one stops (flushing its uplink) before the new one starts.
        const bool keep_http = options.aggregator.empty() && next_options->aggregator.empty() &&
                               options.http_listen == next_options->http_listen;
        std::unique_ptr<fabricscope::exporters::Aggregator> serving;
        if (keep_http) {
          serving = agent->StopAndReleaseAggregator();
          // The web config is read again (a renewed certificate, changed users): the HTTP
          // server alone restarts, the state stays.
          fabricscope::exporters::AggregatorOptions ao = serving->options();
          ao.web_config = next_options->web_config;
          if (absl::Status s = serving->Reconfigure(ao); !s.ok()) {
            LOG(ERROR) << "reload: web config: " << s.message();
          }
        } else {
          agent->Stop();
        }
        agent = *std::move(next);
        options = *std::move(next_options);
        LogPorts(*agent);
        if (absl::Status s = agent->Start(std::move(serving)); !s.ok()) {
          notifier.Stopping(absl::StrCat("reload failed: ", s.message()));
          return Fail(absl::StrCat("reload: ", s.message()), 1);
        }
        printf("fabricscope-agent reloaded, %s\n", Serving(options, *agent).c_str());
        printf("fabricscope-agent ports: %s\n", PortList(*agent).c_str());
        fflush(stdout);
        notifier.Ready(Serving(options, *agent));
        stalled.clear();
      }
    }
    const int64_t now = MonotonicNowNs();
    if (now - last_maintain_ns >= 1'000'000'000) {
      agent->Maintain();
      last_maintain_ns = now;
      if (status_line) fprintf(stderr, "\r\033[K%s", agent->StatusLine().c_str());
    }
    const std::string why = agent->StalledSampler(now);
    if (why != stalled) {
      if (!why.empty()) LOG(ERROR) << why << "; systemd watchdog pings stop";
      if (why.empty()) LOG(INFO) << "samplers tick again; systemd watchdog pings resume";
      stalled = why;
      notifier.Status(why.empty() ? agent->StatusLine() : why);
      last_status_ns = now;
    }
    if (wd_ns > 0 && stalled.empty() && now - last_ping_ns >= wd_ns / 2) {
      notifier.WatchdogPing();
      last_ping_ns = now;
    }
    if (notifier.enabled() && stalled.empty() && now - last_status_ns >= 10'000'000'000) {
      notifier.Status(agent->StatusLine());
      last_status_ns = now;
    }
  }
  if (status_line) fprintf(stderr, "\n");
  LOG(INFO) << "signal " << sig << ", flushing and stopping";
  notifier.Stopping("flushing and stopping");
  agent->Stop();
  return 0;
}
