#include "exporters/exposition/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "collectors/common/host_port.h"
#include "exporters/exposition/cluster_json.h"
#include "exporters/exposition/cluster_render.h"
#include "exporters/exposition/cross_rank_http.h"
#include "exporters/exposition/exposition.h"
#include "exporters/exposition/fabric_render.h"
#include "exporters/exposition/gpu_render.h"
#include "exporters/exposition/history_http.h"
#include "exporters/exposition/http_pool.h"
#include "exporters/exposition/link_http.h"
#include "exporters/exposition/metric_catalog.h"
#include "exporters/exposition/page_assets.h"
#include "exporters/heatmap/heatmap_svg.h"
#include "exporters/history/history_store.h"
#include "exporters/shard/peer_ring.h"
#include "exporters/state/cluster_state.h"
#include "glog/logging.h"

namespace fabricscope::exporters {

using common::BasicAuth;

namespace {

// /heatmap/links?job=: the job's communicators and, for each node it ran on, the transfers of
// that node's stored collective records (every communicator's, with network bytes), each with
// the RDMA ports its process had queue pairs on where the agent reported them.
bool JobTransfersOf(const ClusterState& state, const std::string& job, std::set<uint64_t>* comms,
                    std::map<std::string, NodeTransfers>* by_node) {
  for (const JobView& v : state.Jobs()) {
    if (v.job.id() != job) continue;
    comms->insert(v.comms.begin(), v.comms.end());
    for (const std::string& node : v.nodes) {
      NodeTransfers& out = (*by_node)[node];
      const std::vector<CollectiveRecord> records = state.RecentCollectives(node, 0);
      const std::map<int32_t, std::vector<std::string>> ports = state.ProcessPorts(node);
      // As many as the node keeps (GpuState::Options, the default ClusterState uses): older
      // ones were dropped.
      out.truncated = records.size() >= GpuState::Options().recent_collectives_per_node;
      for (const CollectiveRecord& r : records) {
        if (r.proxy_bytes > 0) {
          const auto p = ports.find(r.pid);
          out.transfers.push_back({r.comm_hash, r.start_unix_ns, r.end_unix_ns, r.proxy_bytes,
                                   p == ports.end() ? std::vector<std::string>{} : p->second});
        }
      }
    }
    return true;
  }
  return false;
}

// The records (oldest first per node) that `keep` accepts, at most the newest `limit` of each
// node (0 = all), in their order.
template <typename Record, typename Keep>
std::vector<Record> NewestPerNode(std::vector<Record> all, size_t limit, Keep keep) {
  std::vector<Record> mine;
  std::map<std::string, size_t> per_node;
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (!keep(*it)) continue;
    if (size_t& n = per_node[it->node]; limit == 0 || n < limit) {
      ++n;
      mine.push_back(std::move(*it));
    }
  }
  std::reverse(mine.begin(), mine.end());
  return mine;
}

// The base URL of the aggregator that owns a communicator label ("" when this one does, when
// not sharded, or for a label that is not 8 hex digits: answered here, empty).
std::string OwnerUrl(const ClusterState& state, const char* scheme, const std::string& comm) {
  const std::shared_ptr<const PeerRing> ring = state.ring();
  uint32_t label = 0;
  if (ring == nullptr || comm.size() != 8 || !absl::SimpleHexAtoi(comm, &label)) return "";
  const size_t owner = ring->OwnerOfLabel(label);
  return owner == ring->self() ? "" : scheme + ring->peers()[owner].http;
}

// Debian's cpp-httplib (0.11, built with CPPHTTPLIB_BROTLI_SUPPORT) answers a client that
// accepts "br" with brotli at the encoder's default quality, 11 (BrotliEncoderCreateInstance):
// measured here, /metrics of 1,000 nodes took 29 s with br against 0.21 s with gzip, and the
// live page's 480 KB /api/collectives/slow 1.9 s against 0.01 s. Every browser sends br. So
// "br" is taken out of Accept-Encoding before httplib picks an encoding, and such a client gets
// gzip. httplib hands its pre-routing handler a const view of the request it owns (a local in
// Server::process_request, not a const object), hence the cast.
void DropBrotli(const httplib::Request& req) {
  auto& headers = const_cast<httplib::Headers&>(req.headers);
  const auto it = headers.find("Accept-Encoding");
  if (it == headers.end() || it->second.find("br") == std::string::npos) return;
  std::vector<std::string> kept;
  for (absl::string_view e : absl::StrSplit(it->second, ',')) {
    const absl::string_view name = absl::StripAsciiWhitespace(e.substr(0, e.find(';')));
    if (name != "br") kept.emplace_back(absl::StripAsciiWhitespace(e));
  }
  it->second = absl::StrJoin(kept, ", ");
}

}  // namespace

HttpServer::HttpServer(std::vector<const prometheus::Collectable*> collectables,
                       const ClusterState* state)
    : state_(state), collectables_(std::move(collectables)) {
  if (state_ != nullptr) {
    state_metrics_ = std::make_unique<ClusterMetrics>(*state_);
    collectables_.insert(collectables_.begin(), state_metrics_.get());
  }
}

HttpServer::~HttpServer() { Stop(); }

std::vector<prometheus::MetricFamily> CollectFamilies(
    const std::vector<const prometheus::Collectable*>& collectables) {
  std::vector<prometheus::MetricFamily> families;
  for (const prometheus::Collectable* c : collectables) {
    auto f = c->Collect();
#ifndef NDEBUG
    // Every family of the cluster state comes from the metric catalog: a label name its entry
    // does not declare is a bug, fatal in Debug builds (release builds skip the check). Other
    // collectables (an embedder's prometheus::Registry) declare their own families.
    if (dynamic_cast<const ClusterMetrics*>(c) != nullptr) {
      const std::vector<std::string> undeclared = UndeclaredLabels(f);
      LOG_IF(DFATAL, !undeclared.empty())
          << "/metrics: " << absl::StrJoin(undeclared, "; ")
          << " (declare labels in exporters/exposition/metric_catalog.inc)";
    }
#endif
    families.insert(families.end(), std::make_move_iterator(f.begin()),
                    std::make_move_iterator(f.end()));
  }
  return families;
}

std::string HttpServer::RenderMetrics() const {
  return TextExposition(CollectFamilies(collectables_));
}

namespace {

// ?limit=N as a count: `fallback` when absent or empty; false (and a 400 naming the parameter)
// when it is not a decimal count, as /api/collectives/slow answers.
bool ParseLimit(const httplib::Request& req, size_t fallback, size_t* limit,
                httplib::Response& res) {
  *limit = fallback;
  if (!req.has_param("limit") || req.get_param_value("limit").empty()) return true;
  if (absl::SimpleAtoi(req.get_param_value("limit"), limit)) return true;
  res.status = 400;
  res.set_content("limit must be a count\n", "text/plain");
  return false;
}

}  // namespace

void HttpServer::RegisterDataRoutes() {
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(RenderMetrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get("/api/microbursts", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string node = req.has_param("node") ? req.get_param_value("node") : "";
    // ?limit=N: the N latest over the nodes asked for (0 or absent: all held).
    size_t limit = 0;
    if (!ParseLimit(req, 0, &limit, res)) return;
    res.set_content(state_ ? MicroburstsJson(state_->RecentMicrobursts(node, limit)) : "{}",
                    "application/json");
  });
  server_->Get("/api/jobs", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(state_ ? JobsJson(state_->Jobs()) : "{\"jobs\":[]}", "application/json");
  });
  server_->Get("/api/nodes", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(state_ ? NodesJson(*state_) : "{}", "application/json");
  });
  server_->Get("/api/loss_events", [this](const httplib::Request& req, httplib::Response& res) {
    const std::string node = req.has_param("node") ? req.get_param_value("node") : "";
    res.set_content(state_ ? LossEventsJson(state_->RecentLossEvents(node)) : "{}",
                    "application/json");
  });
  // GPU timelines: ?node=NAME filters, ?limit=N keeps the newest N per node, ?job=ID. False
  // when the request is answered already (a bad limit; no cluster state: {}).
  auto gpu_query = [this](const httplib::Request& req, std::string* node, size_t* limit,
                          std::string* job, httplib::Response& res) {
    *node = req.has_param("node") ? req.get_param_value("node") : "";
    if (!ParseLimit(req, 0, limit, res)) return false;
    if (!state_) res.set_content("{}", "application/json");
    *job = QueryParam(req, "job");
    return state_ != nullptr;
  };
  server_->Get(
      "/api/collectives", [this, gpu_query](const httplib::Request& req, httplib::Response& res) {
        std::string node, job;
        size_t limit;
        if (!gpu_query(req, &node, &limit, &job, res)) return;
        if (job.empty()) {
          return res.set_content(CollectivesJson(state_->RecentCollectives(node, limit)),
                                 "application/json");
        }
        // ?job=: that job's communicators' records, the newest `limit` of each node.
        const std::set<uint64_t> comms = state_->CommsOfJob(job);
        if (comms.empty()) return NoSuchJob(res, job);
        res.set_content(CollectivesJson(NewestPerNode(state_->RecentCollectives(node, 0), limit,
                                                      [&](const CollectiveRecord& r) {
                                                        return comms.contains(r.comm_hash);
                                                      })),
                        "application/json");
      });
  server_->Get("/api/kernels", [this, gpu_query](const httplib::Request& req,
                                                 httplib::Response& res) {
    std::string node, job;
    size_t limit;
    if (!gpu_query(req, &node, &limit, &job, res)) return;
    if (job.empty()) {
      return res.set_content(KernelsJson(state_->RecentKernels(node, limit)), "application/json");
    }
    // ?job=: the spans of the job's processes (by pid, per node).
    const std::map<std::string, std::set<int32_t>> pids = state_->PidsOfJob(job);
    if (pids.empty() && state_->CommsOfJob(job).empty()) return NoSuchJob(res, job);
    res.set_content(KernelsJson(NewestPerNode(state_->RecentKernels(node, 0), limit,
                                              [&](const KernelRecord& k) {
                                                const auto it = pids.find(k.node);
                                                return it != pids.end() &&
                                                       it->second.contains(k.pid);
                                              })),
                    "application/json");
  });
  if (state_) {
    std::vector<HeatmapPage> pages;
    RegisterLinkRoutes(*server_, state_->links(), &pages,
                       [state = state_](const std::string& job, std::set<uint64_t>* comms,
                                        std::map<std::string, NodeTransfers>* by_node) {
                         return JobTransfersOf(*state, job, comms, by_node);
                       });
    RegisterCrossRankRoutes(
        *server_, state_->cross_rank(), &pages,
        [state = state_, scheme = web_.tls() ? "https://" : "http://"](const std::string& comm) {
          return OwnerUrl(*state, scheme, comm);
        },
        JobLookup{[state = state_](uint64_t comm) { return state->JobOfComm(comm); },
                  [state = state_](const std::string& job) { return state->CommsOfJob(job); }});
    RegisterFabricRoutes(*server_, *state_, &pages);
    RegisterHeatmapIndex(*server_, std::move(pages));
    RegisterHistoryRoutes(*server_, *state_, history_);
  }
  if (state_) {
    RegisterPageRoutes();
  } else {
    server_->Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(
          "<!doctype html><title>fabricscope</title><h1>fabricscope</h1><ul>"
          "<li><a href=\"/metrics\">/metrics</a> Prometheus metrics</li>"
          "<li><a href=\"/healthz\">/healthz</a></li></ul>",
          "text/html; charset=utf-8");
    });
  }
}

void HttpServer::RegisterPageRoutes() {
  // The page and its script and style, compiled in (page_assets.h). The policy allows nothing
  // but this server: no inline script, no other origin, no framing.
  for (size_t i = 0; i < kPageAssetCount; ++i) {
    const PageAsset& a = kPageAssets[i];
    server_->Get(a.path, [&a](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                     "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(std::string(a.body), a.content_type);
    });
  }
  // ?limit=N (default 20, at most 10,000) of the JSON lists below.
  // 20 when absent; 1..10,000.
  auto limit_of = [](const httplib::Request& req, httplib::Response& res, size_t* limit) {
    if (!ParseLimit(req, 20, limit, res)) return false;
    *limit = std::min<size_t>(std::max<size_t>(*limit, 1), 10'000);
    return true;
  };
  server_->Get(
      "/api/status", [this, limit_of](const httplib::Request& req, httplib::Response& res) {
        // {"role": ..., then StatusJson's fields}.
        size_t limit = 0;
        if (!limit_of(req, res, &limit)) return;
        std::string body = "{";
        AppendJsonField(&body, "role", role_);
        // Whether /api/history answers (the live page's History section asks).
        absl::StrAppend(&body, ",\"history\":",
                        history_ != nullptr && history_->has_database() ? "true" : "false", ",");
        body += StatusJson(*state_, limit).substr(1);
        res.set_content(body, "application/json");
      });
  server_->Get("/api/ports", [this, limit_of](const httplib::Request& req, httplib::Response& res) {
    const std::string node = req.has_param("node") ? req.get_param_value("node") : "";
    size_t limit = 0;
    if (!limit_of(req, res, &limit)) return;
    res.set_content(PortsJson(*state_, node, limit), "application/json");
  });
}

absl::StatusOr<int> HttpServer::Start(const std::string& listen) {
  auto hp = common::SplitHostPort(listen);
  if (!hp.ok()) return hp.status();
  if (web_.tls()) {
    server_ = std::make_unique<httplib::SSLServer>(
        web_.cert_file.c_str(), web_.key_file.c_str(),
        web_.client_ca_file.empty() ? nullptr : web_.client_ca_file.c_str());
    if (!server_->is_valid()) {
      server_.reset();
      return absl::InvalidArgumentError(
          absl::StrCat("web config: cannot load the TLS certificate ", web_.cert_file, " and key ",
                       web_.key_file, " (or the client CA): not PEM, or not a pair"));
    }
  } else {
    server_ = std::make_unique<httplib::Server>();
  }
  std::shared_ptr<BasicAuth> auth;
  if (!web_.users.empty()) auth = std::make_shared<BasicAuth>(web_.users);
  server_->set_pre_routing_handler([auth](const httplib::Request& req, httplib::Response& res) {
    DropBrotli(req);
    if (!auth || req.path == "/healthz" || auth->Allow(req.get_header_value("Authorization"))) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.status = 401;
    res.set_header("WWW-Authenticate", "Basic realm=\"fabricscope\"");
    res.set_content("401 Unauthorized: a user and password of the web config are wanted\n",
                    "text/plain");
    return httplib::Server::HandlerResponse::Handled;
  });
  // A thread per connection while the 8 core ones are busy, up to kMaxHttpThreads
  // (exporters/exposition/http_pool.h): idle or slow clients cannot keep /metrics waiting.
  server_->new_task_queue = [] {
    return ElasticTaskQueue::NewHttplibQueue(8, kMaxHttpThreads, absl::Seconds(10));
  };
  // httplib's default adds SO_REUSEPORT, which would let a second daemon share the port
  // silently; keep only SO_REUSEADDR (quick restarts).
  auto listen_fd = std::make_shared<int>(-1);
  server_->set_socket_options([listen_fd](int sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    *listen_fd = sock;
  });
  server_->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    const std::string why = health_check_ ? health_check_() : std::string();
    if (!why.empty()) {
      res.status = 503;
      res.set_content(why + "\n", "text/plain");
      return;
    }
    res.set_content("ok\n", "text/plain");
  });
  // Nothing to serve but liveness (the agent's --health-listen): /healthz alone, everything
  // else 404, so that a scrape pointed here fails loudly instead of reading an empty page.
  if (collectables_.empty() && state_ == nullptr) {
    server_->Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(
          "<!doctype html><title>fabricscope</title><h1>fabricscope</h1>"
          "<p>Health endpoint only: <a href=\"/healthz\">/healthz</a>. Metrics and heat maps "
          "are served by the aggregator.</p>",
          "text/html");
    });
  } else {
    RegisterDataRoutes();
  }
  const auto& [host, port] = *hp;
  int bound = port;
  if (port == 0) {
    bound = server_->bind_to_any_port(host.c_str());
  } else if (!server_->bind_to_port(host.c_str(), port)) {
    bound = -1;
  }
  if (bound <= 0) {
    server_.reset();
    return absl::UnavailableError(
        absl::StrCat("cannot listen for HTTP on ", listen, " (address in use or not local?)"));
  }
  // httplib listens with a backlog of 5: a burst of connections then waits out SYN
  // retransmissions (1 s, 3 s, ...). listen(2) again on a listening socket only sets its
  // backlog (net/ipv4/af_inet.c inet_listen); the kernel caps it at net.core.somaxconn.
  if (*listen_fd >= 0) ::listen(*listen_fd, 1024);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // listen_after_bind() sets is_running() once its accept loop starts; Stop() before that would
  // be lost, so wait for it (bounded).
  for (int i = 0; i < 5000 && !server_->is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return bound;
}

void HttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
  server_.reset();
}

}  // namespace fabricscope::exporters
