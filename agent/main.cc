// fabricscope-agent: samples port counters below 1 ms and streams window summaries and
// microbursts to an aggregator, or serves /metrics itself (standalone mode).
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "agent/agent.h"
#include "agent/options.h"
#include "collectors/cli.h"
#include "exporters/http_server.h"
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
ABSL_FLAG(std::string, http_listen, "",
          "Standalone mode: HOST:PORT serving /metrics, /healthz and /api/microbursts. Default "
          "0.0.0.0:9470. Port 0 picks a free port, printed at start.");
ABSL_FLAG(std::string, ring_slots, "",
          "Samples buffered between the sampler and the pipeline. Default 8192.");
ABSL_FLAG(std::string, max_queued_batches, "",
          "Unacked batches kept while the aggregator is away; the oldest is dropped beyond "
          "this. Default 900 (15 minutes of 1 s windows).");
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
  if (auto v = flag(FLAGS_http_listen); !v.empty()) o->http_listen = v;
  auto count = [](const std::string& v, const char* name, size_t* out) -> absl::Status {
    if (v.empty()) return absl::OkStatus();
    if (!absl::SimpleAtoi(v, out)) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": \"", v, "\" is not a count"));
    }
    return absl::OkStatus();
  };
  if (auto s = count(flag(FLAGS_ring_slots), "--ring-slots", &o->ring_slots); !s.ok()) return s;
  if (auto s =
          count(flag(FLAGS_max_queued_batches), "--max-queued-batches", &o->max_queued_batches);
      !s.ok())
    return s;
  if (!o->aggregator.empty()) {
    if (auto hp = fabricscope::exporters::SplitHostPort(o->aggregator); !hp.ok())
      return hp.status();
  }
  if (auto hp = fabricscope::exporters::SplitHostPort(o->http_listen); !hp.ok()) return hp.status();
  return absl::OkStatus();
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
      "Flags may be written with dashes or underscores (--sample-period = --sample_period).");
  std::vector<std::string> storage;
  std::vector<char*> args = fabricscope::collectors::NormalizeFlagDashes(argc, argv, storage);
  int nargs = static_cast<int>(args.size());
  std::vector<char*> rest = absl::ParseCommandLine(nargs, args.data());
  if (rest.size() > 1)
    return Fail(absl::StrCat("unexpected argument \"", rest[1], "\"; see --help"));
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  AgentOptions options;
  std::string config = absl::GetFlag(FLAGS_config);
  const bool explicit_config = !config.empty();
  if (!explicit_config) config = "/etc/fabricscope/agent.yaml";
  if (absl::Status s = fabricscope::agent::LoadYamlConfig(config, &options); !s.ok()) {
    if (explicit_config || !absl::IsNotFound(s)) return Fail(std::string(s.message()));
  }
  if (absl::Status s = ApplyFlags(&options); !s.ok()) return Fail(std::string(s.message()));
  if (absl::Status s = fabricscope::agent::ValidateOptions(options); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  const std::string status_mode = absl::GetFlag(FLAGS_status);
  if (status_mode != "auto" && status_mode != "on" && status_mode != "off") {
    return Fail("--status must be auto, on or off");
  }
  const bool status_line = status_mode == "on" || (status_mode == "auto" && isatty(STDERR_FILENO));

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts

  auto agent = fabricscope::agent::Agent::Create(options);
  if (!agent.ok()) return Fail(std::string(agent.status().message()), 1);
  for (const std::string& note : (*agent)->notes()) LOG(WARNING) << note;
  for (const auto& p : (*agent)->ports()) {
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
  if (absl::Status s = (*agent)->Start(); !s.ok()) return Fail(std::string(s.message()), 1);
  if (options.aggregator.empty()) {
    const std::string host = fabricscope::exporters::SplitHostPort(options.http_listen)->first;
    printf("fabricscope-agent standalone: serving http://%s:%d/metrics\n", host.c_str(),
           (*agent)->http_port());
  } else {
    printf("fabricscope-agent streaming to %s\n", options.aggregator.c_str());
  }
  fflush(stdout);

  int sig = 0;
  const timespec one_second{1, 0};
  while (true) {
    sig = sigtimedwait(&signals, nullptr, &one_second);
    if (sig == SIGINT || sig == SIGTERM) break;
    (*agent)->Maintain();
    if (status_line) fprintf(stderr, "\r\033[K%s", (*agent)->StatusLine().c_str());
  }
  if (status_line) fprintf(stderr, "\n");
  LOG(INFO) << "signal " << sig << ", flushing and stopping";
  (*agent)->Stop();
  return 0;
}
