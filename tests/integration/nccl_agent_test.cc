// End to end without a GPU: the NCCL ABI harness (tests/common/nccl_harness.h) drives the real
// profiler plugin, which sends over the real socket to the real agent (standalone): the agent's
// /metrics shows every collective, with the busBw of the work interval the harness reported.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <regex>

#include "absl/strings/str_cat.h"
#include "tests/common/fake_tree.h"
#include "tests/common/nccl_harness.h"
#include "tests/common/subprocess.h"
#include "tests/common/wait.h"
#include "tests/integration/exposition.h"

namespace fabricscope::testing {
namespace {

using namespace std::chrono_literals;

TEST(NcclAgent, HarnessDrivenPluginFeedsTheAgentsMetrics) {
  FakeTree tree;
  tree.CopyTestdata("sysfs-real/class", "class");
  tree.Write("agent.yaml", "node: nccl-node\n");
  const std::string socket = tree.Path("run/gpu.sock");
  Subprocess agent({FABRICSCOPE_AGENT_BIN, "--config=" + tree.Path("agent.yaml"),
                    "--sysfs-root=" + tree.root(), "--procfs-root=" + tree.root(),
                    "--interfaces=mlx5_0", "--window=100ms", "--status=off",
                    "--http-listen=127.0.0.1:0", "--gpu-socket=" + socket});
  ASSERT_TRUE(agent.Start());
  auto m = agent.WaitForLine(std::regex("serving http://[^:]+:(\\d+)/metrics"), 10s);
  ASSERT_TRUE(m) << agent.Output();
  const int port = std::stoi((*m)[1]);

  setenv("FABRICSCOPE_GPU_SOCKET", socket.c_str(), 1);
  std::string error;
  // Inline proxy side, seeded: the children of one collective interleave with the enqueue of the
  // next ones in an order drawn from the seed, as NCCL's proxy thread allows (harness header).
  FakeNccl::Options options;
  options.inline_proxy = true;
  options.seed = 20261201;
  auto nccl = FakeNccl::Load(FABRICSCOPE_NCCL_PLUGIN, &error, options);
  ASSERT_NE(nccl, nullptr) << error;
  FakeNccl::Comm comm;
  comm.hash = 0x5eed000011112222;
  comm.rank = 1;
  comm.nranks = 4;
  comm.nnodes = 2;
  comm.name = "e2e";
  ASSERT_EQ(nccl->Init(comm), 0);
  // 4 MiB all-reduces whose kernel channels report a 2 ms work interval: busBw =
  // 4194304 B / 2 ms x 2 x 3/4 = 3145728000 B/s.
  constexpr int kCollectives = 300;
  constexpr size_t kBytes = 4 << 20;
  for (int i = 0; i < kCollectives; ++i) {
    const int64_t now = HarnessNowNs();
    FakeNccl::CollSpec spec = FakeNccl::AllReduceSpec(kBytes, comm.rank, comm.nranks, 2);
    spec.gate = std::make_shared<GpuGate>();
    spec.gate->started_ns = now - 3'000'000;
    spec.gate->ended_ns = now - 1'000'000;
    nccl->Run(comm, spec);
  }
  nccl->Drain();
  ASSERT_EQ(nccl->Finalize(comm), 0);
  unsetenv("FABRICSCOPE_GPU_SOCKET");

  const std::map<std::string, std::string> sel = {{"func", "AllReduce"}, {"comm", "5eed0000"}};
  std::vector<Sample> s;
  std::string body;
  auto dropped = [&](const char* source) {
    return Value(s, "fabricscope_plugin_dropped_events_total", {{"source", source}}).value_or(0);
  };
  // Every collective arrives, or the plugin counted its drop.
  ASSERT_TRUE(WaitFor([&] {
    s = ParseExposition(body = HttpGet(port, "/metrics"));
    const double got =
        Value(s, "fabricscope_collectives_total", {{"func", "AllReduce"}}).value_or(0);
    return got > 0 && got + dropped("nccl") + dropped("agent") >= kCollectives;
  })) << body
      << agent.Output();
  const double got = *Value(s, "fabricscope_collectives_total", {{"func", "AllReduce"}});
  EXPECT_EQ(dropped("agent"), 0);
  EXPECT_GE(got, kCollectives - dropped("nccl"));
  EXPECT_LE(got, kCollectives);
  EXPECT_EQ(Value(s, "fabricscope_collective_duration_seconds_count", sel), got);
  EXPECT_NEAR(Value(s, "fabricscope_collective_duration_seconds_sum", sel).value_or(0), got * 2e-3,
              got * 1e-6);
  EXPECT_NEAR(Value(s, "fabricscope_collective_bus_bandwidth_bytes_per_second", sel).value_or(0),
              3145728000.0, 3145728000.0 * 1e-3);
  // The aggregator applies a batch's parts under separate locks (ClusterState::OnBatch): the
  // agent's counters may show before its collectives are listed.
  std::string json;
  EXPECT_TRUE(WaitFor([&] {
    json = HttpGet(port, "/api/collectives?limit=1");
    return json.find("\"seq\"") != std::string::npos;
  })) << json;
  EXPECT_NE(json.find("\"timing_source\":\"kernel_channel\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"nranks\":4"), std::string::npos) << json;
  EXPECT_NE(json.find("\"proxy_peers\":[{"), std::string::npos) << json;
  EXPECT_EQ(agent.Stop(SIGTERM), 0) << agent.Output();
}

}  // namespace
}  // namespace fabricscope::testing
