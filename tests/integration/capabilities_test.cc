// The real agent, started as root, keeps only the capabilities it uses once its sources are
// open (agent/privileges.h): none without packet capture, CAP_NET_RAW with it. Read from the
// running process's /proc/PID/status.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "tests/common/fake_tree.h"
#include "tests/common/subprocess.h"

namespace fabricscope::testing {
namespace {

using namespace std::chrono_literals;

uint64_t CapMask(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
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
    const uint64_t want = capture ? uint64_t{1} << 13 : 0;  // CAP_NET_RAW is 13
    EXPECT_EQ(CapMask(agent.pid(), "CapEff"), want) << "capture " << capture;
    EXPECT_EQ(CapMask(agent.pid(), "CapPrm"), want) << "capture " << capture;
    EXPECT_EQ(CapMask(agent.pid(), "CapBnd"), want) << "capture " << capture;
  }
}

}  // namespace
}  // namespace fabricscope::testing
