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
#include "exporters/aggregator.h"
#include "exporters/aggregator_config.h"
#include "exporters/http_server.h"
#include "exporters/service_notifier.h"
#include "glog/logging.h"

// An empty value means "not given": the config file or the default applies.
// Precedence: flag > config file > default.
ABSL_FLAG(std::string, config, "",
          "YAML config file (keys grpc_listen, http_listen, tls: {cert, key, client_ca}, auth: "
          "{token_file, node_tokens_file}, allow_insecure, web_config, and "
          "collectives: the cross-rank "
          "straggler and diagnosis rules, read at start only; deploy/config/aggregator.yaml "
          "lists them). Default /etc/fabricscope/aggregator.yaml when it exists. Re-read on "
          "SIGHUP; flags given on the command line override its values.");
ABSL_FLAG(std::string, grpc_listen, "",
          "HOST:PORT where agents connect (gRPC). Default 0.0.0.0:9471. Port 0 picks a free "
          "port, printed at start.");
ABSL_FLAG(std::string, http_listen, "",
          "HOST:PORT serving /metrics (Prometheus), /healthz and /api/microbursts. Default "
          "0.0.0.0:9470. Port 0 picks a free port, printed at start.");

ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain of the agents' gRPC port: TLS on (with --tls-key). Default: "
          "plain text. Re-read every 60 s (a renewed certificate needs no restart).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA bundle: every agent must present a certificate it signed (mTLS), and a "
          "Hello's node must be that certificate's identity (DNS SAN, else CN). Default: no "
          "client certificates asked.");

ABSL_FLAG(std::string, auth_token_file, "",
          "File whose first line is the token every agent must send (16-4096 visible ASCII "
          "characters; make one with `openssl rand -hex 32`). The agents' --auth-token-file "
          "holds the same. Re-read on SIGHUP. Default: no token asked.");
ABSL_FLAG(std::string, node_tokens_file, "",
          "YAML map `node: token`: a node named there may stream with its own token (or the "
          "--auth-token-file one), a stolen token reports as one node only. Re-read on SIGHUP.");
ABSL_FLAG(std::string, web_config, "",
          "Web configuration file in the Prometheus exporters' format (tls_server_config: "
          "cert_file, key_file, client_auth_type, client_ca_file; basic_auth_users: name: "
          "bcrypt hash): HTTPS and/or basic auth on /metrics, /api/* and /heatmap/*; /healthz "
          "stays open. Re-read on SIGHUP. Default: plain HTTP, no auth.");
ABSL_FLAG(std::string, node_expiry, "",
          "Forget a node that sent nothing for this long (its series leave /metrics; a "
          "reconnect brings it back). A duration: 10m, 1h, 0 = never. Default 10m, or "
          "node_expiry: in the config file.");
ABSL_FLAG(bool, allow_insecure, false,
          "Serve agents in plain text with no token on a non-loopback --grpc-listen. Without it "
          "such an address is refused (exit 2): give a token or TLS instead.");

namespace {

using fabricscope::exporters::AggregatorOptions;

// Config file, then flags, then the cross-field checks. Called at start and on SIGHUP.
absl::StatusOr<AggregatorOptions> LoadOptions() {
  AggregatorOptions o;
  std::string config = absl::GetFlag(FLAGS_config);
  const bool explicit_config = !config.empty();
  if (!explicit_config) config = "/etc/fabricscope/aggregator.yaml";
  if (absl::Status s = fabricscope::exporters::LoadAggregatorConfig(config, &o); !s.ok()) {
    if (explicit_config || !absl::IsNotFound(s)) return s;
  }
  if (auto v = absl::GetFlag(FLAGS_grpc_listen); !v.empty()) o.grpc_listen = v;
  if (auto v = absl::GetFlag(FLAGS_http_listen); !v.empty()) o.http_listen = v;
  if (auto v = absl::GetFlag(FLAGS_tls_cert); !v.empty()) o.tls.cert = v;
  if (auto v = absl::GetFlag(FLAGS_tls_key); !v.empty()) o.tls.key = v;
  if (auto v = absl::GetFlag(FLAGS_tls_client_ca); !v.empty()) o.tls.client_ca = v;
  if (auto v = absl::GetFlag(FLAGS_auth_token_file); !v.empty()) o.auth_token_file = v;
  if (auto v = absl::GetFlag(FLAGS_node_tokens_file); !v.empty()) o.node_tokens_file = v;
  // Can only turn it on: Abseil (20220623) does not tell a flag given as false from one not
  // given, so allow_insecure: true in the file is turned off in the file.
  if (absl::GetFlag(FLAGS_allow_insecure)) o.allow_insecure = true;
  if (auto v = absl::GetFlag(FLAGS_web_config); !v.empty()) o.web_config = v;
  if (auto v = absl::GetFlag(FLAGS_node_expiry); !v.empty()) {
    if (absl::Status s = fabricscope::exporters::ParseNodeExpiry(v, &o.node_expiry); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--", s.message()));
    }
  }
  if (absl::Status s = fabricscope::exporters::ValidateAggregatorOptions(o); !s.ok()) return s;
  if (absl::Status s = fabricscope::exporters::CheckAggregatorSecurity(o); !s.ok()) return s;
  return o;
}

std::string Listening(const fabricscope::exporters::Aggregator& a) {
  const std::string ghost = fabricscope::exporters::SplitHostPort(a.options().grpc_listen)->first;
  const std::string hhost = fabricscope::exporters::SplitHostPort(a.options().http_listen)->first;
  return absl::StrCat("listening grpc=", ghost, ":", a.grpc_port(), " http=", hhost, ":",
                      a.http_port());
}

}  // namespace

int main(int argc, char** argv) {
  fabricscope::collectors::ConfigureFlagUsage("fabricscope-aggregator 0.1.0");
  absl::SetProgramUsageMessage(
      "fabricscope aggregator: receives telemetry streams from fabricscope-agent processes over "
      "gRPC and serves the cluster's Prometheus metrics.\n\n"
      "Usage: fabricscope-aggregator [--config=FILE] [--grpc-listen=HOST:PORT] "
      "[--http-listen=HOST:PORT] [--auth-token-file=FILE | --tls-cert=PEM --tls-key=PEM]\n"
      "Agents on other hosts need a token or TLS (or --allow-insecure): a non-loopback "
      "--grpc-listen without either is refused.\n"
      "SIGHUP re-reads the config file; SIGTERM or SIGINT stops.\n"
      "Flags may be written with dashes or underscores.\n"
      "Exit status: 0 stopped by SIGTERM or SIGINT; 2 a bad flag value, a stray argument or "
      "config file; 1 an "
      "address that cannot be bound, and also --help and an unknown flag (Abseil's flag "
      "parser).");
  std::vector<std::string> storage;
  std::vector<char*> fixed = fabricscope::collectors::NormalizeFlagDashes(argc, argv, storage);
  int fixed_argc = static_cast<int>(fixed.size());
  std::vector<char*> rest = absl::ParseCommandLine(fixed_argc, fixed.data());
  if (rest.size() > 1) {
    fprintf(stderr, "fabricscope-aggregator: unexpected argument \"%s\"; see --help\n", rest[1]);
    return 2;
  }
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts

  auto options = LoadOptions();
  if (!options.ok()) {
    fprintf(stderr, "fabricscope-aggregator: %s\n",
            std::string(options.status().message()).c_str());
    return 2;
  }
  fabricscope::exporters::ServiceNotifier notifier;
  fabricscope::exporters::Aggregator aggregator(*options);
  if (absl::Status s = aggregator.Start(); !s.ok()) {
    fprintf(stderr, "fabricscope-aggregator: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  printf("fabricscope-aggregator %s\n", Listening(aggregator).c_str());
  fflush(stdout);
  LOG(INFO) << "serving /metrics on port " << aggregator.http_port();
  notifier.Ready(Listening(aggregator));

  // The main loop wakes for signals and, when systemd armed a watchdog, to ping it. The
  // aggregator's work happens on gRPC and HTTP threads; a ping says the control thread lives.
  const int64_t wd_ns = notifier.watchdog_interval_ns();
  const int64_t step_ns = wd_ns > 0 ? std::min<int64_t>(wd_ns, 1'000'000'000) : 1'000'000'000;
  const timespec step{static_cast<time_t>(step_ns / 1'000'000'000),
                      static_cast<long>(step_ns % 1'000'000'000)};
  if (wd_ns > 0) notifier.WatchdogPing();
  int sig = 0;
  bool was_stalled = false;
  while (true) {
    sig = sigtimedwait(&signals, nullptr, &step);
    if (sig == SIGINT || sig == SIGTERM) break;
    if (sig == SIGHUP) {
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
    }
    // Pings only while the state's locks change hands: a frozen ingest or render is restarted.
    const std::string stall = aggregator.StallReason();
    if (stall.empty() == was_stalled) {
      if (!stall.empty()) LOG(ERROR) << stall << "; /healthz answers 503, watchdog pings stop";
      if (stall.empty()) LOG(INFO) << "state locks move again; watchdog pings resume";
      was_stalled = !stall.empty();
    }
    if (wd_ns > 0 && stall.empty()) notifier.WatchdogPing();
    aggregator.ExpireNodes();
  }
  LOG(INFO) << "signal " << sig << ", stopping";
  notifier.Stopping("stopping");
  aggregator.Stop();
  return 0;
}
