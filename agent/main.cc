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
#include "collectors/common/daemon_loop.h"
#include "collectors/common/host_port.h"
#include "exporters/aggregator.h"
#include "glog/logging.h"

// One Abseil flag per option of agent/options.inc, all strings: an empty value means "not
// given", so the config file or the default applies (flag > config file > default). Their help
// is the table's, printed by --help (PrintHelp); Abseil's --helpfull points there.
#define FABRICSCOPE_OPTION(id, ...) ABSL_FLAG(std::string, id, "", "See --help.");
#define FABRICSCOPE_CONFIG_OPTION(...)
#include "agent/options.inc"
#undef FABRICSCOPE_OPTION
#undef FABRICSCOPE_CONFIG_OPTION
ABSL_FLAG(bool, help_markdown, false, "Print the option table in Markdown (README's) and exit.");
ABSL_FLAG(bool, help_man, false, "Print the manual page fabricscope-agent(8) in roff and exit.");

namespace {

using fabricscope::agent::AgentOptions;
using fabricscope::agent::AgentOptionTable;

int Fail(const std::string& msg, int code = 2) {
  fprintf(stderr, "fabricscope-agent: %s\n", msg.c_str());
  return code;
}

struct FlagRef {
  const char* id;
  const absl::Flag<std::string>* flag;
};
#define FABRICSCOPE_OPTION(id, ...) {#id, &FLAGS_##id},
#define FABRICSCOPE_CONFIG_OPTION(...)
const FlagRef kFlags[] = {
#include "agent/options.inc"
};
#undef FABRICSCOPE_OPTION
#undef FABRICSCOPE_CONFIG_OPTION

absl::Status ApplyFlags(AgentOptions* o) {
  for (const FlagRef& f : kFlags) {
    const std::string v = absl::GetFlag(*f.flag);
    if (v.empty()) continue;
    std::string name = f.id;
    std::replace(name.begin(), name.end(), '_', '-');
    if (absl::Status s = fabricscope::common::SetFromFlag(AgentOptionTable(), name, v, o); !s.ok())
      return s;
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
    const std::string host = fabricscope::common::SplitHostPort(options.http_listen)->first;
    return absl::StrCat("standalone: serving http://", host, ":", agent.http_port(), "/metrics");
  }
  std::string s = absl::StrCat("streaming to ", options.aggregator);
  if (agent.health_port() > 0) {
    absl::StrAppend(&s, ", health http://",
                    fabricscope::common::SplitHostPort(options.health_listen)->first, ":",
                    agent.health_port(), "/healthz");
  }
  return s;
}

constexpr char kUsage[] =
    "fabricscope agent: samples InfiniBand/RoCE port counters and network interface counters at "
    "sub-millisecond resolution, finds microbursts, and streams 1 s summaries to a "
    "fabricscope-aggregator (--aggregator) or serves Prometheus /metrics itself (standalone, the "
    "default).\n\n"
    "Usage: fabricscope-agent [flags]\n"
    "  e.g. fabricscope-agent --sample-period=100us --http-listen=127.0.0.1:9470\n"
    "SIGHUP re-reads the config file (flags stay as given) and rebuilds the port selection; "
    "SIGTERM or SIGINT flushes the last window and stops.\n"
    "Flags may be written with dashes or underscores (--sample-period = --sample_period). A "
    "list (form \"...,...\") may also be given as the flag repeated: --remote-write-url=A "
    "--remote-write-url=B.\n"
    "Exit status: 0 stopped by SIGTERM or SIGINT, or --help; 2 a bad flag value, config file or "
    "argument; 1 an environment that cannot be sampled (missing sysfs root, no matching port, a "
    "taken address), and also an unknown flag (Abseil's flag parser).\n";

// --help (and -h) from the option table, before Abseil's parser sees it. Returns true when
// the help was printed.
bool PrintHelpIfAsked(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h" || a == "-help") {
      printf("%s\nOptions:\n%s", kUsage,
             fabricscope::common::OptionHelp(AgentOptionTable(), AgentOptions{}).c_str());
      return true;
    }
  }
  return false;
}

// The running agent and what SIGHUP does to it.
class AgentDaemon {
 public:
  AgentDaemon(AgentOptions options, std::unique_ptr<fabricscope::agent::Agent> agent,
              fabricscope::common::ServiceNotifier& notifier)
      : options_(std::move(options)), agent_(std::move(agent)), notifier_(notifier) {}

  fabricscope::agent::Agent& agent() { return *agent_; }
  const AgentOptions& options() const { return options_; }

  // Prints the serving line and the ports, and tells systemd.
  void Announce(const char* what) {
    printf("fabricscope-agent %s%s\n", what, Serving(options_, *agent_).c_str());
    printf("fabricscope-agent ports: %s\n", PortList(*agent_).c_str());
    fflush(stdout);
    notifier_.Ready(Serving(options_, *agent_));
  }

  // Reload: the config file again with the same flags, a new Agent (port discovery and
  // selection, samplers, uplink) built before the old one stops, so a bad config or a vanished
  // interface leaves the running agent untouched. Returns false when the new agent could not
  // start (the old one is gone by then: the daemon exits).
  bool Reload() {
    notifier_.Reloading("re-reading the config file");
    LOG(INFO) << "SIGHUP: re-reading the config file";
    auto next_options = LoadOptions();
    absl::StatusOr<std::unique_ptr<fabricscope::agent::Agent>> next =
        next_options.ok() ? fabricscope::agent::Agent::Create(*next_options)
                          : next_options.status();
    if (!next.ok()) {
      LOG(ERROR) << "reload failed, the agent keeps running as it was: " << next.status().message();
      notifier_.Ready(absl::StrCat("reload failed (", next.status().message(), "); ",
                                   Serving(options_, *agent_)));
      return true;
    }
    // Standalone on the same address: the in-process aggregator keeps serving across the
    // reload; its web config is read again (a renewed certificate, changed users): the HTTP
    // server alone restarts, the state stays. Otherwise the old agent stops (flushing its
    // uplink) before the new one starts.
    const bool keep_http = options_.aggregator.empty() && next_options->aggregator.empty() &&
                           options_.http_listen == next_options->http_listen;
    std::unique_ptr<fabricscope::exporters::Aggregator> serving;
    if (keep_http) {
      serving = agent_->StopAndReleaseAggregator();
      fabricscope::exporters::AggregatorOptions ao = serving->options();
      ao.web_config = next_options->web_config;
      if (absl::Status s = serving->Reconfigure(ao); !s.ok()) {
        LOG(ERROR) << "reload: web config: " << s.message();
      }
    } else {
      agent_->Stop();
    }
    agent_ = *std::move(next);
    options_ = *std::move(next_options);
    LogPorts(*agent_);
    if (absl::Status s = agent_->Start(std::move(serving)); !s.ok()) {
      notifier_.Stopping(absl::StrCat("reload failed: ", s.message()));
      failure_ = absl::StrCat("reload: ", s.message());
      return false;
    }
    Announce("reloaded, ");
    return true;
  }

  const std::string& failure() const { return failure_; }

 private:
  AgentOptions options_;
  std::unique_ptr<fabricscope::agent::Agent> agent_;
  fabricscope::common::ServiceNotifier& notifier_;
  std::string failure_;
};

// Least privilege before any thread starts (capabilities are per thread, and threads inherit
// their creator's): CAP_NET_RAW while capture is configured, CAP_CHOWN while the GPU socket is
// to get a group, CAP_SYS_NICE while the sampler runs at SCHED_FIFO, nothing else
// (agent/privileges.h).
void DropPrivileges(const AgentOptions& options) {
  // lldpd's client and socket (agent/lldp_neighbors.h) are for groups adm and _lldpd only: an
  // agent started as root joins them here, while it may (under systemd the unit's user gets
  // them from deploy/systemd/lldp.conf, and has no CAP_SETGID to do this).
  if (!options.lldpd_socket.empty() && geteuid() == 0) {
    if (auto joined = fabricscope::agent::JoinGroups({"_lldpd", "adm"});
        joined.ok() && !joined->empty()) {
      LOG(INFO) << "joined groups for lldpd: " << absl::StrJoin(*joined, ", ");
    } else if (!joined.ok()) {
      LOG(WARNING) << "LLDP: " << joined.status().message();
    }
  }
  std::vector<unsigned> keep;
  if (!options.capture_interface.empty()) keep.push_back(CAP_NET_RAW);
  if (!options.gpu_socket.empty() && !options.gpu_socket_group.empty()) keep.push_back(CAP_CHOWN);
  // SCHED_FIFO for the sampler, set when (and each time a reload) starts its thread.
  if (fabricscope::agent::SamplerSchedOf(options).fifo_priority > 0) keep.push_back(CAP_SYS_NICE);
  if (auto caps = fabricscope::agent::DropCapabilitiesExcept(keep); caps.ok()) {
    LOG(INFO) << "capabilities kept: " << *caps;
  } else {
    LOG(WARNING) << caps.status().message();
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (PrintHelpIfAsked(argc, argv)) return 0;
  fabricscope::collectors::ConfigureFlagUsage("fabricscope-agent 0.1.0");
  absl::SetProgramUsageMessage(kUsage);
  std::vector<std::string> storage;
  std::vector<char*> args = fabricscope::collectors::NormalizeFlagDashes(
      argc, argv, storage, fabricscope::common::RepeatableFlags(AgentOptionTable()));
  int nargs = static_cast<int>(args.size());
  std::vector<char*> rest = absl::ParseCommandLine(nargs, args.data());
  if (rest.size() > 1)
    return Fail(absl::StrCat("unexpected argument \"", rest[1], "\"; see --help"));
  if (absl::GetFlag(FLAGS_help_markdown)) {
    printf("%s", fabricscope::common::OptionMarkdown(AgentOptionTable(), AgentOptions{}).c_str());
    return 0;
  }
  if (absl::GetFlag(FLAGS_help_man)) {
    fabricscope::common::ManPage page{
        .name = "fabricscope-agent",
        .section = "8",
        .version = "fabricscope 0.1.0",
        .summary = "per-node network telemetry agent of GPU training clusters",
        .synopsis = "[OPTION]...",
        .description = kUsage,
        .options = fabricscope::common::OptionManEntries(AgentOptionTable(), AgentOptions{}),
        .files =
            "/etc/fabricscope/agent.yaml: the config file read when --config is not given\n"
            "/run/fabricscope/gpu.sock: the socket GPU producers (the NCCL plugin, the CUPTI "
            "library) send to (--gpu-socket)",
        .see_also =
            "fabricscope-aggregator(8), fabricscope-pcap(1); the guides in "
            "/usr/share/doc/fabricscope"};
    printf("%s", fabricscope::common::RenderManPage(page).c_str());
    return 0;
  }
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  auto loaded = LoadOptions();
  if (!loaded.ok()) return Fail(std::string(loaded.status().message()));
  const bool status_line =
      loaded->status_line == "on" || (loaded->status_line == "auto" && isatty(STDERR_FILENO));
  const sigset_t signals = fabricscope::common::BlockDaemonSignals();  // before any thread

  fabricscope::common::ServiceNotifier notifier;
  auto created = fabricscope::agent::Agent::Create(*loaded);
  if (!created.ok()) return Fail(std::string(created.status().message()), 1);
  LogPorts(**created);
  DropPrivileges(*loaded);
  AgentDaemon daemon(*std::move(loaded), *std::move(created), notifier);
  if (absl::Status s = daemon.agent().Start(); !s.ok()) return Fail(std::string(s.message()), 1);
  daemon.Announce("");

  // The control loop: signals, the systemd watchdog (WATCHDOG=1 only while every sampler
  // thread ticks, so systemd restarts an agent whose sampling stalled), re-plugged devices once
  // a second, and the status line.
  fabricscope::common::DaemonHooks hooks;
  hooks.reload = [&] { return daemon.Reload(); };
  hooks.tick = [&](int64_t) {
    daemon.agent().Maintain();
    if (status_line) fprintf(stderr, "\r\033[K%s", daemon.agent().StatusLine().c_str());
  };
  hooks.stall = [&](int64_t now) { return daemon.agent().StalledSampler(now); };
  hooks.status = [&] { return daemon.agent().StatusLine(); };
  const int sig = fabricscope::common::RunDaemonLoop(signals, notifier, hooks);
  if (status_line) fprintf(stderr, "\n");
  if (sig == 0) return Fail(daemon.failure(), 1);  // a reload could not start the new agent
  LOG(INFO) << "signal " << sig << ", flushing and stopping";
  notifier.Stopping("flushing and stopping");
  daemon.agent().Stop();
  return 0;
}
