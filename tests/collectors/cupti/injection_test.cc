// libfabricscope-cupti.so loaded the way the CUDA driver loads it (a child process dlopens it and
// calls InitializeInjection), on this machine without a GPU: against the real libcupti with no
// driver or with the toolkit's stub driver (it must stand down and leave the process alone), and
// against a fake libcupti (fake_cupti.cc) that plays CUPTI's part so that the whole path to the
// agent's socket runs: options, buffer pool, timestamp callback, conversion, datagrams, drops,
// the exit flush, and the stand-down when another CUPTI client holds the subscription.

#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "collectors/gpu/wire_decode.h"

namespace fabricscope::collectors::cupti {
namespace {

namespace fs = std::filesystem;
using gpu::FixedString;

int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

struct ProbeResult {
  int exit_code = -1;
  std::string output;
};

// Runs the probe on the injection library with `env` (NAME=VALUE) added to a clean
// LD_LIBRARY_PATH-free environment, reading its output to the end.
ProbeResult RunProbe(const std::vector<std::string>& env) {
  std::vector<std::string> argv = {"/usr/bin/env", "-u", "LD_LIBRARY_PATH", "-u",
                                   "FABRICSCOPE_GPU_SOCKET"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.push_back(FABRICSCOPE_CUPTI_PROBE);
  argv.push_back(FABRICSCOPE_CUPTI_SO);
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  ProbeResult result;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return result;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc == 0) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) result.output.append(buf, n);  // to EOF
    int status = 0;
    waitpid(pid, &status, 0);
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  close(fds[0]);
  return result;
}

// A listening SOCK_SEQPACKET socket standing in for the agent's GPU ingest endpoint.
class FakeAgent {
 public:
  explicit FakeAgent(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd_, 8), 0);
  }
  ~FakeAgent() { close(fd_); }

  // After the producer exited: accepts its queued connection, if any, and reads every datagram.
  std::vector<std::vector<uint8_t>> ReadAll() {
    std::vector<std::vector<uint8_t>> out;
    const int c = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (c < 0) return out;
    std::vector<uint8_t> buf(gpu::kMaxDatagramBytes);
    ssize_t n;
    while ((n = recv(c, buf.data(), buf.size(), 0)) > 0)
      out.emplace_back(buf.begin(), buf.begin() + n);
    close(c);
    return out;
  }

 private:
  std::string path_;
  int fd_ = -1;
};

class Collect : public gpu::RecordVisitor {
 public:
  void OnComm(const gpu::CommRecord&) override {}
  void OnCollective(const gpu::CollectiveRecord&) override {}
  void OnProxyOp(const gpu::ProxyOpRecord&) override {}
  void OnKernel(const gpu::KernelRecord& r) override { kernels.push_back(r); }
  std::vector<gpu::KernelRecord> kernels;
};

class InjectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/fabricscope-cupti-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::vector<std::string> FakeEnv(const char* mode) const {
    return {std::string("LD_LIBRARY_PATH=") + FABRICSCOPE_FAKE_CUPTI_DIR,
            std::string("FAKE_CUPTI_MODE=") + mode, "FABRICSCOPE_GPU_SOCKET=" + socket()};
  }
  std::string socket() const { return dir_ + "/gpu.sock"; }
  std::string dir_;
};

// Lines of `text` that contain every one of `parts`, in this order.
int CountLines(const std::string& text, const std::vector<std::string>& parts) {
  int count = 0;
  size_t begin = 0;
  while (begin < text.size()) {
    size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    size_t at = 0;
    bool all = true;
    for (const std::string& part : parts) {
      at = line.find(part, at);
      if (at == std::string::npos) {
        all = false;
        break;
      }
      at += part.size();
    }
    count += all ? 1 : 0;
    begin = end + 1;
  }
  return count;
}

const std::vector<std::string> kStandDown = {"fabricscope-cupti: ", "; standing down"};

TEST_F(InjectionTest, NoCudaDriverStandsDownAndTheProcessExitsCleanly) {
  if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
      driver != nullptr || (driver = dlopen("libcuda.so.1", RTLD_LAZY)) != nullptr) {
    dlclose(driver);
    GTEST_SKIP() << "a CUDA driver is installed here; this test is for machines without one";
  }
  FakeAgent agent(socket());
  const ProbeResult r = RunProbe({"FABRICSCOPE_GPU_SOCKET=" + socket()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // libcupti cannot load libcuda.so.1: cuptiSubscribe fails (CUPTI_ERROR_UNKNOWN with CUDA 13.0).
  EXPECT_EQ(CountLines(r.output, {"cuptiSubscribe failed", "; standing down"}), 1) << r.output;
  EXPECT_EQ(CountLines(r.output, kStandDown), 1) << "one line, once: " << r.output;
  EXPECT_EQ(CountLines(r.output, {"InitializeInjection returned 1"}), 2) << r.output;
  EXPECT_TRUE(agent.ReadAll().empty()) << "nothing is sent after standing down";
}

TEST_F(InjectionTest, StubDriverStandsDown) {
  const std::string stub = FABRICSCOPE_CUDA_STUB_LIBCUDA;
  if (stub.empty() || !fs::exists(stub)) GTEST_SKIP() << "no stubs/libcuda.so in the toolkit";
  // The toolkit's link-time stub, installed as the driver: every driver call fails.
  fs::create_symlink(stub, dir_ + "/libcuda.so.1");
  const ProbeResult r = RunProbe({"LD_LIBRARY_PATH=" + dir_});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(CountLines(r.output, kStandDown), 1) << r.output;
}

TEST_F(InjectionTest, AnotherCuptiClientMakesItStandDown) {
  FakeAgent agent(socket());
  const ProbeResult r = RunProbe(FakeEnv("multiple"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(CountLines(r.output,
                       {"another CUPTI client already holds the subscription", "; standing down"}),
            1)
      << r.output;
  EXPECT_TRUE(agent.ReadAll().empty());
}

TEST_F(InjectionTest, FailureAfterSubscribingStandsDown) {
  const ProbeResult r = RunProbe(FakeEnv("fail_enable"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(
      CountLines(r.output, {"cuptiActivityEnable(CONCURRENT_KERNEL) failed", "; standing down"}), 1)
      << r.output;
}

TEST_F(InjectionTest, KernelsReachTheAgentOnTheMonotonicClock) {
  // More than one 64 KiB datagram (292 records) and one 64 KiB buffer (303 records) hold: buffer 1
  // gives a full datagram and one of 11 records, buffer 2 one of 97. The fake agent reads after
  // the probe exits, so all of them wait in the socket (bounded by the sender's SO_SNDBUF, 208 KiB
  // by default): keep the total well below it.
  constexpr int kKernels = 400;
  FakeAgent agent(socket());
  std::vector<std::string> env = FakeEnv("trace");
  env.push_back("FAKE_CUPTI_KERNELS=" + std::to_string(kKernels));
  env.push_back("FAKE_CUPTI_DROPPED=11");
  env.push_back("FABRICSCOPE_CUPTI_BUFFERS=2");
  env.push_back("FABRICSCOPE_CUPTI_BUFFER_KB=64");  // 303 kernel records per buffer
  env.push_back("FABRICSCOPE_CUPTI_VERBOSE=1");
  const int64_t before = MonotonicNs();
  const ProbeResult r = RunProbe(env);
  const int64_t after = MonotonicNs();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(CountLines(r.output, kStandDown), 0) << r.output;
  EXPECT_EQ(CountLines(r.output, {"fabricscope-cupti: tracing kernels, 2 x 64 KiB"}), 1)
      << r.output;

  Collect visitor;
  uint64_t last_dropped = 0;
  const auto datagrams = agent.ReadAll();
  ASSERT_GE(datagrams.size(), 2u);
  for (const auto& d : datagrams) {
    gpu::DecodeResult result;
    ASSERT_TRUE(gpu::DecodeDatagram(d, visitor, &result).ok());
    EXPECT_EQ(result.header.source, static_cast<uint16_t>(gpu::Source::kCupti));
    EXPECT_GT(result.header.pid, 0);
    last_dropped = result.header.dropped_records_total;
  }
  EXPECT_EQ(last_dropped, 11u) << "CUPTI's dropped records reach the agent";
  ASSERT_EQ(visitor.kernels.size(), static_cast<size_t>(kKernels));
  int nccl = 0;
  for (int i = 0; i < kKernels; ++i) {
    const gpu::KernelRecord& k = visitor.kernels[i];
    ASSERT_EQ(k.correlation_id, static_cast<uint64_t>(100 + i));
    // Stamped by our timestamp callback, so on this process's CLOCK_MONOTONIC.
    ASSERT_GE(k.start_ns, before);
    ASSERT_LE(k.start_ns, after);
    ASSERT_EQ(k.end_ns - k.start_ns, 1000 + i);
    ASSERT_EQ(k.kind, static_cast<uint8_t>(gpu::ActivityKind::kKernel)) << "memcpy is off";
    nccl += k.is_nccl;
    if (i % 2 == 1) {
      EXPECT_EQ(FixedString(k.name),
                "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)");
      EXPECT_EQ(k.graph_id, 42u);
    }
  }
  EXPECT_EQ(nccl, kKernels / 2);
  EXPECT_EQ(
      FixedString(visitor.kernels[0].name).rfind("void at::native::vectorized_elementwise", 0), 0u);
  EXPECT_EQ(CountLines(r.output, {"exit: 400 kernels, 0 memcpys, 400 records sent in 3 datagrams",
                                  "11 dropped (cupti 11, channel 0)"}),
            1)
      << r.output;
}

TEST_F(InjectionTest, ContextDestructionFlushesRecordsAndItsDrops) {
  FakeAgent agent(socket());
  std::vector<std::string> env = FakeEnv("trace");
  env.push_back("FAKE_CUPTI_KERNELS=20");
  env.push_back("FAKE_CUPTI_DROPPED=2");
  env.push_back("FAKE_CUPTI_CONTEXT_DROPPED=5");
  env.push_back("PROBE_DESTROY_CONTEXT=1");  // then _exit: no atexit flush
  const ProbeResult r = RunProbe(env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Collect visitor;
  uint64_t last_dropped = 0;
  for (const auto& d : agent.ReadAll()) {
    gpu::DecodeResult result;
    ASSERT_TRUE(gpu::DecodeDatagram(d, visitor, &result).ok());
    last_dropped = result.header.dropped_records_total;
  }
  EXPECT_EQ(visitor.kernels.size(), 20u);
  EXPECT_EQ(last_dropped, 7u) << "the global queue's and the destroyed context's drops";
}

TEST_F(InjectionTest, MemcpyRecordsOnlyWhenEnabled) {
  FakeAgent agent(socket());
  std::vector<std::string> env = FakeEnv("trace");
  env.push_back("FAKE_CUPTI_KERNELS=3");
  env.push_back("FABRICSCOPE_CUPTI_MEMCPY=1");
  const ProbeResult r = RunProbe(env);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Collect visitor;
  for (const auto& d : agent.ReadAll()) {
    gpu::DecodeResult result;
    ASSERT_TRUE(gpu::DecodeDatagram(d, visitor, &result).ok());
  }
  int memcpys = 0;
  for (const auto& k : visitor.kernels) {
    if (k.kind != static_cast<uint8_t>(gpu::ActivityKind::kMemcpy)) continue;
    ++memcpys;
    EXPECT_EQ(k.bytes, 4096u);
    EXPECT_EQ(FixedString(k.name), "[memcpy HtoD]");
  }
  EXPECT_EQ(visitor.kernels.size(), 6u);
  EXPECT_EQ(memcpys, 3);
}

TEST_F(InjectionTest, AbsentAgentCostsCountedDropsOnly) {
  std::vector<std::string> env = FakeEnv("trace");  // nobody listens on the socket
  env.push_back("FAKE_CUPTI_KERNELS=50");
  env.push_back("FABRICSCOPE_CUPTI_VERBOSE=1");
  const ProbeResult r = RunProbe(env);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(CountLines(r.output, {"exit: 50 kernels, 0 memcpys, 0 records sent in 0 datagrams ",
                                  " 50 dropped (cupti 0, channel 50)"}),
            1)
      << r.output;
}

}  // namespace
}  // namespace fabricscope::collectors::cupti
