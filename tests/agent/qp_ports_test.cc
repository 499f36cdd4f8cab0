// Which RDMA ports each process has queue pairs on (agent/qp_ports.h): iproute2's
// `rdma -j res show qp` parsed, matched against the agent's ports, and run as a real child
// process with its failures (missing, failing, hanging, flooding) reported, never hung on.
#include "agent/qp_ports.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/wait.h"

namespace fabricscope::agent {
namespace {

std::string Fixture() {
  std::ifstream in(std::string(FABRICSCOPE_TESTDATA) + "/generated/rdma-res-qp/multi-rail.json");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

collectors::PortDescriptor Rdma(const std::string& dev, uint32_t port) {
  collectors::PortDescriptor p;
  p.device = dev;
  p.port = port;
  p.rdma = true;
  return p;
}

// The watched ports: mlx5_0..2 port 1 and a netdev that no QP can be on; mlx5_3 is not watched.
std::vector<collectors::PortDescriptor> Ports() {
  collectors::PortDescriptor eth;
  eth.device = "eth0";
  return {Rdma("mlx5_0", 1), eth, Rdma("mlx5_1", 1), Rdma("mlx5_2", 1)};
}

TEST(ParseRdmaResQp, ReadsEveryQpOfTheFixture) {
  auto list = ParseRdmaResQp(Fixture());
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->qps.size(), 11u);
  EXPECT_EQ(list->skipped, 0u);
  const RdmaQp& real = list->qps[0];  // the linux-rdma patch's hns_0 output
  EXPECT_EQ(real.device, "hns_0");
  EXPECT_EQ(real.port, 1u);
  EXPECT_EQ(real.lqpn, 41u);
  EXPECT_EQ(real.type, "RC");
  EXPECT_EQ(real.state, "RTR");
  EXPECT_EQ(real.pid, 1523);
  EXPECT_EQ(list->qps[1].type, "SMI");
  EXPECT_EQ(list->qps[1].pid, 0);    // a kernel QP: no pid key
  EXPECT_EQ(list->qps[7].port, 0u);  // RESET: bound to no port yet
  EXPECT_EQ(list->qps[7].state, "RESET");
}

TEST(PortsOfProcesses, EachProcessGetsTheWatchedPortsOfItsLiveQps) {
  auto list = ParseRdmaResQp(Fixture());
  ASSERT_TRUE(list.ok());
  size_t unmatched = 99;
  const ProcessPorts m = PortsOfProcesses(list->qps, Ports(), &unmatched);
  using V = std::vector<uint32_t>;
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m.at(3101), (V{0}));   // two QPs on mlx5_0, one port
  EXPECT_EQ(m.at(3102), (V{2}));   // RC and UD on mlx5_1
  EXPECT_EQ(m.at(3105), (V{3}));   // mlx5_2; its mlx5_3 QP is on no watched port
  EXPECT_FALSE(m.contains(3103));  // RESET, no port
  EXPECT_FALSE(m.contains(3104));  // ERR
  EXPECT_FALSE(m.contains(1523));  // hns_0: not a port of this node
  EXPECT_EQ(unmatched, 2u);        // hns_0 and mlx5_3
}

TEST(PortsOfProcesses, OneProcessOnSeveralPortsIsSortedWithoutDuplicates) {
  std::vector<RdmaQp> qps;
  for (const char* dev : {"mlx5_2", "mlx5_0", "mlx5_2", "mlx5_0"}) {
    RdmaQp q;
    q.device = dev;
    q.port = 1;
    q.lqpn = 7;
    q.state = "RTS";
    q.pid = 42;
    qps.push_back(q);
  }
  const ProcessPorts m = PortsOfProcesses(qps, Ports(), nullptr);
  EXPECT_EQ(m.at(42), (std::vector<uint32_t>{0, 3}));
}

// Each producer of the window gets the names of its process's ports, the way the aggregator
// names a link's port (device:port); a producer without QPs stays unknown, even if it carried a
// stale list; an index outside the port list is skipped.
TEST(AttachRdmaPorts, NamesEachProducersPortsAndLeavesTheRestUnknown) {
  v1::GpuWindow w;
  for (int32_t pid : {42, 43, 44}) w.mutable_ingest()->add_producers()->set_pid(pid);
  w.mutable_ingest()->mutable_producers(1)->add_rdma_ports("stale:1");
  ProcessPorts m;
  m[42] = {0, 3, 99};
  m[44] = {2};
  AttachRdmaPorts(m, Ports(), &w);
  const auto& p = w.ingest().producers();
  EXPECT_EQ(std::vector<std::string>(p[0].rdma_ports().begin(), p[0].rdma_ports().end()),
            (std::vector<std::string>{"mlx5_0:1", "mlx5_2:1"}));
  EXPECT_EQ(p[1].rdma_ports_size(), 0);
  ASSERT_EQ(p[2].rdma_ports_size(), 1);
  EXPECT_EQ(p[2].rdma_ports(0), "mlx5_1:1");
}

TEST(ParseRdmaResQp, MalformedInputIsAnErrorOrACountedSkip) {
  EXPECT_FALSE(ParseRdmaResQp("").ok());
  EXPECT_FALSE(ParseRdmaResQp("{\"ifname\":\"mlx5_0\"}").ok());  // not an array
  EXPECT_FALSE(ParseRdmaResQp("[{\"ifname\":").ok());            // cut short
  EXPECT_FALSE(ParseRdmaResQp("Failed to open NETLINK_RDMA socket").ok());
  auto list = ParseRdmaResQp(
      "[1, \"x\", {\"lqpn\":5}, {\"ifname\":\"mlx5_0\"},"
      " {\"ifname\":\"mlx5_0\",\"lqpn\":-1}, {\"ifname\":\"mlx5_0\",\"lqpn\":1e20},"
      " {\"ifname\":\"mlx5_0\",\"lqpn\":2.5},"
      " {\"ifname\":\"mlx5_0\",\"port\":1,\"lqpn\":3,\"pid\":-4,\"state\":\"RTS\"},"
      " {\"ifname\":\"mlx5_0\",\"port\":1,\"lqpn\":4,\"pid\":4294967295,\"state\":\"RTS\"}]");
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ(list->skipped, 7u);
  ASSERT_EQ(list->qps.size(), 2u);
  EXPECT_EQ(list->qps[0].pid, 0);                  // a negative pid is no pid
  EXPECT_EQ(list->qps[1].pid, 0);                  // nor one beyond pid_t
  EXPECT_TRUE(ParseRdmaResQp("[]")->qps.empty());  // no QP at all: an empty node
}

// A stand-in for iproute2's rdma that prints `json` for `-j res show qp` and fails otherwise,
// the way the real tool refuses an unknown command.
std::string FakeRdmaTool(const std::string& dir, const std::string& json) {
  const std::string json_path = dir + "/qp.json";
  std::ofstream(json_path) << json;
  const std::string tool = dir + "/rdma";
  std::ofstream(tool) << "#!/bin/sh\n"
                      << "[ \"$*\" = \"-j res show qp\" ] || exit 255\n"
                      << "cat '" << json_path << "'\n";
  chmod(tool.c_str(), 0755);
  return tool;
}

// The map is kept through a failed refresh or two, not through an outage.
TEST(QpPortWatcher, PublishesTheMapAndKeepsTheLastGoodOneThroughAShortFailure) {
  char tmpl[] = "/tmp/fs_qp_ports_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  QpPortWatcher::Options o;
  o.tool = FakeRdmaTool(dir, Fixture());
  o.period_ns = 3'600'000'000'000;  // only the first refresh and RefreshNow
  QpPortWatcher w(o, Ports());
  w.RefreshNow();
  // The watcher's own first refresh too, before the file changes below.
  ASSERT_TRUE(fabricscope::testing::WaitFor([&] { return w.stats().refreshes >= 2; }));
  std::shared_ptr<const ProcessPorts> m = w.Latest();
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ(m->at(3102), (std::vector<uint32_t>{2}));
  QpPortWatcher::Stats s = w.stats();
  EXPECT_EQ(s.refreshes, 2u);
  EXPECT_EQ(s.qps, 11u);
  EXPECT_EQ(s.unmatched, 2u);
  EXPECT_EQ(s.processes, 3u);
  EXPECT_EQ(s.last_error, "");
  // The tool starts printing garbage: the map stays, the failure is counted and said.
  std::ofstream(dir + "/qp.json") << "Failed to open NETLINK_RDMA socket\n";
  w.RefreshNow();
  s = w.stats();
  EXPECT_EQ(s.failures, 1u);
  EXPECT_NE(s.last_error.find("not a JSON array"), std::string::npos);
  EXPECT_EQ(w.Latest()->size(), 3u);
  // A long outage: past three failures in a row the old map goes (a reused pid would inherit it).
  w.RefreshNow();
  w.RefreshNow();
  EXPECT_TRUE(w.Latest()->empty());
  std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(QpPortWatcher, AMissingToolLeavesTheMapEmpty) {
  QpPortWatcher::Options o;
  o.tool = "/nonexistent/rdma";
  o.period_ns = 3'600'000'000'000;
  QpPortWatcher w(o, Ports());
  w.RefreshNow();
  EXPECT_TRUE(w.Latest()->empty());
  EXPECT_GE(w.stats().failures, 1u);
  EXPECT_NE(w.stats().last_error.find("cannot run"), std::string::npos);
}

}  // namespace
}  // namespace fabricscope::agent
