#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectors/common/history_options.h"
#include "collectors/common/remote_write_options.h"
#include "exporters/exposition/cluster_render.h"
#include "exporters/exposition/history_metrics.h"
#include "exporters/exposition/http_server.h"
#include "exporters/history/history_recorder.h"
#include "exporters/history/history_store.h"
#include "exporters/ingest/telemetry_service.h"
#include "exporters/remote_write/remote_write.h"
#include "exporters/shard/forwarder.h"
#include "exporters/state/cluster_state.h"
#include "exporters/state/lock_watchdog.h"
#include "prometheus/registry.h"

namespace fabricscope::exporters {

using common::ServerTls;

struct AggregatorOptions {
  // Command line only (exporters/main.cc): the config file; "" = /etc/fabricscope/aggregator.yaml
  // when it exists.
  std::string config_file;
  // gRPC listen address for agents; empty = no gRPC server (in-process agent only).
  std::string grpc_listen = "0.0.0.0:9471";
  // HTTP listen address for /metrics, /healthz and /api/*.
  std::string http_listen = "0.0.0.0:9470";
  // The --metrics profile, "basic" or "full" (common::MetricProfile; read at start).
  std::string metrics = "basic";
  // Prometheus remote-write of /metrics (`remote_write:`, --remote-write-*; read at start).
  common::RemoteWriteOptions remote_write;
  // The event history (`history:`, --history-*; exporters/history/; read at start).
  common::HistoryOptions history;
  // The cross-rank rules: persistent-straggler test and diagnosis (`collectives:` in the
  // config; read at start, a SIGHUP does not change them since the state is kept).
  CrossRankOptions collectives;
  // TLS on the agents' gRPC port (`tls:` in the config, --tls-*): plain text when empty; with
  // a client CA, mTLS and node identity (exporters/ingest/telemetry_service.h). Re-read by gRPC
  // every kTlsRefreshSeconds; a SIGHUP with other file names restarts the gRPC server.
  ServerTls tls;
  // Shared-secret tokens of the agents (collectors/common/stream_auth.h; `auth:` in the config,
  // --auth-token-file, --node-tokens-file): one every node may use and/or one per node. Empty
  // = no token asked. Re-read on SIGHUP (Reconfigure) without dropping live streams.
  std::string auth_token_file;
  std::string node_tokens_file;
  // Serve agents in plain text without a token on a non-loopback address. Off: such a
  // grpc_listen is refused by ValidateAggregatorOptions (secure by default, issue 13 item 4).
  bool allow_insecure = false;
  // TLS and basic auth of the HTTP endpoints (collectors/common/web_config.h; --web-config,
  // `web_config:`); empty = plain HTTP, no auth. Re-read on SIGHUP (Reconfigure).
  std::string web_config;
  // The fabric topology file (exporters/analysis/fabric_topology.h; --topology-file); empty =
  // LLDP alone. `topology` is what LoadAggregatorTopology read from it (null when empty).
  std::string topology_file;
  std::string ib_fabric_file;  // ibnetdiscover output
  std::shared_ptr<const FabricTopology> topology;
  // `limits:` in the config: what one agent may make the aggregator hold (exporters/ingest/
  // admission.h AdmissionLimits; max_nodes: ClusterState::Options).
  HelloLimits hello_limits;
  BatchLimits batch_limits;
  size_t max_nodes = 16384;
  StreamRate stream_rate;  // `limits: max_batches_per_second, batch_burst`
  // A node that sends nothing for this long is forgotten (`node_expiry:`, --node-expiry;
  // ClusterState::ExpireNodes): a decommissioned or renamed node's series do not stay in
  // /metrics forever. 0 = never. Checked about once a second.
  absl::Duration node_expiry = absl::Minutes(10);
  // Sharded aggregators (issue 18; exporters/shard/): the peer list (GRPC_HOST:PORT=
  // HTTP_HOST:PORT,...; empty = not sharded) and this aggregator's gRPC address in it (empty =
  // grpc_listen). Re-read on SIGHUP (Reconfigure).
  std::string peers;
  std::string peer_self;
};

// The aggregator: cluster state, the gRPC ingest server and the HTTP server. The agent's
// standalone mode embeds one with no gRPC server. Start/Stop from the control thread.
class Aggregator {
 public:
  explicit Aggregator(AggregatorOptions options);
  ~Aggregator();

  // Errors: those of HttpServer::Start and TelemetryServer::Start, and of TokenAuth::Load and
  // LoadWebConfig.
  absl::Status Start();
  void Stop();
  // Reload: when an address differs from the running one, stops both servers and starts them
  // on the new addresses, keeping the cluster state (agents reconnect and resume). When the new
  // addresses cannot be bound, starts again on the old ones and returns the error.
  // Errors: those of Start for the new addresses.
  absl::Status Reconfigure(AggregatorOptions options);
  const AggregatorOptions& options() const { return options_; }

  ClusterState& state() { return state_; }
  // The gate of the state's Hellos and batches, with the config's limits (the in-process
  // agent's LocalSink hands its batches to it).
  Admission& admission() { return admission_; }
  // Forgets the nodes silent for options().node_expiry (ClusterState::ExpireNodes), with one
  // log line per node. Control thread. Returns how many.
  size_t ExpireNodes();
  // Extra collectables (e.g. the agent's own registry) rendered after the cluster state.
  // Call before Start(); they must outlive the aggregator.
  void AddCollectable(const prometheus::Collectable* c) { extra_.push_back(c); }
  int grpc_port() const { return grpc_port_; }
  // Empty while the state's locks change hands; else why not: "state locks held for 12 s:
  // ingest or rendering is stuck" once they have been held for more than kMaxStallSeconds
  // (LockWatchdog, probing every second; rendering /metrics for 1,000 nodes holds them for
  // ~0.9 s here). /healthz answers 503 with it, and the daemon stops its systemd watchdog pings.
  static constexpr double kMaxStallSeconds = 10;
  std::string StallReason() const;
  int http_port() const { return http_port_; }
  const HttpServer* http() const { return http_.get(); }
  // The remote-write sender; null without remote_write urls.
  RemoteWriter* remote_writer() { return remote_writer_.get(); }
  // The event history; null when off (common::HistoryDatabasePath empty and no JSON lines).
  HistoryStore* history() { return history_.get(); }

 private:
  absl::Status StartHttp();  // http_ with the web config; http_ null on error
  // Opens the event history once (the first Start; it outlives reloads) and starts feeding it.
  // Errors: those of HistoryStore::Open for a path the user gave; the systemd default that
  // cannot be used is logged and the history left off.
  absl::Status OpenHistory();
  void StopHistory();
  // Applies options_.peers: the ring handed to the state and the HTTP server, the forwarder
  // started, its streams moved to a changed list, or both dropped when the list is emptied.
  // Errors: those of MakePeerRing and of the shared token's file.
  absl::Status ApplyPeers();
  // What /metrics and remote-write render: the state (metrics_), then Extras(): the extras and
  // the remote writer's counters (HttpServer renders the state itself).
  std::vector<const prometheus::Collectable*> Collectables() const;
  std::vector<const prometheus::Collectable*> Extras() const;

  AggregatorOptions options_;
  ClusterState state_;
  ClusterMetrics metrics_{state_};  // /metrics and remote-write of state_
  Admission admission_{state_, {options_.hello_limits, options_.batch_limits}};
  std::vector<const prometheus::Collectable*> extra_;
  std::unique_ptr<TelemetryServer> grpc_;
  std::unique_ptr<HttpServer> http_;
  std::unique_ptr<RemoteWriter> remote_writer_;
  std::shared_ptr<Forwarder> forwarder_;  // with --peers (shared with the state)
  std::string forwarder_key_;             // what forwarder_ was built with (ApplyPeers)
  LockWatchdog watchdog_;
  bool history_opened_ = false;  // OpenHistory ran (the first Start)
  std::unique_ptr<HistoryStore> history_;
  std::shared_ptr<HistoryRecorder> recorder_;
  std::unique_ptr<HistoryMetrics> history_metrics_;  // in Extras() while the history is on
  std::thread history_ticker_;                       // HistoryRecorder::Tick every second
  std::mutex ticker_mu_;
  std::condition_variable ticker_cv_;
  bool ticker_stop_ = false;
  int grpc_port_ = 0;
  int http_port_ = 0;
};

}  // namespace fabricscope::exporters
