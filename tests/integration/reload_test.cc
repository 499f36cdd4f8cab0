// SIGHUP reloads and SIGTERM stops of the real daemons: the agent re-reads its config file
// (flags stay as given) and picks up a changed port selection while /metrics stays on its
// port; a bad config leaves it running as it was; SIGTERM flushes the last partial window to
// the aggregator and restores a changed hw_counters lifespan; the aggregator re-reads its
// config and moves its listeners.
#include <gtest/gtest.h>
#include <httplib.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/common/fake_tree.h"
#include "tests/common/subprocess.h"
#include "tests/common/wait.h"

namespace fabricscope::testing {
namespace {

using namespace std::chrono_literals;

std::string Get(const std::string& host, int port, const std::string& path) {
  httplib::Client c(host, port);
  c.set_connection_timeout(2);
  auto r = c.Get(path);
  return r && r->status == 200 ? r->body : "";
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Reload, AgentSighupPicksUpChangedPortsAndKeepsFlags) {
  FakeTree tree;
  tree.AddNetdev("eth0", "10000", 100);
  tree.AddNetdev("eth1", "10000", 200);
  tree.Write("agent.yaml", "node: config-node\ninterfaces: [eth0]\n");
  Subprocess agent({FABRICSCOPE_AGENT_BIN, "--config=" + tree.Path("agent.yaml"),
                    "--node=flag-node", "--sysfs-root=" + tree.root(),
                    "--procfs-root=" + tree.root(), "--http-listen=127.0.0.1:0", "--window=100ms",
                    "--status=off", "--gpu-socket=off"});
  ASSERT_TRUE(agent.Start());
  auto serving = agent.WaitForLine(std::regex("standalone: serving http://127.0.0.1:(\\d+)/"), 10s);
  ASSERT_TRUE(serving) << agent.Output();
  const int port = std::stoi((*serving)[1]);
  ASSERT_TRUE(agent.WaitForLine(std::regex("ports: eth0$"), 5s)) << agent.Output();
  std::string body;
  ASSERT_TRUE(WaitFor([&] {
    return absl::StrContains(body = Get("127.0.0.1", port, "/metrics"), "device=\"eth0\"");
  })) << body;
  EXPECT_FALSE(absl::StrContains(body, "device=\"eth1\"")) << body;

  // The config file now names both ports and another node; --node stays as given.
  tree.Write("agent.yaml", "node: config-node\ninterfaces: [eth0, eth1]\n");
  agent.Signal(SIGHUP);
  auto reloaded =
      agent.WaitForLine(std::regex("reloaded, standalone: serving http://127.0.0.1:(\\d+)/"), 10s);
  ASSERT_TRUE(reloaded) << agent.Output();
  EXPECT_EQ(std::stoi((*reloaded)[1]), port);  // the in-process aggregator kept serving
  ASSERT_TRUE(agent.WaitForLine(std::regex("ports: eth0,eth1$"), 5s)) << agent.Output();
  ASSERT_TRUE(WaitFor([&] {
    return absl::StrContains(body = Get("127.0.0.1", port, "/metrics"),
                             "fabricscope_port_transmit_bytes_total{node=\"flag-node\","
                             "device=\"eth1\"");
  })) << body;
  EXPECT_FALSE(absl::StrContains(body, "config-node")) << body;

  // A config the agent cannot use: it says so and keeps running with the previous one.
  tree.Write("agent.yaml", "interfaces: [eth0]\nno_such_key: 1\n");
  agent.Signal(SIGHUP);
  ASSERT_TRUE(agent.WaitForLine(std::regex("reload failed.*no_such_key"), 10s)) << agent.Output();
  // Still sampling eth1 with the previous config: a new counter value arrives.
  tree.Write("class/net/eth1/statistics/tx_bytes", "5000\n");
  const std::regex eth1_tx(
      "\nfabricscope_port_transmit_bytes_total\\{node=\"flag-node\",device=\"eth1\"[^}]*\\} "
      "5000\n");
  ASSERT_TRUE(WaitFor([&] {
    return std::regex_search(body = Get("127.0.0.1", port, "/metrics"), eth1_tx);
  })) << body;
  EXPECT_EQ(agent.Stop(SIGTERM), 0) << agent.Output();
}

TEST(Reload, AgentSigtermFlushesThePartialWindowAndRestoresLifespan) {
  FakeTree tree;
  tree.CopyTestdata("sysfs-real/class", "class");
  const std::string life = "class/infiniband/mlx5_0/ports/1/hw_counters/lifespan";
  const std::string original = ReadFile(tree.Path(life));
  ASSERT_FALSE(original.empty());
  ASSERT_NE(original, "3\n");
  tree.Write("agent.yaml", "node: stop-node\n");
  tree.Write("aggregator.yaml", "");
  Subprocess agg({FABRICSCOPE_AGGREGATOR_BIN, "--config=" + tree.Path("aggregator.yaml"),
                  "--grpc-listen=127.0.0.1:0", "--http-listen=127.0.0.1:0"});
  ASSERT_TRUE(agg.Start());
  auto ports = agg.WaitForLine(std::regex("listening grpc=[^ ]+:(\\d+) http=[^ ]+:(\\d+)"), 10s);
  ASSERT_TRUE(ports) << agg.Output();
  const int http = std::stoi((*ports)[2]);
  // One window per minute: nothing reaches the aggregator before the stop, except the Hello.
  Subprocess agent({FABRICSCOPE_AGENT_BIN, "--config=" + tree.Path("agent.yaml"),
                    "--sysfs-root=" + tree.root(), "--procfs-root=" + tree.root(),
                    "--interfaces=mlx5_0", "--window=60s", "--hw-lifespan=3ms", "--status=off",
                    "--gpu-socket=off", "--aggregator=127.0.0.1:" + (*ports)[1].str()});
  ASSERT_TRUE(agent.Start());
  // (The uplink thread's log line may come before or after main's "streaming to".)
  ASSERT_TRUE(agent.WaitForLine(std::regex("connected to aggregator"), 10s)) << agent.Output();
  EXPECT_EQ(ReadFile(tree.Path(life)), "3\n");
  const std::string selector =
      "fabricscope_port_transmit_bytes_total{node=\"stop-node\",device=\"mlx5_0\"";
  EXPECT_FALSE(absl::StrContains(Get("127.0.0.1", http, "/metrics"), selector));

  EXPECT_EQ(agent.Stop(SIGTERM), 0) << agent.Output();
  EXPECT_EQ(ReadFile(tree.Path(life)), original);
  // Delivered before the agent exited: the aggregator acked it.
  EXPECT_TRUE(absl::StrContains(Get("127.0.0.1", http, "/metrics"), selector)) << agent.Output();
  EXPECT_EQ(agg.Stop(SIGTERM), 0) << agg.Output();
}

TEST(Reload, AggregatorSighupMovesItsListeners) {
  FakeTree tree;
  tree.Write("aggregator.yaml", "grpc_listen: 127.0.0.1:0\nhttp_listen: 127.0.0.1:0\n");
  Subprocess agg({FABRICSCOPE_AGGREGATOR_BIN, "--config=" + tree.Path("aggregator.yaml")});
  ASSERT_TRUE(agg.Start());
  auto first =
      agg.WaitForLine(std::regex("listening grpc=[^ ]+:(\\d+) http=127.0.0.1:(\\d+)"), 10s);
  ASSERT_TRUE(first) << agg.Output();
  const int http1 = std::stoi((*first)[2]);
  ASSERT_NE(Get("127.0.0.1", http1, "/healthz"), "");

  tree.Write("aggregator.yaml", "grpc_listen: 127.0.0.1:0\nhttp_listen: 127.0.0.2:0\n");
  agg.Signal(SIGHUP);
  auto second = agg.WaitForLine(
      std::regex("reloaded, listening grpc=[^ ]+:(\\d+) http=127.0.0.2:(\\d+)"), 10s);
  ASSERT_TRUE(second) << agg.Output();
  EXPECT_NE(Get("127.0.0.2", std::stoi((*second)[2]), "/healthz"), "");
  EXPECT_EQ(Get("127.0.0.1", http1, "/healthz"), "");  // the old listener is closed

  // A config that does not parse: the aggregator keeps its listeners.
  tree.Write("aggregator.yaml", "http_listen: [\n");
  agg.Signal(SIGHUP);
  ASSERT_TRUE(agg.WaitForLine(std::regex("reload failed"), 10s)) << agg.Output();
  EXPECT_NE(Get("127.0.0.2", std::stoi((*second)[2]), "/healthz"), "");
  EXPECT_EQ(agg.Stop(SIGTERM), 0) << agg.Output();
}

}  // namespace
}  // namespace fabricscope::testing
