// Remote-write: the WriteRequest of a snapshot (remote-write 1.0 spec: labels sorted, __name__,
// histograms as _bucket/_sum/_count), the meaning of each HTTP status, and the sender's queue
// against a loopback receiver that answers as the spec lets a receiver answer (2xx accepted,
// 5xx/429 retry, other 4xx drop). Real receivers (Prometheus, VictoriaMetrics) are in
// tests/e2e/remote_write_test.py.
#include "exporters/remote_write/remote_write.h"

#include <gtest/gtest.h>
#include <snappy.h>

#include <deque>
#include <limits>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "httplib.h"
#include "tests/common/wait.h"

namespace fabricscope::exporters {
namespace {

using fabricscope::testing::WaitFor;
using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

std::vector<MetricFamily> Families(double counter) {
  MetricFamily c;
  c.name = "fabricscope_port_transmit_bytes_total";
  c.type = MetricType::Counter;
  ClientMetric m;
  m.label = {{"node", "n1"}, {"device", "mlx5_0"}, {"port", "1"}};
  m.counter.value = counter;
  c.metric.push_back(m);
  MetricFamily h;
  h.name = "fabricscope_node_microburst_duration_seconds";
  h.type = MetricType::Histogram;
  ClientMetric hm;
  hm.label = {{"node", "n1"}};
  hm.histogram.bucket = {{2, 0.0005}, {5, std::numeric_limits<double>::infinity()}};
  hm.histogram.sample_count = 5;
  hm.histogram.sample_sum = 0.25;
  h.metric.push_back(hm);
  return {c, h};
}

std::string Labels(const promrw::TimeSeries& ts) {
  std::string out;
  for (const promrw::Label& l : ts.labels()) out += l.name() + "=" + l.value() + ",";
  return out;
}

TEST(RemoteWrite, ASnapshotIsOneSortedSeriesPerSampleAndHistogramsAreExpanded) {
  promrw::WriteRequest req;
  EXPECT_EQ(BuildWriteRequest(Families(42), 1'700'000'000'123, &req), 5u);
  ASSERT_EQ(req.timeseries_size(), 5);
  EXPECT_EQ(Labels(req.timeseries(0)),
            "__name__=fabricscope_port_transmit_bytes_total,device=mlx5_0,node=n1,port=1,");
  EXPECT_EQ(req.timeseries(0).samples(0).value(), 42);
  EXPECT_EQ(req.timeseries(0).samples(0).timestamp(), 1'700'000'000'123);
  EXPECT_EQ(Labels(req.timeseries(1)),
            "__name__=fabricscope_node_microburst_duration_seconds_bucket,le=0.0005,node=n1,");
  EXPECT_EQ(req.timeseries(1).samples(0).value(), 2);
  EXPECT_EQ(Labels(req.timeseries(2)),
            "__name__=fabricscope_node_microburst_duration_seconds_bucket,le=+Inf,node=n1,");
  EXPECT_EQ(req.timeseries(2).samples(0).value(), 5);
  EXPECT_EQ(Labels(req.timeseries(3)),
            "__name__=fabricscope_node_microburst_duration_seconds_sum,node=n1,");
  EXPECT_EQ(req.timeseries(3).samples(0).value(), 0.25);
  EXPECT_EQ(Labels(req.timeseries(4)),
            "__name__=fabricscope_node_microburst_duration_seconds_count,node=n1,");
}

TEST(RemoteWrite, StatusCodesFollowTheSpec) {
  for (int s : {200, 204}) EXPECT_EQ(ClassifyStatus(s), WriteOutcome::kSent) << s;
  for (int s : {0, 429, 500, 502, 503}) EXPECT_EQ(ClassifyStatus(s), WriteOutcome::kRetry) << s;
  for (int s : {400, 401, 404, 413}) EXPECT_EQ(ClassifyStatus(s), WriteOutcome::kDrop) << s;
}

TEST(RemoteWrite, BadOptionsAreRefused) {
  auto collect = [] { return std::vector<MetricFamily>{}; };
  RemoteWriteOptions o;
  o.urls = {"ftp://127.0.0.1/x"};
  EXPECT_FALSE(RemoteWriter::Create(o, collect).ok());
  o.urls = {"http://user:secret@127.0.0.1:9090/api/v1/write"};
  EXPECT_FALSE(RemoteWriter::Create(o, collect).ok());
  o.urls = {"http://127.0.0.1:9090/api/v1/write"};
  o.bearer_token_file = "/nonexistent/token";
  EXPECT_FALSE(RemoteWriter::Create(o, collect).ok());
  o.bearer_token_file.clear();
  o.tls_cert = "/some/cert.pem";  // without its key
  EXPECT_FALSE(RemoteWriter::Create(o, collect).ok());
}

// A receiver on loopback that answers each request with the next scripted status (then 204),
// and keeps what it accepted, decoded. `port` 0: any free port.
class Receiver {
 public:
  explicit Receiver(std::deque<int> script, int port = 0) : script_(std::move(script)) {
    server_.Post("/api/v1/write", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      ++requests_;
      headers_ok_ = headers_ok_ && req.get_header_value("Content-Encoding") == "snappy" &&
                    req.get_header_value("Content-Type") == "application/x-protobuf" &&
                    req.get_header_value("X-Prometheus-Remote-Write-Version") == "0.1.0";
      int status = 204;
      if (!script_.empty()) {
        status = script_.front();
        script_.pop_front();
      }
      res.status = status;
      if (status / 100 != 2) return;
      std::string raw;
      promrw::WriteRequest w;
      if (snappy::Uncompress(req.body.data(), req.body.size(), &raw) && w.ParseFromString(raw)) {
        accepted_.push_back(w.timeseries(0).samples(0).value());
      }
    });
    port_ = port == 0 ? server_.bind_to_any_port("127.0.0.1")
                      : (server_.bind_to_port("127.0.0.1", port) ? port : -1);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() before listen_after_bind runs would not stop it: wait until it listens.
    WaitFor([this] { return server_.is_running(); });
  }
  ~Receiver() {
    server_.stop();
    thread_.join();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_) + "/api/v1/write"; }
  int port() const { return port_; }
  std::vector<double> accepted() {
    std::lock_guard<std::mutex> lock(mu_);
    return accepted_;
  }
  int requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  bool headers_ok() {
    std::lock_guard<std::mutex> lock(mu_);
    return headers_ok_;
  }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::deque<int> script_;
  std::vector<double> accepted_;
  int requests_ = 0;
  bool headers_ok_ = true;
};

double Value(const std::vector<MetricFamily>& fams, const std::string& name,
             const std::string& reason = "") {
  for (const MetricFamily& f : fams) {
    if (f.name != name) continue;
    for (const ClientMetric& m : f.metric) {
      bool match = reason.empty();
      for (const auto& l : m.label) match = match || (l.name == "reason" && l.value == reason);
      if (match) return f.type == MetricType::Counter ? m.counter.value : m.gauge.value;
    }
  }
  return -1;
}

// 503 and 429 are retried (the request stays first, so order is kept); a 400 drops that one
// request and counts it; everything else arrives once, in order.
TEST(RemoteWrite, RetriesKeepOrderAndAClientErrorDropsOneRequest) {
  Receiver rx({503, 429, 204, 400, 204});
  double value = 0;
  RemoteWriteOptions o;
  o.urls = {rx.url()};
  o.interval_ns = 3'600'000'000'000;  // no timer snapshot: the test takes them
  auto w = RemoteWriter::Create(o, [&] { return Families(value); });
  ASSERT_TRUE(w.ok()) << w.status();
  (*w)->Start();
  for (double v : {1, 2, 3}) {
    value = v;
    (*w)->SnapshotNow();
  }
  // Requests: 1 (503), 1 (429), 1 (204), 2 (400: dropped), 3 (204).
  ASSERT_TRUE(WaitFor([&] { return rx.requests() >= 5; }, std::chrono::seconds(20)));
  ASSERT_TRUE(WaitFor(
      [&] { return Value((*w)->Collect(), "fabricscope_remote_write_queue_samples") == 0; }));
  EXPECT_EQ(rx.accepted(), (std::vector<double>{1, 3}));
  EXPECT_TRUE(rx.headers_ok());
  const auto fams = (*w)->Collect();
  EXPECT_EQ(Value(fams, "fabricscope_remote_write_failed_requests_total"), 2);
  EXPECT_EQ(Value(fams, "fabricscope_remote_write_sent_samples_total"), 10);  // 2 x 5 samples
  EXPECT_EQ(Value(fams, "fabricscope_remote_write_dropped_samples_total", "rejected"), 5);
  EXPECT_GT(Value(fams, "fabricscope_remote_write_last_success_timestamp_seconds"), 1.7e9);
  (*w)->Stop();
}

// A receiver that is down: requests queue up to the bound, the oldest go first (counted), and
// what is still queued at Stop is counted as dropped (shutdown).
TEST(RemoteWrite, AQueueBoundDropsTheOldestAndStopCountsWhatIsLeft) {
  std::unique_ptr<Receiver> rx = std::make_unique<Receiver>(std::deque<int>{});
  const std::string url = rx->url();
  rx.reset();  // nothing listens there now
  double value = 0;
  RemoteWriteOptions o;
  o.urls = {url};
  o.interval_ns = 3'600'000'000'000;
  o.queue_max_bytes = 1;  // one request at a time: every older one is dropped
  auto w = RemoteWriter::Create(o, [&] { return Families(value); });
  ASSERT_TRUE(w.ok());
  for (double v : {1, 2, 3}) {
    value = v;
    (*w)->SnapshotNow();
  }
  const auto fams = (*w)->Collect();
  EXPECT_EQ(Value(fams, "fabricscope_remote_write_dropped_samples_total", "queue_full"), 10);
  EXPECT_EQ(Value(fams, "fabricscope_remote_write_queue_samples"), 5);
  (*w)->Stop();
  EXPECT_EQ(Value((*w)->Collect(), "fabricscope_remote_write_dropped_samples_total", "shutdown"),
            5);
}

// A receiver down for 10 minutes at the default interval (15 s: 40 snapshots) loses nothing at
// the default queue bound: every snapshot is held, none dropped, and once a receiver listens
// again on its address each arrives once, in the order taken. The snapshots are taken while
// nothing listens (the sender retries with backoff meanwhile), so all 40 wait in the queue at
// once. Each holds 2,000 series; exporters/README.md "Scaling" gives the bound in minutes at 1,000
// and 10,000 nodes.
TEST(RemoteWrite, TenMinutesOfAReceiverDownAtTheDefaultIntervalLoseNothing) {
  auto probe = std::make_unique<Receiver>(std::deque<int>{});
  const std::string url = probe->url();
  const int port = probe->port();
  probe.reset();  // nothing listens there now
  double value = 0;
  auto many = [&] {
    std::vector<MetricFamily> f = Families(value);
    for (int i = 0; i < 2'000; ++i) {
      ClientMetric m = f[0].metric[0];
      m.label[0].value = "n" + std::to_string(i + 2);
      f[0].metric.push_back(m);
    }
    return f;
  };
  RemoteWriteOptions o;  // the default queue bound
  o.urls = {url};
  o.interval_ns = 3'600'000'000'000;  // the test takes the snapshots
  auto w = RemoteWriter::Create(o, many);
  ASSERT_TRUE(w.ok()) << w.status();
  (*w)->Start();
  constexpr int kSnapshots = 40;  // 10 minutes / 15 s
  for (int i = 1; i <= kSnapshots; ++i) {
    value = i;
    (*w)->SnapshotNow();
  }
  auto fams = (*w)->Collect();
  EXPECT_EQ(Value(fams, "fabricscope_remote_write_queue_samples"), kSnapshots * 2'005.0);
  EXPECT_EQ(Value(fams, "fabricscope_remote_write_dropped_samples_total", "queue_full"), 0);
  EXPECT_GT(Value(fams, "fabricscope_remote_write_failed_requests_total"), 0);
  Receiver back({}, port);
  ASSERT_EQ(back.port(), port) << "the port was taken meanwhile";
  ASSERT_TRUE(
      WaitFor([&] { return back.accepted().size() >= kSnapshots; }, std::chrono::seconds(90)));
  std::vector<double> want;
  for (int i = 1; i <= kSnapshots; ++i) want.push_back(i);
  EXPECT_EQ(back.accepted(), want);
  // The receiver keeps a request before it answers; the sender counts it once answered.
  ASSERT_TRUE(WaitFor(
      [&] { return Value((*w)->Collect(), "fabricscope_remote_write_queue_samples") == 0; }));
  fams = (*w)->Collect();
  EXPECT_EQ(Value(fams, "fabricscope_remote_write_sent_samples_total"), kSnapshots * 2'005.0);
  for (const char* reason : {"queue_full", "rejected", "shutdown"}) {
    EXPECT_EQ(Value(fams, "fabricscope_remote_write_dropped_samples_total", reason), 0) << reason;
  }
  (*w)->Stop();
}

}  // namespace
}  // namespace fabricscope::exporters
