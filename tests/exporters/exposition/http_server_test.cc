#include "exporters/exposition/http_server.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exporters/state/cluster_state.h"
#include "exporters/state/lock_watchdog.h"
#include "prometheus/counter.h"
#include "prometheus/registry.h"
#include "tests/common/promtool.h"
#include "tests/common/wait.h"

namespace fabricscope::exporters {
namespace {

using fabricscope::testing::WaitFor;
using ::testing::HasSubstr;

TEST(HttpServer, ServesMetricsHealthAndIndexOnLoopback) {
  ClusterState state;
  v1::Hello h;
  h.set_node("n1");
  h.set_instance_id(1);
  h.add_ports()->set_device("eth0");
  ASSERT_TRUE(state.OnHello(h).ok());
  prometheus::Registry registry;
  prometheus::BuildCounter()
      .Name("extra_things_total")
      .Help("x")
      .Register(registry)
      .Add({})
      .Increment(3);
  HttpServer server({&registry}, &state);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client c("127.0.0.1", *port);
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_THAT(r->get_header_value("Content-Type"), HasSubstr("text/plain; version=0.0.4"));
  EXPECT_THAT(r->body, HasSubstr("# TYPE fabricscope_agent_info gauge"));
  EXPECT_THAT(r->body, HasSubstr("fabricscope_agent_info{node=\"n1\""));
  EXPECT_THAT(r->body, HasSubstr("extra_things_total 3"));
  EXPECT_EQ(c.Get("/healthz")->body, "ok\n");
  EXPECT_THAT(c.Get("/")->body, HasSubstr("/metrics"));
  EXPECT_EQ(c.Get("/nope")->status, 404);
  EXPECT_THAT(c.Get("/api/microbursts?node=n1")->body, HasSubstr("\"microbursts\""));
  server.Stop();
}

// The index lists the aggregator's JSON endpoints along with the pages.
TEST(HttpServer, IndexListsEveryEndpointItServes) {
  ClusterState state;
  HttpServer server({}, &state);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client c("127.0.0.1", *port);
  const std::string index = c.Get("/")->body;
  for (const char* path :
       {"/metrics", "/heatmap", "/api/collectives/slow", "/api/anomalies", "/api/loss_patterns",
        "/api/flight_recordings", "/api/microbursts", "/api/loss_events", "/api/collectives",
        "/api/kernels", "/api/status", "/api/ports", "/api/nodes", "/healthz"}) {
    EXPECT_THAT(index, HasSubstr(absl::StrCat("href=\"", path, "\"")));
    const std::string route = std::string(path) == "/heatmap" ? "/heatmap/links" : path;
    EXPECT_EQ(c.Get(route)->status, 200) << route;
  }
}

// A link heat map asked for a window that ends before it starts is a 400 that says so, not some
// other window (a first user's report, issue 35); from < to is served.
TEST(HttpServer, LinksHeatmapWithToNotAfterFromIsABadRequest) {
  ClusterState state;
  HttpServer server({}, &state);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client c("127.0.0.1", *port);
  for (const char* q : {"from=1700000010&to=1700000000", "from=1700000000&to=1700000000"}) {
    auto r = c.Get(absl::StrCat("/heatmap/links?format=json&", q));
    ASSERT_TRUE(r) << q;
    EXPECT_EQ(r->status, 400) << q;
    EXPECT_THAT(r->body, HasSubstr("to must be after from")) << q;
  }
  EXPECT_EQ(c.Get("/heatmap/links?format=json&from=1700000000&to=1700000010")->status, 200);
}

// Nothing to serve but liveness (the agent's --health-listen): /healthz answers, a scrape of
// /metrics fails with 404 rather than reading an empty page.
TEST(HttpServer, HealthOnlyServesHealthzAndNotFoundForTheRest) {
  HttpServer server({}, nullptr);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client c("127.0.0.1", *port);
  EXPECT_EQ(c.Get("/healthz")->body, "ok\n");
  EXPECT_EQ(c.Get("/")->status, 200);
  EXPECT_THAT(c.Get("/")->body, HasSubstr("/healthz"));
  for (const char* path : {"/metrics", "/api/microbursts", "/api/collectives", "/heatmap"}) {
    EXPECT_EQ(c.Get(path)->status, 404) << path;
  }
}

// /healthz follows the health check: 503 with its reason while it has one, 200 "ok" after.
TEST(HttpServer, HealthzAnswers503WithTheCheckReason) {
  HttpServer server({}, nullptr);
  std::atomic<bool> stuck{true};
  server.SetHealthCheck([&] { return stuck ? std::string("state locks held for 12 s") : ""; });
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client c("127.0.0.1", *port);
  auto r = c.Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, "state locks held for 12 s\n");
  stuck = false;
  r = c.Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "ok\n");
}

// 500 clients that connect and send nothing (each holds a thread until httplib's 5 s read
// timeout) do not keep /metrics waiting: it answers at once, on a thread of its own. (With
// httplib's fixed pool of 8, every scrape timed out while they were held.)
// Open file descriptors of this process now.
size_t FdCount() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST(HttpServer, IdleConnectionsDoNotBlockMetrics) {
  rlimit nofile{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &nofile), 0);
  if (nofile.rlim_cur < 2048) {
    nofile.rlim_cur = std::min<rlim_t>(4096, nofile.rlim_max);
    if (setrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur < 1100) {
      GTEST_SKIP() << "needs 1,100 file descriptors (both ends of 500 connections)";
    }
  }
  prometheus::Registry reg;
  prometheus::BuildCounter().Name("idle_test_total").Help("h").Register(reg).Add({}).Increment();
  HttpServer server({&reg}, nullptr);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();

  std::vector<int> idle;
  const size_t fds_before = FdCount();
  for (int i = 0; i < 500; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(fd, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(*port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << i;
    idle.push_back(fd);
  }
  // Wait until the server has accepted every idle connection (both ends are file descriptors of
  // this process). Connections are accepted in arrival order, each handed a new thread: on a
  // loaded machine accepting 500 took longer than the read timeout below, which is meant to
  // time /metrics alone, once they are all held.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (FdCount() < fds_before + 1000 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  httplib::Client c("127.0.0.1", *port);
  c.set_read_timeout(3, 0);  // under httplib's 5 s: only a thread of its own answers in time
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r) << "no answer while 500 connections idle";
  EXPECT_EQ(r->status, 200);
  EXPECT_THAT(r->body, HasSubstr("idle_test_total 1"));
  for (int fd : idle) close(fd);
  server.Stop();
}

// A lock held without end makes the watchdog's stall grow; released, it falls back to 0.
TEST(LockWatchdog, SeesALockHeldAndReleased) {
  absl::Mutex mu;
  LockWatchdog w([&] { absl::MutexLock lock(&mu); }, 10'000'000);  // probes every 10 ms
  w.Start();
  mu.Lock();
  EXPECT_TRUE(WaitFor([&] { return w.StalledSeconds() > 0.2; }));
  mu.Unlock();
  EXPECT_TRUE(WaitFor([&] { return w.StalledSeconds() == 0; }));
  w.Stop();
  EXPECT_EQ(w.StalledSeconds(), 0);
}

// Both modules that feed fabricscope_traffic_imbalance_ratio (LinkAnalysis: a node's rails,
// GpuState: a communicator's ranks) end up in one family of the served exposition, which
// Prometheus's own checker accepts.
TEST(HttpServer, TrafficImbalanceIsOneFamilyWithBothScopes) {
  ClusterState state;
  v1::Hello h;
  h.set_node("n1");
  h.set_instance_id(1);
  for (const char* dev : {"mlx5_0", "mlx5_1"}) {
    v1::PortInfo* p = h.add_ports();
    p->set_device(dev);
    p->set_port(1);
    p->set_rdma(true);
  }
  ASSERT_TRUE(state.OnHello(h).ok());
  for (uint64_t seq = 1; seq <= 2; ++seq) {
    v1::Batch b;
    b.set_seq(seq);
    b.set_window_start_ns(static_cast<int64_t>(seq) * 1'000'000'000);
    b.set_window_end_ns(static_cast<int64_t>(seq + 1) * 1'000'000'000);
    for (uint32_t i = 0; i < 2; ++i) {
      v1::PortWindow* pw = b.add_ports();
      pw->set_port_index(i);
      pw->mutable_transmit()->set_has_bytes(true);
      pw->mutable_transmit()->set_bytes(i == 0 ? 3000 : 1000);
    }
    for (int32_t r = 0; r < 2; ++r) {
      v1::RankPairBytes* rp = b.mutable_gpu()->add_rank_pairs();
      rp->set_comm_hash(0xabcdef0100000000);
      rp->set_src_rank(r);
      rp->set_dst_rank(1 - r);
      rp->set_bytes_total(seq * (r == 0 ? 3000 : 1000));
    }
    ASSERT_TRUE(state.OnBatch("n1", 1, b).ok());
  }
  HttpServer server({}, &state);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client c("127.0.0.1", *port);
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  const std::string& body = r->body;
  size_t types = 0;
  for (size_t at = 0;
       (at = body.find("# TYPE fabricscope_traffic_imbalance_ratio ", at)) != std::string::npos;
       ++at) {
    ++types;
  }
  EXPECT_EQ(types, 1u) << body;
  // Both {3000, 1000}: mean 2000, population std 1000 -> 0.5.
  EXPECT_THAT(body, HasSubstr("fabricscope_traffic_imbalance_ratio{scope=\"rails\",node=\"n1\","
                              "direction=\"transmit\"} 0.5\n"));
  EXPECT_THAT(body, HasSubstr("fabricscope_traffic_imbalance_ratio{scope=\"ranks\",comm="
                              "\"abcdef01\",direction=\"transmit\"} 0.5\n"));
  const testing::PromtoolResult lint = testing::PromtoolCheckMetrics(body);
  EXPECT_TRUE(lint.ok) << "promtool check metrics: " << lint.output;
  server.Stop();
}

TEST(HttpServer, PortInUseIsAClearError) {
  ClusterState state;
  HttpServer first({}, &state);
  auto port = first.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok());
  HttpServer second({}, &state);
  auto again = second.Start("127.0.0.1:" + std::to_string(*port));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(again.status().message(), HasSubstr("cannot listen"));
}

TEST(HttpServer, StopRightAfterStartDoesNotHang) {
  ClusterState state;
  for (int i = 0; i < 20; ++i) {
    HttpServer s({}, &state);
    ASSERT_TRUE(s.Start("127.0.0.1:0").ok());
    s.Stop();
  }
}

}  // namespace
}  // namespace fabricscope::exporters
