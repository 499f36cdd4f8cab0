// The real fabricscope-agent in standalone mode with its GPU socket, fed by producer processes
// over the socket: /metrics and /api/collectives show what they sent, with busBw computed.
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <regex>

#include "absl/strings/str_cat.h"
#include "collectors/gpu/wire.h"
#include "tests/common/fake_tree.h"
#include "tests/common/subprocess.h"
#include "tests/common/unix_socket.h"
#include "tests/common/wait.h"
#include "tests/integration/exposition.h"

namespace fabricscope::testing {
namespace {

namespace gpu = collectors::gpu;
using namespace std::chrono_literals;

struct Agent {
  Agent(const FakeTree& tree, const std::string& socket, const std::string& window = "100ms")
      : proc({FABRICSCOPE_AGENT_BIN, "--config=" + tree.Path("agent.yaml"),
              "--sysfs-root=" + tree.root(), "--procfs-root=" + tree.root(), "--interfaces=mlx5_0",
              "--window=" + window, "--sample-period=1ms", "--status=off",
              "--http-listen=127.0.0.1:0", "--gpu-socket=" + socket, "--gpu-rank-pairs-top-k=2"}) {}
  bool Start() {
    if (!proc.Start()) return false;
    auto m = proc.WaitForLine(std::regex("serving http://[^:]+:(\\d+)/metrics"), 10s);
    if (!m) return false;
    port = std::stoi((*m)[1]);
    return true;
  }
  std::string Get(const std::string& path) { return HttpGet(port, path); }
  Subprocess proc;
  int port = 0;
};

// One producer process: a CommRecord (device 5), `n` all-reduces of 8 MB over `nranks` ranks
// taking 1 ms each on GPU (busBw with 8 ranks = 8e6 / 1e-3 x 2 x 7/8 = 1.4e10 B/s), the last
// ending 2 ms before it starts, and a proxy send of 1 MB per collective to rank
// (rank + 1) % nranks. Reports 7 records dropped on its side.
void Produce(const std::string& path, uint64_t comm, int32_t rank, int n, int32_t nranks = 8) {
  const int fd = ConnectSeqpacket(path);
  if (fd < 0) _exit(2);
  alignas(8) static unsigned char buf[gpu::kMaxDatagramBytes];
  gpu::DatagramWriter w(buf, sizeof(buf), gpu::Source::kNcclProfiler, getpid());
  gpu::CommRecord c{};
  c.comm_hash = comm;
  c.rank = rank;
  c.nranks = nranks;
  c.nnodes = 1;
  c.cuda_device = 5;
  gpu::CopyFixed(c.name, "it");
  w.Append(c);
  uint64_t seq = 0;
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  const int64_t t0 = now.tv_sec * 1'000'000'000LL + now.tv_nsec;
  for (int i = 0; i < n; ++i) {
    gpu::CollectiveRecord r{};
    r.comm_hash = comm;
    r.seq = static_cast<uint64_t>(i);
    r.count = 2'000'000;
    r.bytes = 8'000'000;
    r.start_ns = t0 - (n - i) * 2'000'000LL;
    r.end_ns = r.start_ns + 1'000'000;
    r.enqueue_start_ns = r.start_ns - 10'000;
    r.enqueue_end_ns = r.start_ns - 5'000;
    r.rank = rank;
    r.nranks = nranks;
    r.root = -1;
    r.peer = -1;
    r.nchannels = 4;
    r.timing_source = static_cast<uint8_t>(gpu::TimingSource::kKernelChannel);
    gpu::CopyFixed(r.func, "AllReduce");
    gpu::CopyFixed(r.datatype, "ncclFloat32");
    gpu::CopyFixed(r.algo, "RING");
    gpu::CopyFixed(r.proto, "SIMPLE");
    gpu::ProxyOpRecord p{};
    p.comm_hash = comm;
    p.op_seq = r.seq;
    p.bytes = 1'000'000;
    p.rank = rank;
    p.peer = (rank + 1) % nranks;
    p.is_send = 1;
    p.steps = 4;
    p.pid = getpid();
    gpu::CopyFixed(p.func, "AllReduce");
    if (w.size() + 2 * sizeof(gpu::RecordHeader) + sizeof(p) + sizeof(r) > sizeof(buf)) {
      const size_t size = w.Finish(++seq, 7, t0);
      if (send(fd, buf, size, MSG_NOSIGNAL) != static_cast<ssize_t>(size)) _exit(3);
      w.Reset();
    }
    w.Append(p);
    w.Append(r);
  }
  const size_t size = w.Finish(++seq, 7, t0);
  if (send(fd, buf, size, MSG_NOSIGNAL) != static_cast<ssize_t>(size)) _exit(3);
  // Exits without a goodbye: the agent keeps what arrived.
  _exit(0);
}

TEST(GpuAgent, StandaloneAgentServesCollectivesFromItsSocket) {
  FakeTree tree;
  tree.CopyTestdata("sysfs-real/class", "class");
  tree.Write("agent.yaml", "node: gpu-node\n");
  const std::string socket = tree.Path("run/gpu.sock");
  Agent agent(tree, socket);
  ASSERT_TRUE(agent.Start()) << agent.proc.Output();

  constexpr int kProducers = 4;
  constexpr int kPerProducer = 500;
  std::vector<pid_t> pids;
  for (int p = 0; p < kProducers; ++p) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) Produce(socket, 0x1234abcd00000000ull, p, kPerProducer);
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }

  const std::map<std::string, std::string> sel = {{"func", "AllReduce"}, {"comm", "1234abcd"}};
  auto with = [&](const char* k, const char* v) {
    auto l = sel;
    l[k] = v;
    return l;
  };
  const double n = kProducers * kPerProducer;
  std::string body;
  std::vector<Sample> m;
  // Every record in, and every producer's hang-up seen (a window may carry the last records
  // before the agent has read the closes behind them).
  ASSERT_TRUE(WaitFor([&] {
    m = ParseExposition(body = agent.Get("/metrics"));
    return Value(m, "fabricscope_collectives_total", {{"func", "AllReduce"}}) == n &&
           Value(m, "fabricscope_gpu_ingest_connections") == 0;
  })) << body
      << agent.proc.Output();
  EXPECT_EQ(Value(m, "fabricscope_collective_duration_seconds_count", sel), n);
  EXPECT_NEAR(Value(m, "fabricscope_collective_duration_seconds_sum", sel).value_or(-1), n * 1e-3,
              1e-6);
  // Every duration is exactly 1 ms: all in the le="0.001" bucket, none below.
  EXPECT_EQ(Value(m, "fabricscope_collective_duration_seconds_bucket", with("le", "0.001")), n)
      << body;
  EXPECT_EQ(Value(m, "fabricscope_collective_duration_seconds_bucket", with("le", "0.0005")), 0)
      << body;
  EXPECT_NEAR(Value(m, "fabricscope_collective_bus_bandwidth_bytes_per_second", sel).value_or(-1),
              1.4e10, 1e3);
  EXPECT_NEAR(Value(m, "fabricscope_collective_bus_bytes_total", sel).value_or(-1), n * 8e6 * 1.75,
              1.0);
  EXPECT_EQ(Value(m, "fabricscope_plugin_dropped_events_total", {{"source", "nccl"}}),
            kProducers * 7);
  EXPECT_EQ(Value(m, "fabricscope_plugin_dropped_events_total", {{"source", "agent"}}), 0);
  // Top 2 of the 4 rank pairs (each rank sent 500 x 1 MB to the next).
  const auto pairs = Select(m, "fabricscope_rank_pair_bytes_total", {{"comm", "1234abcd"}});
  ASSERT_EQ(pairs.size(), 2u) << body;
  for (const Sample* p : pairs) {
    EXPECT_EQ(p->value, kPerProducer * 1e6);
    EXPECT_EQ(std::stoi(p->labels.at("dst_rank")), (std::stoi(p->labels.at("src_rank")) + 1) % 8);
  }
  EXPECT_EQ(Value(m, "fabricscope_gpu_ingest_connections"), 0);
  EXPECT_GT(Value(m, "fabricscope_gpu_ingest_datagrams_total").value_or(0), 0);

  // /api/collectives: the recent ones, with fields and origin.
  const std::string json = agent.Get("/api/collectives?limit=3");
  EXPECT_NE(json.find("\"func\":\"AllReduce\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"comm\":\"1234abcd00000000\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"gpu\":5"), std::string::npos) << json;
  EXPECT_NE(json.find("\"timing_source\":\"kernel_channel\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"busbw_bytes_per_second\":14000000000"), std::string::npos) << json;
  EXPECT_NE(json.find("\"bytes_sent\":1000000"), std::string::npos) << json;
  // The origin is the producer process (SO_PEERCRED), one of those forked above.
  std::smatch pid;
  ASSERT_TRUE(std::regex_search(json, pid, std::regex("\"pid\":(\\d+)"))) << json;
  EXPECT_NE(std::find(pids.begin(), pids.end(), std::stoi(pid[1])), pids.end()) << json;
  size_t entries = 0;
  for (size_t at = 0; (at = json.find("\"node\":\"gpu-node\"", at)) != std::string::npos; ++at) {
    ++entries;
  }
  EXPECT_EQ(entries, 3u);
  EXPECT_EQ(agent.Get("/api/kernels"), "{\"kernels\":[]}");

  EXPECT_EQ(agent.proc.Stop(SIGTERM), 0) << agent.proc.Output();
  EXPECT_FALSE(std::filesystem::exists(socket));
}

// Early batches (collectives.early_send_interval, 200 ms by default): with a 60 s window, both
// ranks' analyses still reach the cross-rank matcher as soon as the samples covering them are
// in, not when the window closes.
TEST(GpuAgent, AnalysesGoOutAheadOfTheirWindow) {
  FakeTree tree;
  tree.CopyTestdata("sysfs-real/class", "class");
  tree.Write("agent.yaml", "node: gpu-node\n");
  const std::string socket = tree.Path("run/gpu.sock");
  Agent agent(tree, socket, "60s");
  ASSERT_TRUE(agent.Start()) << agent.proc.Output();
  constexpr int kPerProducer = 3;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) Produce(socket, 0x5678abcd00000000ull, rank, kPerProducer, 2);
    pids.push_back(pid);
  }
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  std::string body;
  std::vector<Sample> m;
  // The default wait (10 s) is a sixth of the window: only an early batch can meet it.
  ASSERT_TRUE(WaitFor([&] {
    m = ParseExposition(body = agent.Get("/metrics"));
    return Value(m, "fabricscope_collective_arrival_skew_seconds_count") == kPerProducer;
  })) << body
      << agent.proc.Output();
  double by_cause = 0;
  for (const Sample* s : Select(m, "fabricscope_collectives_by_cause_total", {})) {
    by_cause += s->value;
  }
  EXPECT_EQ(by_cause, kPerProducer) << body;
  const std::string json = agent.Get("/api/collectives?limit=10");
  EXPECT_NE(json.find("\"comm\":\"5678abcd00000000\""), std::string::npos) << json;
  EXPECT_EQ(agent.proc.Stop(SIGTERM), 0) << agent.proc.Output();
}

}  // namespace
}  // namespace fabricscope::testing
