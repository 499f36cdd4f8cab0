#include "agent/agent.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <regex>

#include "absl/strings/str_cat.h"
#include "collectors/sysfs_ports.h"
#include "tests/common/fake_tree.h"
#include "tests/common/wait.h"

namespace fabricscope::agent {
namespace {

using testing::FakeTree;
using ::testing::HasSubstr;
using testing::WaitFor;

// Value of the first sample line of /metrics matching `selector` (a metric name with labels),
// or -1.
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

AgentOptions TreeOptions(const FakeTree& t) {
  AgentOptions o;
  o.node = "test-node";
  o.sysfs_root = t.root();
  o.procfs_root = t.root();
  o.http_listen = "127.0.0.1:0";
  o.window_ns = 100'000'000;  // 100 ms windows keep the test short
  return o;
}

TEST(Agent, DefaultSelectionIsRdmaPortsAndPhysicalInterfaces) {
  FakeTree t;
  t.CopyTestdata("sysfs-real/class", "class");
  t.AddLinkedNetdev("eth1", "pci0000:00", "10000");
  t.AddLinkedNetdev("lo", "virtual");
  auto a = Agent::Create(TreeOptions(t));
  ASSERT_TRUE(a.ok()) << a.status();
  std::vector<std::string> names;
  for (const auto& p : (*a)->ports()) names.push_back(p.Key());
  EXPECT_THAT(names,
              ::testing::ElementsAre("hfi1_0:1", "mlx4_0:1", "mlx4_0:2", "mlx5_0:1", "eth1:0"));
}

TEST(Agent, LoOnlyWhenNothingElseExists) {
  FakeTree t;
  t.AddLinkedNetdev("lo", "virtual");
  t.AddLinkedNetdev("veth0", "virtual");
  auto a = Agent::Create(TreeOptions(t));
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ((*a)->ports().size(), 1u);
  EXPECT_EQ((*a)->ports()[0].device, "lo");
  // ... and the unknown line rate is said once.
  EXPECT_THAT((*a)->notes(), ::testing::Contains(HasSubstr("lo: line rate unknown")));
}

TEST(Agent, PerfMgtWithoutAnUmadDeviceIsANoteNotAFailure) {
  if (std::filesystem::exists("/sys/class/infiniband_mad")) GTEST_SKIP() << "umad present";
  FakeTree t;
  t.CopyTestdata("sysfs-real/class", "class");
  AgentOptions o = TreeOptions(t);
  o.pma_targets = {PmaTargetOption{}};
  auto a = Agent::Create(o);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_THAT(
      (*a)->notes(),
      ::testing::Contains(HasSubstr("PerfMgt source unavailable: no InfiniBand MAD device")));
}

TEST(Agent, SlowGroupAddsLinkStateHwCountersAndTcp) {
  FakeTree t;
  t.CopyTestdata("sysfs-real/class", "class");
  t.CopyTestdata("procfs-real/net", "net");
  AgentOptions o = TreeOptions(t);
  o.interfaces = {"mlx5_0"};
  auto a = Agent::Create(o);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ((*a)->ports().size(), 2u);  // mlx5_0:1 and the node-wide tcp counters
  const auto& mlx5 = (*a)->ports()[0];
  size_t hw = 0, state = 0, counters = 0;
  for (const auto& c : mlx5.counters) {
    hw += c.group == "hw_counters";
    state += c.group == "state";
    counters += c.group == "counters";
  }
  EXPECT_EQ(counters, 17u);  // the 16 PortCounters of the IBTA table and port_xmit_wait
  EXPECT_EQ(hw, 24u);
  EXPECT_EQ(state, 3u);
  EXPECT_TRUE((*a)->ports()[1].node_level);
  EXPECT_EQ((*a)->ports()[1].device, "tcp");
}

TEST(Agent, HwLifespanIsLoweredWhileRunningAndRestoredAtStop) {
  FakeTree t;
  t.CopyTestdata("sysfs-real/class", "class");
  const std::string life = "class/infiniband/mlx5_0/ports/1/hw_counters/lifespan";
  AgentOptions o = TreeOptions(t);
  o.interfaces = {"mlx5_0"};
  o.hw_lifespan_ms = 1;
  auto a = Agent::Create(o);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->Start().ok());
  auto read = [&] { return *collectors::ReadSmallFile(t.Path(life)); };
  EXPECT_EQ(read(), "1\n");
  (*a)->Stop();
  EXPECT_EQ(read(), "10\n");  // the fixture's value
}

TEST(Agent, UnknownInterfaceIsAClearError) {
  FakeTree t;
  t.CopyTestdata("sysfs-real/class", "class");
  AgentOptions o = TreeOptions(t);
  o.interfaces = {"mlx5_0:1", "ib7"};
  auto a = Agent::Create(o);
  ASSERT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("\"ib7\""));
  EXPECT_THAT(a.status().message(), HasSubstr("mlx5_0:1"));  // lists what exists
}

// A collective rail that names no chosen port is a typo: a clear error that lists the ports.
TEST(Agent, CollectiveRailThatNamesNoPortIsAClearError) {
  FakeTree t;
  t.CopyTestdata("sysfs-real/class", "class");
  t.AddLinkedNetdev("eth1", "pci0000:00", "10000");
  AgentOptions o = TreeOptions(t);
  o.collectives.rails = {"mlx5_0", "nosuch"};
  auto a = Agent::Create(o);
  ASSERT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(a.status().message(), HasSubstr("\"nosuch\""));
  EXPECT_THAT(a.status().message(), HasSubstr("mlx5_0:1"));
  // By device, device:port or interface name: all fine.
  o.collectives.rails = {"mlx5_0", "mlx4_0:2", "eth1"};
  auto b = Agent::Create(o);
  EXPECT_TRUE(b.ok()) << b.status();
}

TEST(Agent, LineRateOverrideAppliesToTheNamedPort) {
  FakeTree t;
  t.AddNetdev("veth0");
  AgentOptions o = TreeOptions(t);
  o.interfaces = {"veth0"};
  o.line_rates["veth0"] = 125'000'000;
  auto a = Agent::Create(o);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ((*a)->ports()[0].line_rate_bytes_per_second, 125'000'000u);
  EXPECT_EQ((*a)->ports()[0].line_rate_source, collectors::LineRateSource::kConfig);
}

// Standalone mode end to end inside one process: real files, the real sampler thread, the
// in-process aggregator and its HTTP server.
TEST(Agent, StandaloneServesHardwareTotalsOnMetrics) {
  FakeTree t;
  t.CopyTestdata("sysfs-real/class", "class");
  AgentOptions o = TreeOptions(t);
  o.interfaces = {"mlx5_0"};
  auto a = Agent::Create(o);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE((*a)->Start().ok());
  httplib::Client http("127.0.0.1", (*a)->http_port());
  const std::string sel =
      "fabricscope_port_transmit_bytes_total{node=\"test-node\",device=\"mlx5_0\",port=\"1\"}";
  const double raw = 2880761508848.0;  // the fixture's port_xmit_data, in 4-octet words
  std::string body;
  ASSERT_TRUE(WaitFor([&] {
    auto r = http.Get("/metrics");
    if (!r || r->status != 200) return false;
    body = r->body;
    return Scrape(body, sel) >= 0;
  })) << body;
  EXPECT_EQ(Scrape(body, sel), 4 * raw);

  // Traffic: the hardware counter moves by 250,000 words.
  t.Write("class/infiniband/mlx5_0/ports/1/counters/port_xmit_data",
          absl::StrCat(static_cast<uint64_t>(raw) + 250'000, "\n"));
  ASSERT_TRUE(WaitFor([&] {
    auto r = http.Get("/metrics");
    body = r ? r->body : "";
    return Scrape(body, sel) == 4 * (raw + 250'000);
  })) << body;
  EXPECT_EQ(Scrape(body,
                   "fabricscope_port_line_rate_bytes_per_second{node=\"test-node\","
                   "device=\"mlx5_0\",port=\"1\"}"),
            3.125e9);
  EXPECT_GT(Scrape(body, "fabricscope_agent_sample_interval_seconds_count{node=\"test-node\"}"), 0);
  EXPECT_THAT(body, HasSubstr("fabricscope_port_errors_total{node=\"test-node\",device=\"mlx5_0\","
                              "port=\"1\",kind=\"symbol_error\"} 0"));
  // Each group's resolution, fixed at start: hw_counters at their lifespan (the fixture's
  // 10 ms), error counters at the slow period. ("counters" is its coarsest member's:
  // port_xmit_wait, read in the slow group.)
  EXPECT_EQ(Scrape(body,
                   "fabricscope_agent_group_resolution_seconds{node=\"test-node\","
                   "group=\"counters\"}"),
            static_cast<double>(o.slow_sample_period_ns) / 1e9);
  EXPECT_EQ(Scrape(body,
                   "fabricscope_agent_group_resolution_seconds{node=\"test-node\","
                   "group=\"hw_counters\"}"),
            0.01);
  EXPECT_EQ(Scrape(body,
                   "fabricscope_agent_group_resolution_seconds{node=\"test-node\","
                   "group=\"counters_errors\"}"),
            static_cast<double>(o.slow_sample_period_ns) / 1e9);
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  (*a)->Stop();
}

}  // namespace
}  // namespace fabricscope::agent
