// fabricscope-aggregator: receives agent streams over gRPC and serves Prometheus metrics.
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "collectors/cli.h"
#include "collectors/common/daemon_loop.h"
#include "collectors/common/host_port.h"
#include "exporters/aggregator.h"
#include "exporters/aggregator_config.h"
#include "glog/logging.h"

// An empty value means "not given": the config file or the default applies.
// Precedence: flag > config file > default.
// One Abseil flag per option of exporters/aggregator_options.inc: strings, where an empty value
// means "not given" (flag > config file > default), and bools for switches, which can only turn
// an option on (Abseil 20220623 does not tell a flag given as false from one not given). Their
// help is the table's, printed by --help.
#define FABRICSCOPE_OPTION(id, ...) ABSL_FLAG(std::string, id, "", "See --help.");
#define FABRICSCOPE_SWITCH(id, ...) ABSL_FLAG(bool, id, false, "See --help.");
#define FABRICSCOPE_CONFIG_OPTION(...)
#include "exporters/aggregator_options.inc"
#undef FABRICSCOPE_OPTION
#undef FABRICSCOPE_SWITCH
#undef FABRICSCOPE_CONFIG_OPTION
ABSL_FLAG(bool, help_markdown, false, "Print the option table in Markdown (README's) and exit.");
ABSL_FLAG(bool, help_man, false,
          "Print the manual page fabricscope-aggregator(8) in roff and exit.");

namespace {

using fabricscope::exporters::AggregatorOptions;

using fabricscope::exporters::AggregatorOptionTable;

// The flags given, as (name with dashes, text); a switch given is "on".
std::vector<std::pair<std::string, std::string>> GivenFlags() {
  std::vector<std::pair<std::string, std::string>> out;
  auto add = [&](const char* id, std::string v) {
    std::string name = id;
    std::replace(name.begin(), name.end(), '_', '-');
    if (!v.empty()) out.emplace_back(name, std::move(v));
  };
#define FABRICSCOPE_OPTION(id, ...) add(#id, absl::GetFlag(FLAGS_##id));
#define FABRICSCOPE_SWITCH(id, ...) add(#id, absl::GetFlag(FLAGS_##id) ? "on" : "");
#define FABRICSCOPE_CONFIG_OPTION(...)
#include "exporters/aggregator_options.inc"
#undef FABRICSCOPE_OPTION
#undef FABRICSCOPE_SWITCH
#undef FABRICSCOPE_CONFIG_OPTION
  return out;
}

// Config file, then flags, then the cross-field checks. Called at start and on SIGHUP.
absl::StatusOr<AggregatorOptions> LoadOptions() {
  AggregatorOptions o;
  std::string config = absl::GetFlag(FLAGS_config);
  const bool explicit_config = !config.empty();
  if (!explicit_config) config = "/etc/fabricscope/aggregator.yaml";
  if (absl::Status s = fabricscope::exporters::LoadAggregatorConfig(config, &o); !s.ok()) {
    if (explicit_config || !absl::IsNotFound(s)) return s;
  }
  for (const auto& [name, text] : GivenFlags()) {
    if (auto s = fabricscope::common::SetFromFlag(AggregatorOptionTable(), name, text, &o);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = fabricscope::exporters::ValidateAggregatorOptions(o); !s.ok()) return s;
  if (absl::Status s = fabricscope::exporters::CheckAggregatorPeers(o); !s.ok()) return s;
  if (absl::Status s = fabricscope::exporters::CheckAggregatorSecurity(o); !s.ok()) return s;
  if (absl::Status s = fabricscope::exporters::LoadAggregatorTopology(&o); !s.ok()) return s;
  return o;
}

std::string Listening(const fabricscope::exporters::Aggregator& a) {
  const std::string ghost = fabricscope::common::SplitHostPort(a.options().grpc_listen)->first;
  const std::string hhost = fabricscope::common::SplitHostPort(a.options().http_listen)->first;
  return absl::StrCat("listening grpc=", ghost, ":", a.grpc_port(), " http=", hhost, ":",
                      a.http_port());
}

// How agents are admitted on the gRPC port, said once at start: "TLS" (server certificate
// only) or "mTLS" (client certificates checked), else "plain text"; then tokens, if any.
std::string StreamSecurity(const fabricscope::exporters::AggregatorOptions& o) {
  std::string s = o.tls.enabled() ? (o.tls.client_ca.empty() ? "TLS" : "mTLS (client certificates)")
                                  : "plain text";
  if (!o.auth_token_file.empty() || !o.node_tokens_file.empty()) {
    absl::StrAppend(&s, ", tokens required (", o.auth_token_file.empty() ? "" : "shared token",
                    !o.auth_token_file.empty() && !o.node_tokens_file.empty() ? " and " : "",
                    o.node_tokens_file.empty() ? "" : "per-node tokens", ")");
  } else {
    s += ", no token";
  }
  if (o.allow_insecure) s += " (--allow-insecure)";
  return absl::StrCat(s, "; HTTP ", o.web_config.empty() ? "plain, no auth" : "per --web-config");
}

constexpr char kUsage[] =
    "fabricscope aggregator: receives telemetry streams from fabricscope-agent processes over "
    "gRPC and serves the cluster's Prometheus metrics.\n\n"
    "Usage: fabricscope-aggregator [--config=FILE] [--grpc-listen=HOST:PORT] "
    "[--http-listen=HOST:PORT] [--auth-token-file=FILE | --tls-cert=PEM --tls-key=PEM]\n"
    "Agents on other hosts need a token or TLS (or --allow-insecure): a non-loopback "
    "--grpc-listen without either is refused.\n"
    "SIGHUP re-reads the config file; SIGTERM or SIGINT stops.\n"
    "Flags may be written with dashes or underscores. A list (form \"...,...\") may also be "
    "given as the flag repeated: --remote-write-url=A --remote-write-url=B.\n"
    "Exit status: 0 stopped by SIGTERM or SIGINT, or --help; 2 a bad flag value, a stray "
    "argument or config file; 1 an address that cannot be bound, and also an unknown flag "
    "(Abseil's flag parser).\n";

// --help (and -h) from the option table, before Abseil's parser sees it.
bool PrintHelpIfAsked(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h" || a == "-help") {
      printf("%s\nOptions:\n%s", kUsage,
             fabricscope::common::OptionHelp(AggregatorOptionTable(), AggregatorOptions{}).c_str());
      return true;
    }
  }
  return false;
}

// SIGHUP: the config file and flags again; the aggregator keeps its state.
bool Reload(fabricscope::exporters::Aggregator& aggregator,
            fabricscope::common::ServiceNotifier& notifier) {
  notifier.Reloading("re-reading the config file");
  LOG(INFO) << "SIGHUP: re-reading the config file";
  auto next = LoadOptions();
  absl::Status s = next.ok() ? aggregator.Reconfigure(*next) : next.status();
  if (!s.ok()) {
    LOG(ERROR) << "reload failed, still serving the previous config: " << s.message();
    notifier.Ready(absl::StrCat("reload failed (", s.message(), "); ", Listening(aggregator)));
  } else {
    LOG(INFO) << "reloaded; " << Listening(aggregator);
    printf("fabricscope-aggregator reloaded, %s\n", Listening(aggregator).c_str());
    fflush(stdout);
    notifier.Ready(Listening(aggregator));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (PrintHelpIfAsked(argc, argv)) return 0;
  fabricscope::collectors::ConfigureFlagUsage("fabricscope-aggregator 0.1.0");
  absl::SetProgramUsageMessage(kUsage);
  std::vector<std::string> storage;
  std::vector<char*> fixed = fabricscope::collectors::NormalizeFlagDashes(
      argc, argv, storage, fabricscope::common::RepeatableFlags(AggregatorOptionTable()));
  int fixed_argc = static_cast<int>(fixed.size());
  std::vector<char*> rest = absl::ParseCommandLine(fixed_argc, fixed.data());
  if (rest.size() > 1) {
    fprintf(stderr, "fabricscope-aggregator: unexpected argument \"%s\"; see --help\n", rest[1]);
    return 2;
  }
  if (absl::GetFlag(FLAGS_help_markdown)) {
    printf(
        "%s",
        fabricscope::common::OptionMarkdown(AggregatorOptionTable(), AggregatorOptions{}).c_str());
    return 0;
  }
  if (absl::GetFlag(FLAGS_help_man)) {
    fabricscope::common::ManPage page{
        .name = "fabricscope-aggregator",
        .section = "8",
        .version = "fabricscope 0.1.0",
        .summary = "cluster aggregator of fabricscope agents: diagnosis, metrics, heat maps",
        .synopsis = "[OPTION]...",
        .description = kUsage,
        .options =
            fabricscope::common::OptionManEntries(AggregatorOptionTable(), AggregatorOptions{}),
        .files =
            "/etc/fabricscope/aggregator.yaml: the config file read when --config is not "
            "given\n"
            "/etc/fabricscope/token: the shared token, by convention (--auth-token-file)",
        .see_also =
            "fabricscope-agent(8), fabricscope-pcap(1); the guides in "
            "/usr/share/doc/fabricscope"};
    printf("%s", fabricscope::common::RenderManPage(page).c_str());
    return 0;
  }
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);
  const sigset_t signals = fabricscope::common::BlockDaemonSignals();  // before any thread

  auto options = LoadOptions();
  if (!options.ok()) {
    fprintf(stderr, "fabricscope-aggregator: %s\n",
            std::string(options.status().message()).c_str());
    return 2;
  }
  fabricscope::common::ServiceNotifier notifier;
  fabricscope::exporters::Aggregator aggregator(*options);
  if (absl::Status s = aggregator.Start(); !s.ok()) {
    fprintf(stderr, "fabricscope-aggregator: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  printf("fabricscope-aggregator %s\n", Listening(aggregator).c_str());
  fflush(stdout);
  LOG(INFO) << "serving /metrics on port " << aggregator.http_port();
  LOG(INFO) << "agent streams: " << StreamSecurity(aggregator.options());
  notifier.Ready(Listening(aggregator));

  // The aggregator's work happens on gRPC and HTTP threads; the watchdog pings only while the
  // state's locks change hands, so a frozen ingest or render is restarted (and /healthz
  // answers 503 meanwhile).
  fabricscope::common::DaemonHooks hooks;
  hooks.reload = [&] { return Reload(aggregator, notifier); };
  hooks.tick = [&](int64_t) { aggregator.ExpireNodes(); };
  hooks.stall = [&](int64_t) { return aggregator.StallReason(); };
  const int sig = fabricscope::common::RunDaemonLoop(signals, notifier, hooks);
  LOG(INFO) << "signal " << sig << ", stopping";
  notifier.Stopping("stopping");
  aggregator.Stop();
  return 0;
}
