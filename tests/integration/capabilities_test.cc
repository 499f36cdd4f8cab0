// The real agent, started as root, keeps only the capabilities it uses (agent/privileges.h):
// none without packet capture, CAP_NET_RAW with it, in every one of its threads. Read from the
// running process's /proc/PID/task/*/status.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/common/fake_tree.h"
#include "tests/common/subprocess.h"

namespace fabricscope::testing {
namespace {

using namespace std::chrono_literals;

uint64_t CapMask(const std::string& status_path, const std::string& field) {
  std::ifstream in(status_path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      return std::stoull(line.substr(field.size() + 1), nullptr, 16);
    }
  }
  return ~uint64_t{0};
}

TEST(AgentCapabilities, OnlyNetRawAndOnlyWhileCapturing) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: the agent has no capabilities to drop";
  FakeTree tree;
  tree.AddNetdev("eth0", "10000", 100);
  tree.Write("agent.yaml", "");
  for (bool capture : {false, true}) {
    std::vector<std::string> argv = {FABRICSCOPE_AGENT_BIN,
                                     "--config=" + tree.Path("agent.yaml"),
                                     "--sysfs-root=" + tree.root(),
                                     "--procfs-root=" + tree.root(),
                                     "--http-listen=127.0.0.1:0",
                                     "--status=off",
                                     "--gpu-socket=off",
                                     "--tcp=false"};
    if (capture) argv.push_back("--capture=lo");  // passive: nothing is sent
    Subprocess agent(argv);
    ASSERT_TRUE(agent.Start());
    ASSERT_TRUE(agent.WaitForLine(std::regex("capabilities kept: "), 10s)) << agent.Output();
    ASSERT_TRUE(agent.WaitForLine(std::regex("serving http://"), 10s)) << agent.Output();
    const uint64_t want = capture ? uint64_t{1} << 13 : 0;  // CAP_NET_RAW is 13
    // Capabilities are per thread: every one of the agent's threads (samplers, pipeline, HTTP,
    // capture) must hold no more.
    size_t threads = 0;
    for (const auto& task :
         std::filesystem::directory_iterator("/proc/" + std::to_string(agent.pid()) + "/task")) {
      const std::string status = task.path().string() + "/status";
      for (const char* field : {"CapEff", "CapPrm", "CapBnd"}) {
        EXPECT_EQ(CapMask(status, field), want)
            << field << " of thread " << task.path().filename() << ", capture " << capture;
      }
      ++threads;
    }
    EXPECT_GT(threads, 3u);
  }
}

}  // namespace
}  // namespace fabricscope::testing
