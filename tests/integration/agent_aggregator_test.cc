// Agent and aggregator as separate processes over loopback gRPC, on a fake sysfs tree built
// from the real fixtures: values, an aggregator crash and restart, and an agent killed with
// unacked windows in its spool.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <regex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "collectors/uplink/spool.h"
#include "simdjson.h"
#include "tests/common/fake_tree.h"
#include "tests/common/promtool.h"
#include "tests/common/subprocess.h"
#include "tests/common/wait.h"

namespace fabricscope::testing {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kRawXmitWords = 2880761508848;  // fixture mlx5_0 port_xmit_data
constexpr char kXmitFile[] = "class/infiniband/mlx5_0/ports/1/counters/port_xmit_data";

double Scrape(const std::string& body, const std::string& selector) {
  std::istringstream in(body);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(selector, 0) == 0 && line.size() > selector.size() &&
        line[selector.size()] == ' ') {
      return std::stod(line.substr(selector.size() + 1));
    }
  }
  return -1;
}

struct Aggregator {
  explicit Aggregator(const std::string& grpc_listen)
      : proc({FABRICSCOPE_AGGREGATOR_BIN, "--grpc-listen=" + grpc_listen,
              "--http-listen=127.0.0.1:0"}) {}
  bool Start() {
    if (!proc.Start()) return false;
    auto m = proc.WaitForLine(std::regex("listening grpc=[^ ]+:(\\d+) http=[^ ]+:(\\d+)"), 10s);
    if (!m) return false;
    grpc_port = std::stoi((*m)[1]);
    http_port = std::stoi((*m)[2]);
    return true;
  }
  std::string Metrics() {
    httplib::Client c("127.0.0.1", http_port);
    auto r = c.Get("/metrics");
    return r && r->status == 200 ? r->body : "";
  }
  Subprocess proc;
  int grpc_port = 0;
  int http_port = 0;
};

const std::string kTx =
    "fabricscope_port_transmit_bytes_total{node=\"it-node\",device=\"mlx5_0\",port=\"1\"}";

TEST(AgentAggregator, ValuesSurviveAnAggregatorCrashAndRestart) {
  FakeTree tree;
  tree.CopyTestdata("sysfs-real/class", "class");
  tree.Write("agent.yaml", "node: it-node\n");

  auto agg = std::make_unique<Aggregator>("127.0.0.1:0");
  ASSERT_TRUE(agg->Start()) << agg->proc.Output();
  const int grpc_port = agg->grpc_port;

  Subprocess agent({FABRICSCOPE_AGENT_BIN, "--config=" + tree.Path("agent.yaml"),
                    "--sysfs-root=" + tree.root(), "--procfs-root=" + tree.root(),
                    "--interfaces=mlx5_0", "--window=200ms", "--sample-period=1ms", "--status=off",
                    "--gpu-socket=off", absl::StrCat("--aggregator=127.0.0.1:", grpc_port)});
  ASSERT_TRUE(agent.Start());
  ASSERT_TRUE(agent.WaitForLine(std::regex("streaming to"), 10s)) << agent.Output();

  // 1. The hardware total arrives, as bytes (4 x words).
  std::string body;
  ASSERT_TRUE(WaitFor([&] { return Scrape(body = agg->Metrics(), kTx) == 4.0 * kRawXmitWords; }))
      << body << agent.Output();
  EXPECT_EQ(Scrape(body,
                   "fabricscope_port_line_rate_bytes_per_second{node=\"it-node\","
                   "device=\"mlx5_0\",port=\"1\"}"),
            3.125e9);

  // 2. Traffic moves the counter.
  tree.Write(kXmitFile, absl::StrCat(kRawXmitWords + 1000, "\n"));
  ASSERT_TRUE(WaitFor([&] {
    return Scrape(body = agg->Metrics(), kTx) == 4.0 * (kRawXmitWords + 1000);
  })) << body;

  // 3. The aggregator dies; traffic goes on while it is away for about five windows.
  agg->proc.Stop(SIGKILL);
  agg.reset();
  tree.Write(kXmitFile, absl::StrCat(kRawXmitWords + 5000, "\n"));
  std::this_thread::sleep_for(1s);  // the outage itself, not a wait for a condition

  // 4. A new aggregator on the same port: the agent reconnects and resends what was not acked.
  agg = std::make_unique<Aggregator>(absl::StrCat("127.0.0.1:", grpc_port));
  ASSERT_TRUE(agg->Start()) << agg->proc.Output();
  // The windows made during the outage arrive (at least 4 of 200 ms), contiguous, none lost.
  // The first resent batch already carries the new total: wait for the rest too.
  ASSERT_TRUE(WaitFor([&] {
    body = agg->Metrics();
    return Scrape(body, kTx) == 4.0 * (kRawXmitWords + 5000) &&
           Scrape(body, "fabricscope_aggregator_batches_total") >= 4;
  })) << body
      << agent.Output();
  EXPECT_GE(Scrape(body, "fabricscope_aggregator_batches_total"), 4) << body;
  EXPECT_EQ(Scrape(body, "fabricscope_aggregator_window_gaps_total"), 0) << body;
  EXPECT_EQ(Scrape(body, "fabricscope_aggregator_lost_batches_total"), 0) << body;
  EXPECT_EQ(Scrape(body, "fabricscope_agent_uplink_dropped_batches_total{node=\"it-node\"}"), 0);

  // 5. Both stop cleanly on SIGTERM.
  EXPECT_EQ(agent.Stop(SIGTERM), 0) << agent.Output();
  EXPECT_EQ(agg->proc.Stop(SIGTERM), 0);
}

// kill -9 of an agent while its aggregator is away too: the windows it made but nobody acked are
// in its spool (--spool-dir), and the next agent process sends them, under the killed one's
// Hello, before its own: the new aggregator gets every one, and nothing is counted lost.
TEST(AgentAggregator, AKilledAgentsSpooledWindowsArriveAfterItsRestart) {
  FakeTree tree;
  tree.CopyTestdata("sysfs-real/class", "class");
  tree.Write("agent.yaml", "node: it-node\n");
  const std::string spool = tree.Path("spool");
  auto agg = std::make_unique<Aggregator>("127.0.0.1:0");
  ASSERT_TRUE(agg->Start()) << agg->proc.Output();
  const int grpc_port = agg->grpc_port;
  auto start_agent = [&] {
    auto a = std::make_unique<Subprocess>(std::vector<std::string>{
        FABRICSCOPE_AGENT_BIN, "--config=" + tree.Path("agent.yaml"), "--sysfs-root=" + tree.root(),
        "--procfs-root=" + tree.root(), "--interfaces=mlx5_0", "--window=200ms", "--status=off",
        "--gpu-socket=off", "--spool-dir=" + spool,
        absl::StrCat("--aggregator=127.0.0.1:", grpc_port)});
    return a->Start() ? std::move(a) : nullptr;
  };
  auto first = start_agent();
  ASSERT_NE(first, nullptr);
  std::string body;
  ASSERT_TRUE(WaitFor([&] {
    return Scrape(body = agg->Metrics(), "fabricscope_aggregator_batches_total") >= 2;
  })) << body
      << first->Output();
  agg->proc.Stop(SIGKILL);
  agg.reset();
  std::this_thread::sleep_for(1s);  // the outage itself: about five windows nobody acks
  first->Stop(SIGKILL);
  // What the killed agent left: every record of its instance's segments.
  uint64_t left = 0;
  for (const auto& dir : std::filesystem::directory_iterator(spool)) {
    for (const auto& seg : std::filesystem::directory_iterator(dir.path())) {
      if (seg.path().extension() != ".seg") continue;
      auto batches = uplink::Spool::ReadSegment(seg.path().string());
      ASSERT_TRUE(batches.ok());
      left += batches->size();
    }
  }
  ASSERT_GE(left, 4u) << first->Output();
  agg = std::make_unique<Aggregator>(absl::StrCat("127.0.0.1:", grpc_port));
  ASSERT_TRUE(agg->Start()) << agg->proc.Output();
  auto second = start_agent();
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(WaitFor([&] {
    body = agg->Metrics();
    return Scrape(body, "fabricscope_agent_spool_replayed_batches_total{node=\"it-node\"}") ==
               static_cast<double>(left) &&
           Scrape(body, "fabricscope_aggregator_batches_total") > static_cast<double>(left);
  })) << body
      << second->Output();
  EXPECT_EQ(Scrape(body, "fabricscope_aggregator_lost_batches_total"), 0) << body;
  EXPECT_EQ(Scrape(body, "fabricscope_agent_uplink_dropped_batches_total{node=\"it-node\"}"), 0);
  EXPECT_EQ(Scrape(body,
                   "fabricscope_agent_spool_dropped_batches_total{node=\"it-node\","
                   "reason=\"corrupt\"}"),
            0);
  EXPECT_EQ(second->Stop(SIGTERM), 0) << second->Output();
  EXPECT_EQ(agg->proc.Stop(SIGTERM), 0);
}

TEST(AgentAggregator, TwoAgentsAreTwoNodes) {
  FakeTree tree;
  tree.CopyTestdata("sysfs-real/class", "class");
  tree.Write("empty.yaml", "");
  Aggregator agg("127.0.0.1:0");
  ASSERT_TRUE(agg.Start());
  std::vector<std::unique_ptr<Subprocess>> agents;
  for (const char* node : {"node-a", "node-b"}) {
    agents.push_back(std::make_unique<Subprocess>(std::vector<std::string>{
        FABRICSCOPE_AGENT_BIN, "--config=" + tree.Path("empty.yaml"), "--sysfs-root=" + tree.root(),
        "--procfs-root=" + tree.root(), "--window=100ms", "--status=off", "--gpu-socket=off",
        std::string("--node=") + node, absl::StrCat("--aggregator=127.0.0.1:", agg.grpc_port)}));
    ASSERT_TRUE(agents.back()->Start());
  }
  std::string body;
  ASSERT_TRUE(WaitFor([&] {
    body = agg.Metrics();
    return Scrape(body, "fabricscope_aggregator_nodes") == 2 &&
           Scrape(body,
                  "fabricscope_port_receive_bytes_total{node=\"node-b\",device=\"hfi1_0\","
                  "port=\"1\"}") == 4.0 * 345091702026;
  })) << body;
  // The exposition parses and passes Prometheus's own lint (naming, units, _total).
  const PromtoolResult lint = PromtoolCheckMetrics(body);
  EXPECT_TRUE(lint.ok) << "promtool check metrics: " << lint.output;
  for (auto& a : agents) EXPECT_EQ(a->Stop(SIGTERM), 0);
}

// The timeline of the last seconds asks the agent for its own samples over its stream
// (RecordingRequest) and draws them: one track of the port at the sampling period, in which the
// one sample that saw the counter step carries the traffic.
TEST(AgentAggregator, TheTimelineFetchesTheAgentsFlightRecorderOverItsStream) {
  FakeTree tree;
  tree.CopyTestdata("sysfs-real/class", "class");
  tree.Write("agent.yaml", "node: it-node\n");
  Aggregator agg("127.0.0.1:0");
  ASSERT_TRUE(agg.Start()) << agg.proc.Output();
  Subprocess agent({FABRICSCOPE_AGENT_BIN, "--config=" + tree.Path("agent.yaml"),
                    "--sysfs-root=" + tree.root(), "--procfs-root=" + tree.root(),
                    "--interfaces=mlx5_0", "--window=200ms", "--sample-period=1ms", "--status=off",
                    "--gpu-socket=off", absl::StrCat("--aggregator=127.0.0.1:", agg.grpc_port)});
  ASSERT_TRUE(agent.Start());
  std::string body;
  // Sampling for more than the range asked below: 8 windows of 200 ms stored.
  ASSERT_TRUE(WaitFor([&] {
    body = agg.Metrics();
    return Scrape(body, kTx) == 4.0 * kRawXmitWords &&
           Scrape(body, "fabricscope_aggregator_batches_total") >= 8;
  })) << body
      << agent.Output();
  tree.Write(kXmitFile, absl::StrCat(kRawXmitWords + 250'000, "\n"));  // 1 MB in one step
  ASSERT_TRUE(WaitFor([&] {
    return Scrape(body = agg.Metrics(), kTx) == 4.0 * (kRawXmitWords + 250'000);
  })) << body;
  const int64_t to = absl::ToUnixNanos(absl::Now());
  httplib::Client c("127.0.0.1", agg.http_port);
  c.set_read_timeout(30);
  auto r = c.Get(absl::StrFormat("/api/timeline?node=it-node&from=%.3f&to=%.3f",
                                 static_cast<double>(to - 1'000'000'000) / 1e9,
                                 static_cast<double>(to) / 1e9));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(r->body).get(doc), simdjson::SUCCESS);
  size_t points = 0, moving = 0;
  for (simdjson::dom::element e : doc["traceEvents"].get_array()) {
    std::string_view ph, name;
    if (e["ph"].get(ph) || ph != "C" || e["name"].get(name) ||
        name != "mlx5_0:1 samples (flight recorder)") {
      continue;
    }
    ++points;
    double tx = 0;
    ASSERT_EQ(e["args"]["transmit"].get(tx), simdjson::SUCCESS);
    moving += tx > 0 ? 1 : 0;
  }
  // 1 s at 1 ms is 1,000 samples where the sampler keeps its period; a busy 2-core machine may
  // take longer between reads, never ten times longer.
  EXPECT_GE(points, 100u) << r->body.substr(0, 2000);
  EXPECT_EQ(moving, 1u);
  std::string notes;
  for (simdjson::dom::element n : doc["otherData"]["notes"].get_array()) {
    notes += std::string(n.get_string().value()) + "\n";
  }
  EXPECT_NE(notes.find("answered 1 of 1 nodes"), std::string::npos) << notes;
  body = agg.Metrics();
  EXPECT_EQ(Scrape(body, "fabricscope_aggregator_recording_fetches_total{outcome=\"answered\"}"), 1)
      << body;
  EXPECT_EQ(agent.Stop(SIGTERM), 0) << agent.Output();
  EXPECT_EQ(agg.proc.Stop(SIGTERM), 0);
}

}  // namespace
}  // namespace fabricscope::testing
