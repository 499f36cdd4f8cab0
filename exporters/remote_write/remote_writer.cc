// RemoteWriter: the timer that snapshots /metrics into WriteRequests and the per-URL senders.
#include <snappy.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <iterator>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "exporters/exposition/metric_util.h"
#include "exporters/remote_write/remote_write.h"
#include "glog/logging.h"
#include "httplib.h"

namespace fabricscope::exporters {
namespace {

constexpr int64_t kMinIntervalNs = 100'000'000;
constexpr auto kFirstBackoff = std::chrono::seconds(1);  // the spec leaves the schedule to us
constexpr auto kMaxBackoff = std::chrono::seconds(30);

struct Url {
  std::string origin;  // scheme://host[:port], what httplib::Client takes
  std::string path;    // "/api/v1/write"
};

// http(s)://host[:port]/path; credentials in the URL are refused (they would end up in the
// `url` label): basic_auth and the token file carry them.
absl::StatusOr<Url> ParseUrl(const std::string& url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "http://") && !absl::ConsumePrefix(&rest, "https://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("remote_write url \"", url, "\": not http:// or https://"));
  }
  const size_t slash = rest.find('/');
  const absl::string_view authority = rest.substr(0, slash);
  if (authority.empty() || authority.find('@') != absl::string_view::npos ||
      authority.find_first_of(" \t") != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "remote_write url \"", url, "\": no host, or credentials in it (use basic_auth)"));
  }
  Url u;
  u.origin = url.substr(0, url.size() - rest.size() + authority.size());
  u.path = slash == absl::string_view::npos ? "/" : std::string(rest.substr(slash));
  return u;
}

// The first line of a secret file, surrounding whitespace removed. Errors: unreadable, empty.
absl::StatusOr<std::string> ReadSecret(const std::string& path, const char* what) {
  std::ifstream in(path);
  std::string text;
  if (!in || !std::getline(in, text)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": cannot read it"));
  }
  absl::string_view line = text;
  line = line.substr(0, line.find('\n'));
  line = absl::StripAsciiWhitespace(line);
  if (line.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " ", path, ": empty"));
  return std::string(line);
}

struct Request {
  uint64_t seq;
  // The snappy-compressed WriteRequest, shared by every URL's queue and by the sender while it
  // posts it (no copy of the body per URL or per attempt).
  std::shared_ptr<const std::string> body;
  size_t samples;
};

}  // namespace

struct RemoteWriter::Endpoint {
  std::string url;  // as given: the `url` label
  Url parsed;
  std::deque<Request> queue;
  uint64_t queue_bytes = 0;
  uint64_t sent_samples = 0, failed_requests = 0;
  std::map<std::string, uint64_t> dropped_samples;  // by reason
  double last_success_unix_seconds = 0;
};

absl::StatusOr<std::unique_ptr<RemoteWriter>> RemoteWriter::Create(RemoteWriteOptions options,
                                                                   CollectFn collect) {
  if (options.interval_ns < kMinIntervalNs) {
    return absl::InvalidArgumentError("remote_write interval below 100ms");
  }
  if (options.tls_cert.empty() != options.tls_key.empty()) {
    return absl::InvalidArgumentError("remote_write tls: cert and key go together");
  }
  std::unique_ptr<RemoteWriter> w(new RemoteWriter(std::move(options), std::move(collect)));
  for (const std::string& url : w->options_.urls) {
    absl::StatusOr<Url> u = ParseUrl(url);
    if (!u.ok()) return u.status();
    auto e = std::make_unique<Endpoint>();
    e->url = url;
    e->parsed = *std::move(u);
    w->endpoints_.push_back(std::move(e));
  }
  if (!w->options_.bearer_token_file.empty()) {
    absl::StatusOr<std::string> t =
        ReadSecret(w->options_.bearer_token_file, "remote_write bearer token file");
    if (!t.ok()) return t.status();
    w->bearer_token_ = *std::move(t);
  }
  if (!w->options_.basic_auth_password_file.empty()) {
    absl::StatusOr<std::string> p =
        ReadSecret(w->options_.basic_auth_password_file, "remote_write basic_auth password file");
    if (!p.ok()) return p.status();
    w->basic_password_ = *std::move(p);
  }
  return w;
}

RemoteWriter::RemoteWriter(RemoteWriteOptions options, CollectFn collect)
    : options_(std::move(options)), collect_(std::move(collect)) {}

RemoteWriter::~RemoteWriter() { Stop(); }

void RemoteWriter::Start() {
  if (endpoints_.empty() || !threads_.empty()) return;
  for (auto& e : endpoints_) threads_.emplace_back([this, p = e.get()] { SendLoop(p); });
  threads_.emplace_back([this] { TimerLoop(); });
}

void RemoteWriter::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& e : endpoints_) {
    for (const Request& r : e->queue) e->dropped_samples["shutdown"] += r.samples;
    e->queue.clear();
    e->queue_bytes = 0;
  }
}

void RemoteWriter::TimerLoop() {
  auto next = std::chrono::steady_clock::now();
  while (true) {
    next += std::chrono::nanoseconds(options_.interval_ns);
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_until(lock, next, [this] { return stopping_; })) return;
    }
    SnapshotNow();
  }
}

void RemoteWriter::SnapshotNow() {
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  promrw::WriteRequest req;
  const size_t samples = BuildWriteRequest(collect_(), now_ms, &req);
  const std::string raw = req.SerializeAsString();
  auto compressed = std::make_shared<std::string>();
  snappy::Compress(raw.data(), raw.size(), compressed.get());
  const std::shared_ptr<const std::string> body = std::move(compressed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t seq = ++seq_;
    for (auto& e : endpoints_) {
      e->queue.push_back(Request{seq, body, samples});
      e->queue_bytes += body->size();
      // Past the bound the oldest go (the newest snapshot is worth more), counted.
      while (e->queue_bytes > options_.queue_max_bytes && e->queue.size() > 1) {
        e->queue_bytes -= e->queue.front().body->size();
        e->dropped_samples["queue_full"] += e->queue.front().samples;
        e->queue.pop_front();
      }
    }
  }
  cv_.notify_all();
}

void RemoteWriter::SendLoop(Endpoint* e) {
  std::unique_ptr<httplib::Client> cli =
      options_.tls_cert.empty() ? std::make_unique<httplib::Client>(e->parsed.origin)
                                : std::make_unique<httplib::Client>(
                                      e->parsed.origin, options_.tls_cert, options_.tls_key);
  cli->set_connection_timeout(5);
  cli->set_read_timeout(30);
  cli->set_write_timeout(30);
  if (!options_.tls_ca.empty()) cli->set_ca_cert_path(options_.tls_ca);
  if (!bearer_token_.empty()) cli->set_bearer_token_auth(bearer_token_);
  if (!options_.basic_auth_username.empty()) {
    cli->set_basic_auth(options_.basic_auth_username, basic_password_);
  }
  const httplib::Headers headers = {{"Content-Encoding", "snappy"},
                                    {"X-Prometheus-Remote-Write-Version", "0.1.0"},
                                    {"User-Agent", "fabricscope"}};
  auto backoff = std::chrono::duration_cast<std::chrono::milliseconds>(kFirstBackoff);
  while (true) {
    Request r;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !e->queue.empty(); });
      if (stopping_) return;
      r = e->queue.front();
    }
    const httplib::Result res =
        cli->Post(e->parsed.path, headers, *r.body, "application/x-protobuf");
    const int status = res ? res->status : 0;
    const WriteOutcome outcome = ClassifyStatus(status);
    std::unique_lock<std::mutex> lock(mu_);
    const bool still_queued = !e->queue.empty() && e->queue.front().seq == r.seq;
    if (outcome == WriteOutcome::kRetry) {
      ++e->failed_requests;
      LOG_EVERY_N(WARNING, 20) << "remote_write " << e->url << ": "
                               << (res ? absl::StrCat("HTTP ", status, " ",
                                                      res->body.substr(0, 200))
                                       : httplib::to_string(res.error()))
                               << "; retrying in " << backoff.count() << " ms";
      cv_.wait_for(lock, backoff, [this] { return stopping_; });
      backoff =
          std::min(backoff * 2, std::chrono::duration_cast<std::chrono::milliseconds>(kMaxBackoff));
      continue;
    }
    backoff = std::chrono::duration_cast<std::chrono::milliseconds>(kFirstBackoff);
    if (outcome == WriteOutcome::kSent) {
      e->sent_samples += r.samples;
      e->last_success_unix_seconds =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count();
    } else {
      e->dropped_samples["rejected"] += r.samples;
      LOG(WARNING) << "remote_write " << e->url << ": HTTP " << status << " "
                   << res->body.substr(0, 200) << "; request of " << r.samples
                   << " samples dropped (a 4xx is not retried)";
    }
    if (still_queued) {
      e->queue_bytes -= e->queue.front().body->size();
      e->queue.pop_front();
    }
  }
}

std::vector<prometheus::MetricFamily> RemoteWriter::Collect() const {
  FamilySet f;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& e : endpoints_) {
    const std::vector<prometheus::ClientMetric::Label> l = {{"url", e->url}};
    AddValue(f[Metric::kRemoteWriteSentSamplesTotal], l, static_cast<double>(e->sent_samples));
    AddValue(f[Metric::kRemoteWriteFailedRequestsTotal], l,
             static_cast<double>(e->failed_requests));
    for (const char* reason : {"queue_full", "rejected", "shutdown"}) {
      auto it = e->dropped_samples.find(reason);
      AddValue(f[Metric::kRemoteWriteDroppedSamplesTotal], {{"url", e->url}, {"reason", reason}},
               it == e->dropped_samples.end() ? 0.0 : static_cast<double>(it->second));
    }
    size_t queued = 0;
    for (const Request& r : e->queue) queued += r.samples;
    AddValue(f[Metric::kRemoteWriteQueueSamples], l, static_cast<double>(queued));
    AddValue(f[Metric::kRemoteWriteQueueBytes], l, static_cast<double>(e->queue_bytes));
    AddValue(f[Metric::kRemoteWriteLastSuccessTimestampSeconds], l, e->last_success_unix_seconds);
  }
  std::vector<prometheus::MetricFamily> out;
  f.DrainInto(&out);
  return out;
}

}  // namespace fabricscope::exporters
