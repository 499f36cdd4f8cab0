#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "collectors/common/web_config.h"
#include "prometheus/collectable.h"
#include "prometheus/metric_family.h"

namespace httplib {
class Server;
}

namespace fabricscope::exporters {

using common::WebConfig;

class ClusterState;
class HistoryStore;

// The families of one /metrics render: each collectable's, in order (a ClusterMetrics's checked
// against the metric catalog's label names in Debug builds, UndeclaredLabels). Also what
// remote-write sends (exporters/remote_write).
std::vector<prometheus::MetricFamily> CollectFamilies(
    const std::vector<const prometheus::Collectable*>& collectables);

// The one HTTP server of a daemon: /metrics in the Prometheus text format (0.0.4), rendered at
// scrape time from the state (ClusterMetrics) and then the collectables; /healthz; /api/*; with a
// ClusterState the heat maps and their JSON; the live page at / (page_assets.h) with /api/status
// and /api/ports. With neither collectables nor a state (the agent's
// --health-listen) it serves /healthz and a one-line index only, and 404 for the rest.
//
// Threading: Start/Stop from the control thread; requests are served on the server's own pool.
class HttpServer {
 public:
  // Connections served at once (one thread each; more wait in arrival order). httplib closes a
  // connection that sends nothing for 5 s (its read timeout) or idles 5 s between keep-alive
  // requests.
  static constexpr size_t kMaxHttpThreads = 1024;
  // On every GET /metrics: the state's families (ClusterMetrics; none without a state), then each
  // of `collectables` in order. Both must outlive the server.
  HttpServer(std::vector<const prometheus::Collectable*> collectables, const ClusterState* state);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port ("127.0.0.1:9470", "[::1]:0", ":9470" = all addresses) and starts serving.
  // Returns the bound port (useful with port 0).
  // Errors: InvalidArgument for a malformed address or a TLS certificate and key that do not
  // load, Unavailable when the bind fails.
  absl::StatusOr<int> Start(const std::string& listen);
  void Stop();
  // /healthz answers 503 with check()'s text when it is not empty, else 200 "ok". Call before
  // Start.
  void SetHealthCheck(std::function<std::string()> check) { health_check_ = std::move(check); }
  // TLS and basic auth from a web config (collectors/common/web_config.h): HTTPS instead of
  // HTTP, and a 401 with `WWW-Authenticate: Basic` for every path but /healthz without a good user
  // and password. Call before Start.
  void SetWebConfig(WebConfig config) { web_ = std::move(config); }
  // What /api/status calls this daemon ("aggregator", "agent (standalone)"). Call before Start.
  void SetRole(std::string role) { role_ = std::move(role); }
  // The event history behind /api/history (null: off, a 503 that says how to turn it on) and
  // the older part of /api/timeline. It must outlive the server. Call before Start.
  void SetHistory(const HistoryStore* history) { history_ = history; }

  // The whole /metrics body as served. Debug builds (no NDEBUG) also check the state's families
  // against the metric catalog (UndeclaredLabels) and crash on a label name it does not declare.
  std::string RenderMetrics() const;

 private:
  // /metrics, /api/*, the heat maps (with a state) and the index page.
  void RegisterDataRoutes();
  // With a state: the live page at / (exporters/exposition/page), /api/status, /api/ports.
  void RegisterPageRoutes();

  const ClusterState* state_;
  std::unique_ptr<prometheus::Collectable> state_metrics_;    // ClusterMetrics of state_, or null
  std::vector<const prometheus::Collectable*> collectables_;  // state_metrics_ first
  std::unique_ptr<httplib::Server> server_;
  std::function<std::string()> health_check_;
  WebConfig web_;
  std::string role_ = "aggregator";
  const HistoryStore* history_ = nullptr;
  std::thread thread_;
};

}  // namespace fabricscope::exporters
