// The daemons under a fake service manager: the test binds the unix datagram socket systemd
// would pass as $NOTIFY_SOCKET, sets $WATCHDOG_USEC, runs the real binaries and reads what they
// send (sd_notify(3)): READY=1, periodic WATCHDOG=1, RELOADING=1 then READY=1 on SIGHUP,
// STOPPING=1 on SIGTERM; and an agent whose sampler threads stall stops pinging.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/common/fake_tree.h"
#include "tests/common/subprocess.h"
#include "tests/common/wait.h"

namespace fabricscope::testing {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// $WATCHDOG_USEC given to the daemons: they ping every half of it.
constexpr int64_t kWatchdogUsec = 1'000'000;

// What systemd's manager does with $NOTIFY_SOCKET: receives one datagram per sd_notify call.
class FakeServiceManager {
 public:
  explicit FakeServiceManager(const std::string& path) : path_(path) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
    bound_ = fd_ >= 0 && bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  }
  ~FakeServiceManager() {
    if (fd_ >= 0) close(fd_);
  }
  bool bound() const { return bound_; }
  const std::string& path() const { return path_; }

  struct Message {
    Clock::time_point at;
    std::string text;
  };

  // Receives until a message contains `needle` (returning its index in messages()), or -1 at
  // timeout.
  int WaitFor(const std::string& needle, std::chrono::milliseconds timeout) {
    for (size_t i = scanned_; i < messages_.size(); ++i) {
      if (absl::StrContains(messages_[i].text, needle)) return Found(i);
    }
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (!ReceiveOne(deadline)) continue;
      if (absl::StrContains(messages_.back().text, needle)) return Found(messages_.size() - 1);
    }
    scanned_ = messages_.size();
    return -1;
  }
  // Receives whatever arrives during `span`.
  void Collect(std::chrono::milliseconds span) {
    const auto deadline = Clock::now() + span;
    while (Clock::now() < deadline) ReceiveOne(deadline);
  }
  const std::vector<Message>& messages() const { return messages_; }
  std::string All() const {
    std::string s;
    for (const Message& m : messages_) s += "[" + m.text + "]\n";
    return s;
  }

 private:
  int Found(size_t i) {
    scanned_ = i + 1;
    return static_cast<int>(i);
  }
  bool ReceiveOne(Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd_, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
    char buf[4096];
    const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    messages_.push_back({Clock::now(), std::string(buf, static_cast<size_t>(n))});
    return true;
  }

  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
  std::vector<Message> messages_;
  size_t scanned_ = 0;  // WaitFor looks at messages after the last one it returned
};

// Indices of WATCHDOG=1 messages in [from, to).
std::vector<size_t> Pings(const FakeServiceManager& m, size_t from, size_t to) {
  std::vector<size_t> out;
  for (size_t i = from; i < to && i < m.messages().size(); ++i) {
    if (m.messages()[i].text == "WATCHDOG=1") out.push_back(i);
  }
  return out;
}

// Three pings in a row, each within $WATCHDOG_USEC of the previous one (systemd's deadline).
void ExpectPeriodicPings(FakeServiceManager& m) {
  const int first = m.WaitFor("WATCHDOG=1", 5s);
  ASSERT_GE(first, 0) << m.All();
  auto prev = m.messages()[static_cast<size_t>(first)].at;
  for (int k = 0; k < 3; ++k) {
    const int i = m.WaitFor("WATCHDOG=1", 5s);
    ASSERT_GE(i, 0) << m.All();
    const auto at = m.messages()[static_cast<size_t>(i)].at;
    EXPECT_LT(std::chrono::duration_cast<std::chrono::microseconds>(at - prev).count(),
              kWatchdogUsec)
        << m.All();
    prev = at;
  }
}

// SIGHUP: RELOADING=1 first, READY=1 after it.
void ExpectReloadHandshake(FakeServiceManager& m, Subprocess& p) {
  p.Signal(SIGHUP);
  const int reloading = m.WaitFor("RELOADING=1", 10s);
  ASSERT_GE(reloading, 0) << m.All() << p.Output();
  EXPECT_TRUE(
      absl::StrContains(m.messages()[static_cast<size_t>(reloading)].text, "MONOTONIC_USEC="));
  ASSERT_GT(m.WaitFor("READY=1", 10s), reloading) << m.All() << p.Output();
}

void ExpectStoppingOnSigterm(FakeServiceManager& m, Subprocess& p) {
  p.Signal(SIGTERM);
  EXPECT_GE(m.WaitFor("STOPPING=1", 10s), 0) << m.All();
  EXPECT_EQ(p.Wait(), 0) << p.Output();
}

void SetNotifyEnv(Subprocess& p, const FakeServiceManager& m) {
  p.SetEnv("NOTIFY_SOCKET", m.path());
  p.SetEnv("WATCHDOG_USEC", std::to_string(kWatchdogUsec));
}

TEST(Notify, AggregatorReadyWatchdogReloadStopping) {
  FakeTree tree;
  tree.Write("aggregator.yaml", "grpc_listen: 127.0.0.1:0\nhttp_listen: 127.0.0.1:0\n");
  FakeServiceManager m(tree.Path("notify"));
  ASSERT_TRUE(m.bound());
  Subprocess p({FABRICSCOPE_AGGREGATOR_BIN, "--config=" + tree.Path("aggregator.yaml")});
  SetNotifyEnv(p, m);
  ASSERT_TRUE(p.Start());
  const int ready = m.WaitFor("READY=1", 10s);
  ASSERT_GE(ready, 0) << m.All() << p.Output();
  // The status names the bound ports, as printed on stdout.
  auto line = p.WaitForLine(std::regex("listening (grpc=\\S+ http=\\S+)"), 5s);
  ASSERT_TRUE(line) << p.Output();
  EXPECT_TRUE(absl::StrContains(m.messages()[static_cast<size_t>(ready)].text,
                                absl::StrCat("STATUS=listening ", (*line)[1].str())))
      << m.All();
  ExpectPeriodicPings(m);
  ExpectReloadHandshake(m, p);
  ExpectStoppingOnSigterm(m, p);
}

TEST(Notify, DaemonsRunUnchangedWithoutNotifySocket) {
  FakeTree tree;
  tree.Write("aggregator.yaml", "grpc_listen: 127.0.0.1:0\nhttp_listen: 127.0.0.1:0\n");
  Subprocess p({FABRICSCOPE_AGGREGATOR_BIN, "--config=" + tree.Path("aggregator.yaml")});
  p.UnsetEnv("NOTIFY_SOCKET");
  p.UnsetEnv("WATCHDOG_USEC");
  ASSERT_TRUE(p.Start());
  ASSERT_TRUE(p.WaitForLine(std::regex("listening grpc="), 10s)) << p.Output();
  p.Signal(SIGHUP);
  ASSERT_TRUE(p.WaitForLine(std::regex("reloaded, listening"), 10s)) << p.Output();
  EXPECT_EQ(p.Stop(SIGTERM), 0) << p.Output();
  EXPECT_FALSE(absl::StrContains(p.Output(), "sd_notify")) << p.Output();
  EXPECT_FALSE(absl::StrContains(p.Output(), "WATCHDOG")) << p.Output();
}

// The threads of `pid` named `comm`.
std::vector<pid_t> Threads(pid_t pid, const std::string& comm) {
  std::vector<pid_t> out;
  const std::string dir = absl::StrCat("/proc/", pid, "/task");
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(dir + "/" + e->d_name + "/comm");
    std::string name;
    std::getline(f, name);
    if (name == comm) out.push_back(static_cast<pid_t>(std::stoi(e->d_name)));
  }
  closedir(d);
  return out;
}

// Stops single threads with ptrace (PTRACE_SEIZE + PTRACE_INTERRUPT stop one thread, not its
// process): from the agent's side indistinguishable from a sampler blocked in a driver read.
// Detaching lets them run again.
class ThreadFreezer {
 public:
  ~ThreadFreezer() { Thaw(); }
  // Returns an error text, or "" when every thread is stopped.
  std::string Freeze(const std::vector<pid_t>& tids) {
    for (pid_t t : tids) {
      if (ptrace(PTRACE_SEIZE, t, nullptr, nullptr) != 0) {
        return absl::StrCat("PTRACE_SEIZE ", t, ": ", strerror(errno));
      }
      frozen_.push_back(t);
      if (ptrace(PTRACE_INTERRUPT, t, nullptr, nullptr) != 0) {
        return absl::StrCat("PTRACE_INTERRUPT ", t, ": ", strerror(errno));
      }
      int status = 0;
      if (waitpid(t, &status, __WALL) != t || !WIFSTOPPED(status)) {
        return absl::StrCat("thread ", t, " did not stop");
      }
    }
    return "";
  }
  void Thaw() {
    for (pid_t t : frozen_) ptrace(PTRACE_DETACH, t, nullptr, nullptr);
    frozen_.clear();
  }

 private:
  std::vector<pid_t> frozen_;
};

TEST(Notify, AgentPingsWhileSamplersTickAndStopsWhenTheyStall) {
  FakeTree tree;
  tree.AddNetdev("eth0", "10000", 1000);
  tree.Write("agent.yaml", "node: notify-node\n");
  FakeServiceManager m(tree.Path("notify"));
  ASSERT_TRUE(m.bound());
  Subprocess p({FABRICSCOPE_AGENT_BIN, "--config=" + tree.Path("agent.yaml"),
                "--sysfs-root=" + tree.root(), "--procfs-root=" + tree.root(), "--interfaces=eth0",
                "--http-listen=127.0.0.1:0", "--status=off", "--gpu-socket=off"});
  SetNotifyEnv(p, m);
  ASSERT_TRUE(p.Start());
  const int ready = m.WaitFor("READY=1", 10s);
  ASSERT_GE(ready, 0) << m.All() << p.Output();
  EXPECT_TRUE(absl::StrContains(m.messages()[static_cast<size_t>(ready)].text,
                                "STATUS=standalone: serving http://127.0.0.1:"))
      << m.All();
  ExpectPeriodicPings(m);
  ExpectReloadHandshake(m, p);
  ExpectPeriodicPings(m);

  // Stall both sampler threads (fast and slow group).
  std::vector<pid_t> samplers;
  ASSERT_TRUE(WaitFor([&] { return (samplers = Threads(p.pid(), "fs-sampler")).size() == 2; }))
      << "sampler threads: " << samplers.size();
  {
    ThreadFreezer freezer;
    const std::string err = freezer.Freeze(samplers);
    if (absl::StrContains(err, "PTRACE_SEIZE")) GTEST_SKIP() << "ptrace not permitted: " << err;
    ASSERT_EQ(err, "");
    // The agent notices within max(3 periods, 2 s) plus one loop step and says why.
    const int stalled = m.WaitFor("made no tick", 10s);
    ASSERT_GE(stalled, 0) << m.All() << p.Output();
    // From then on no ping for two watchdog timeouts: systemd would kill and restart it.
    m.Collect(std::chrono::milliseconds(2 * kWatchdogUsec / 1000));
    EXPECT_TRUE(Pings(m, static_cast<size_t>(stalled) + 1, m.messages().size()).empty()) << m.All();
  }
  // Running again, the pings resume.
  ExpectPeriodicPings(m);
  ExpectStoppingOnSigterm(m, p);
}

}  // namespace
}  // namespace fabricscope::testing
