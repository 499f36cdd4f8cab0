#include "exporters/aggregator.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectors/common/stream_auth.h"
#include "exporters/shard/peer_ring.h"
#include "glog/logging.h"

namespace fabricscope::exporters {

using common::LoadWebConfig;
using common::TokenAuth;
using common::WebConfig;

namespace {

ClusterState::Options StateOptions(const AggregatorOptions& a) {
  ClusterState::Options o;
  o.cross_rank = a.collectives;
  o.cross_rank.max_rank_pairs_per_node = a.batch_limits.max_rank_pairs;
  o.max_nodes = a.max_nodes;
  o.topology = a.topology;
  o.metrics = a.metrics == "full" ? common::MetricProfile::kFull : common::MetricProfile::kBasic;
  return o;
}

}  // namespace

Aggregator::Aggregator(AggregatorOptions options)
    : options_(std::move(options)),
      state_(StateOptions(options_)),
      watchdog_([this] { state_.ProbeLocks(); }, 1'000'000'000) {}

Aggregator::~Aggregator() {
  Stop();
  StopHistory();
  state_.SetSharding(nullptr, nullptr);
  if (forwarder_) forwarder_->Stop(1000);
  watchdog_.Stop();
}

size_t Aggregator::ExpireNodes() {
  const std::vector<std::string> gone = state_.ExpireNodes(absl::Now(), options_.node_expiry);
  for (const std::string& node : gone) {
    LOG(INFO) << "node " << node << " sent nothing for "
              << absl::FormatDuration(options_.node_expiry)
              << "; forgotten (fabricscope_aggregator_expired_nodes_total)";
  }
  return gone.size();
}

std::string Aggregator::StallReason() const {
  const double stalled = watchdog_.StalledSeconds();
  if (stalled <= kMaxStallSeconds) return "";
  return absl::StrFormat("state locks held for %.0f s: ingest or rendering is stuck", stalled);
}

absl::Status Aggregator::OpenHistory() {
  // Read at the first start only: the recorder must be in place before the first batch.
  if (history_opened_) return absl::OkStatus();
  history_opened_ = true;
  const common::HistoryOptions& h = options_.history;
  const std::string path = common::HistoryDatabasePath(h);
  if (path.empty() && h.jsonl.empty()) {
    LOG(INFO) << "history: off (no --history-path, and no systemd state directory)";
    return absl::OkStatus();
  }
  HistoryStore::Options o;
  o.path = path;
  o.retention_ns = h.retention_ns;
  o.max_bytes = static_cast<int64_t>(h.max_bytes);
  o.jsonl_path = h.jsonl;
  o.jsonl_max_bytes = static_cast<int64_t>(h.jsonl_max_bytes);
  auto store = HistoryStore::Open(o);
  if (!store.ok()) {
    const bool given = !h.path.empty() || !h.jsonl.empty();
    if (given) {
      return absl::Status(
          store.status().code(),
          absl::StrCat(store.status().message(), " (--history-path=off runs without a history)"));
    }
    LOG(ERROR) << store.status().message() << "; running without a history";
    return absl::OkStatus();
  }
  history_ = *std::move(store);
  history_metrics_ = std::make_unique<HistoryMetrics>(*history_);
  recorder_ = std::make_shared<HistoryRecorder>(state_, *history_);
  state_.SetObserver(recorder_);
  ticker_stop_ = false;
  history_ticker_ = std::thread([this] {
    std::unique_lock<std::mutex> l(ticker_mu_);
    while (!ticker_cv_.wait_for(l, std::chrono::seconds(1), [this] { return ticker_stop_; })) {
      l.unlock();
      recorder_->Tick(absl::ToUnixNanos(absl::Now()));
      l.lock();
    }
  });
  LOG(INFO) << "history: " << (path.empty() ? "no database" : path)
            << (h.jsonl.empty() ? "" : absl::StrCat(", JSON lines to ", h.jsonl)) << "; kept "
            << absl::FormatDuration(absl::Nanoseconds(h.retention_ns)) << ", at most "
            << h.max_bytes << " bytes";
  return absl::OkStatus();
}

void Aggregator::StopHistory() {
  if (!history_) return;
  {
    std::lock_guard<std::mutex> l(ticker_mu_);
    ticker_stop_ = true;
  }
  ticker_cv_.notify_all();
  if (history_ticker_.joinable()) history_ticker_.join();
  state_.SetObserver(nullptr);
  recorder_->Drain();
  recorder_.reset();
  history_metrics_.reset();
  history_.reset();  // writes what is queued
}

absl::Status Aggregator::StartHttp() {
  WebConfig web;
  if (!options_.web_config.empty()) {
    auto w = LoadWebConfig(options_.web_config);
    if (!w.ok()) return w.status();
    web = *std::move(w);
  }
  http_ = std::make_unique<HttpServer>(Extras(), &state_);
  http_->SetHealthCheck([this] { return StallReason(); });
  http_->SetWebConfig(std::move(web));
  http_->SetRole(options_.grpc_listen.empty() ? "agent (standalone)" : "aggregator");
  http_->SetHistory(history_.get());
  auto http_port = http_->Start(options_.http_listen);
  if (!http_port.ok()) {
    http_.reset();
    return http_port.status();
  }
  http_port_ = *http_port;
  return absl::OkStatus();
}

absl::Status Aggregator::ApplyPeers() {
  if (options_.peers.empty()) {
    state_.SetSharding(nullptr, nullptr);
    if (forwarder_) forwarder_->Stop(1000);
    forwarder_.reset();
    forwarder_key_.clear();
    return absl::OkStatus();
  }
  const std::string self = options_.peer_self.empty() ? options_.grpc_listen : options_.peer_self;
  auto ring = MakePeerRing(options_.peers, self);
  if (!ring.ok()) return ring.status();
  ForwarderOptions fo;
  fo.self = self;
  if (!options_.auth_token_file.empty()) {
    auto token = common::ReadTokenFile(options_.auth_token_file, "--auth-token-file");
    if (!token.ok()) return token.status();
    fo.auth_token = *std::move(token);
  }
  if (options_.tls.enabled()) {
    // The peers' certificates are checked with the CA that signs the agents' (one cluster CA),
    // and this aggregator presents its own: mTLS between peers.
    if (options_.tls.client_ca.empty()) {
      return absl::InvalidArgumentError(
          "peers: with TLS on the gRPC port, tls.client_ca must name the CA that signed the "
          "peers' certificates (the forwarder checks the owner's with it)");
    }
    fo.tls = {.ca = options_.tls.client_ca, .cert = options_.tls.cert, .key = options_.tls.key};
  }
  fo.match_here = [this](std::vector<v1::ForwardedAnalysis>&& records) {
    state_.MatchForwarded(std::move(records));
  };
  // A new forwarder only when what its streams present changed; a new list moves the streams.
  const std::string key = absl::StrCat(self, "|", fo.auth_token, "|", fo.tls.ca, "|", fo.tls.cert);
  if (key != forwarder_key_) {
    state_.SetSharding(nullptr, nullptr);
    if (forwarder_) forwarder_->Stop(1000);
    forwarder_ = std::make_shared<Forwarder>(std::move(fo));
    forwarder_key_ = key;
  }
  forwarder_->SetRing(*ring);
  state_.SetSharding(*ring, forwarder_);
  LOG(INFO) << "sharded: " << (*ring)->peers().size() << " aggregators in the peer list, this one "
            << self;
  return absl::OkStatus();
}

std::vector<const prometheus::Collectable*> Aggregator::Extras() const {
  std::vector<const prometheus::Collectable*> out = extra_;
  if (remote_writer_) out.push_back(remote_writer_.get());
  if (history_metrics_) out.push_back(history_metrics_.get());
  return out;
}

std::vector<const prometheus::Collectable*> Aggregator::Collectables() const {
  std::vector<const prometheus::Collectable*> out = {&metrics_};
  const std::vector<const prometheus::Collectable*> extras = Extras();
  out.insert(out.end(), extras.begin(), extras.end());
  return out;
}

absl::Status Aggregator::Start() {
  if (!options_.remote_write.urls.empty() && !remote_writer_) {
    auto w = RemoteWriter::Create(options_.remote_write,
                                  [this] { return CollectFamilies(Collectables()); });
    if (!w.ok()) return w.status();
    remote_writer_ = *std::move(w);
  }
  watchdog_.Start();
  if (absl::Status s = OpenHistory(); !s.ok()) return s;
  if (absl::Status s = ApplyPeers(); !s.ok()) return s;
  if (absl::Status s = StartHttp(); !s.ok()) return s;
  if (!options_.grpc_listen.empty()) {
    auto tokens = TokenAuth::Load(options_.auth_token_file, options_.node_tokens_file);
    if (!tokens.ok()) {
      http_->Stop();
      return tokens.status();
    }
    grpc_ = std::make_unique<TelemetryServer>(state_, TelemetryServer::kDefaultMaxMessageBytes,
                                              options_.tls, *std::move(tokens),
                                              options_.stream_rate, admission_.limits());
    auto grpc_port = grpc_->Start(options_.grpc_listen);
    if (!grpc_port.ok()) {
      http_->Stop();
      return grpc_port.status();
    }
    grpc_port_ = *grpc_port;
    // The timeline's on-demand fetch of flight-recorder samples goes over the agents' streams.
    TelemetryService* service = &grpc_->service();
    state_.recording_fetch().SetSender(
        [service](const std::string& node, const v1::RecordingRequest& r) {
          switch (service->RequestRecording(node, r)) {
            case TelemetryService::RequestOutcome::kQueued:
              return RecordingFetch::Sent::kSent;
            case TelemetryService::RequestOutcome::kQueueFull:
              return RecordingFetch::Sent::kBusy;
            case TelemetryService::RequestOutcome::kNoStream:
              break;
          }
          return RecordingFetch::Sent::kNotConnected;
        });
  }
  if (remote_writer_) remote_writer_->Start();
  return absl::OkStatus();
}

absl::Status Aggregator::Reconfigure(AggregatorOptions options) {
  if (options.grpc_listen == options_.grpc_listen && options.http_listen == options_.http_listen &&
      options.tls.cert == options_.tls.cert && options.tls.key == options_.tls.key &&
      options.tls.client_ca == options_.tls.client_ca) {
    // Same listeners: the token files are read again (a rotated token) and swapped in; live
    // streams go on.
    auto tokens = TokenAuth::Load(options.auth_token_file, options.node_tokens_file);
    if (!tokens.ok()) return tokens.status();
    // A web config is read again too (renewed certificate, changed users): the HTTP server
    // alone restarts; the agents' streams are untouched.
    if (!options.web_config.empty() || !options_.web_config.empty()) {
      const std::string old_web = options_.web_config;
      if (http_) http_->Stop();
      options_.web_config = options.web_config;
      if (absl::Status s = StartHttp(); !s.ok()) {
        options_.web_config = old_web;
        if (absl::Status back = StartHttp(); !back.ok()) return back;
        return s;
      }
    }
    // A changed peer list moves the forwarder's streams; a bad one changes nothing.
    if (options.peers != options_.peers || options.peer_self != options_.peer_self ||
        options.auth_token_file != options_.auth_token_file) {
      AggregatorOptions old = options_;
      options_.peers = options.peers;
      options_.peer_self = options.peer_self;
      options_.auth_token_file = options.auth_token_file;
      if (absl::Status s = ApplyPeers(); !s.ok()) {
        options_ = std::move(old);
        return s;
      }
    }
    // Only once nothing can fail any more: a failed reload changes nothing. The topology file
    // was read again by LoadOptions.
    if (grpc_) grpc_->SetTokens(*std::move(tokens));
    state_.SetTopology(options.topology);
    options_ = std::move(options);
    return absl::OkStatus();
  }
  AggregatorOptions old = options_;
  Stop();
  options_ = std::move(options);
  absl::Status s = Start();
  if (s.ok()) {
    state_.SetTopology(options_.topology);
    return s;
  }
  Stop();
  options_ = std::move(old);
  if (absl::Status back = Start(); !back.ok()) return back;
  return s;
}

void Aggregator::Stop() {
  if (remote_writer_) remote_writer_->Stop();
  state_.recording_fetch().SetSender(nullptr);  // before the streams (or the agent) go
  if (grpc_) grpc_->Stop();
  if (http_) http_->Stop();
  grpc_.reset();
  http_.reset();
}

}  // namespace fabricscope::exporters
