// fabricscope-aggregator: receives agent streams over gRPC and serves Prometheus metrics.
#include <signal.h>

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "collectors/cli.h"
#include "exporters/aggregator.h"
#include "exporters/http_server.h"
#include "glog/logging.h"

ABSL_FLAG(std::string, grpc_listen, "0.0.0.0:9471",
          "HOST:PORT where agents connect (gRPC). Port 0 picks a free port, printed at start.");
ABSL_FLAG(std::string, http_listen, "0.0.0.0:9470",
          "HOST:PORT serving /metrics (Prometheus), /healthz and /api/microbursts. Port 0 picks a "
          "free port, printed at start.");

int main(int argc, char** argv) {
  fabricscope::collectors::ConfigureFlagUsage("fabricscope-aggregator 0.1.0");
  absl::SetProgramUsageMessage(
      "fabricscope aggregator: receives telemetry streams from fabricscope-agent processes over "
      "gRPC and serves the cluster's Prometheus metrics.\n\n"
      "Usage: fabricscope-aggregator [--grpc-listen=HOST:PORT] [--http-listen=HOST:PORT]\n"
      "Flags may be written with dashes or underscores.");
  std::vector<std::string> storage;
  std::vector<char*> fixed = fabricscope::collectors::NormalizeFlagDashes(argc, argv, storage);
  int fixed_argc = static_cast<int>(fixed.size());
  absl::ParseCommandLine(fixed_argc, fixed.data());
  FLAGS_logtostderr = true;
  google::InitGoogleLogging(argv[0]);

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts

  fabricscope::exporters::AggregatorOptions options;
  options.grpc_listen = absl::GetFlag(FLAGS_grpc_listen);
  options.http_listen = absl::GetFlag(FLAGS_http_listen);
  if (options.grpc_listen.empty()) {
    fprintf(stderr, "fabricscope-aggregator: --grpc-listen must not be empty\n");
    return 2;
  }
  for (const std::string& a : {options.grpc_listen, options.http_listen}) {
    if (auto hp = fabricscope::exporters::SplitHostPort(a); !hp.ok()) {
      fprintf(stderr, "fabricscope-aggregator: %s\n", std::string(hp.status().message()).c_str());
      return 2;
    }
  }
  fabricscope::exporters::Aggregator aggregator(options);
  if (absl::Status s = aggregator.Start(); !s.ok()) {
    fprintf(stderr, "fabricscope-aggregator: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  const std::string ghost = fabricscope::exporters::SplitHostPort(options.grpc_listen)->first;
  const std::string hhost = fabricscope::exporters::SplitHostPort(options.http_listen)->first;
  printf("fabricscope-aggregator listening grpc=%s:%d http=%s:%d\n", ghost.c_str(),
         aggregator.grpc_port(), hhost.c_str(), aggregator.http_port());
  fflush(stdout);
  LOG(INFO) << "serving /metrics on http://" << hhost << ":" << aggregator.http_port()
            << "/metrics";

  int sig = 0;
  sigwait(&signals, &sig);
  LOG(INFO) << "signal " << sig << ", stopping";
  aggregator.Stop();
  return 0;
}
