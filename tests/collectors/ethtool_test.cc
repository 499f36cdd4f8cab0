#include "collectors/ethtool.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <linux/ethtool.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <sched.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "tests/common/fake_tree.h"
#include "tests/common/wait.h"

extern char** environ;

namespace fabricscope::collectors {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

TEST(IsDefaultRoceStat, PerPriorityAndPortLevelNames) {
  for (int p = 0; p < 8; ++p) {
    const std::string rx = "rx_prio" + std::to_string(p) + "_";
    const std::string tx = "tx_prio" + std::to_string(p) + "_";
    for (const char* k : {"bytes", "packets", "pause", "pause_duration", "pause_transition",
                          "discards", "buf_discard", "cong_discard", "marked"}) {
      EXPECT_TRUE(IsDefaultRoceStat(rx + k)) << rx + k;
    }
    for (const char* k : {"bytes", "packets", "pause", "pause_duration"}) {
      EXPECT_TRUE(IsDefaultRoceStat(tx + k)) << tx + k;
    }
    // Receive-only kinds are not transmit stats.
    EXPECT_FALSE(IsDefaultRoceStat(tx + "discards"));
    EXPECT_FALSE(IsDefaultRoceStat(tx + "pause_transition"));
  }
  for (const char* s :
       {"rx_pause_ctrl_phy", "tx_pause_ctrl_phy", "rx_discards_phy", "tx_discards_phy",
        "rx_out_of_buffer", "rx_buffer_passed_thres_phy", "tx_pause_storm_warning_events",
        "tx_pause_storm_error_events", "rx_crc_errors_phy", "rx_symbol_err_phy",
        "rx_corrected_bits_phy", "rx_bits_phy", "link_down_events_phy"}) {
    EXPECT_TRUE(IsDefaultRoceStat(s)) << s;
  }
  for (const char* s : {"rx_bytes", "rx_packets_phy", "peer_ifindex", "rx_queue_0_xdp_packets",
                        "rx_prio8_bytes", "rx_prio0_xoff", ""}) {
    EXPECT_FALSE(IsDefaultRoceStat(s)) << s;
  }
}

TEST(EthtoolCollector, MissingInterfacesAreNotesNotCrashes) {
  std::vector<std::string> notes;
  auto c = EthtoolCollector::Open({"fsnosuch0", "fsnosuch0", "", "an-interface-name-too-long"},
                                  EthtoolSelection{.all = true}, 1, &notes);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition) << c.status();
  ASSERT_EQ(notes.size(), 3u);  // the repeated name is opened once
  EXPECT_THAT(notes[0], HasSubstr("fsnosuch0: no ethtool stats"));
  EXPECT_THAT(notes[0], HasSubstr("No such device"));
  EXPECT_THAT(notes[1], HasSubstr("not an interface name"));
  EXPECT_THAT(notes[2], HasSubstr("not an interface name"));
}

TEST(EthtoolCollector, NoInterfacesIsFailedPrecondition) {
  auto c = EthtoolCollector::Open({}, EthtoolSelection{}, 1, nullptr);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
}

// ---- Real kernel objects: a veth pair in a network namespace of our own. ----

// iproute2's ip(8); posix_spawn does not search PATH.
std::string IpBinary() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

// Runs a command (absolute path, no shell) to completion; returns its exit status (-1 if it
// could not start) and, in *output, what it printed on stdout and stderr.
int RunCommand(std::vector<std::string> argv, std::string* output = nullptr) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return -1;
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&fa, fds[1], STDERR_FILENO);
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  if (output != nullptr) *output = out;
  if (rc != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A network namespace "fs-eth-<pid>" holding a veth pair va (10.214.0.1/30) <-> vb
// (10.214.0.2/30), both up, each with `queues` receive and transmit queues. Deleted (with the
// veth) when the object goes away.
class VethNamespace {
 public:
  VethNamespace() : name_("fs-eth-" + std::to_string(getpid())) {}
  ~VethNamespace() {
    if (created_) RunCommand({IpBinary(), "netns", "del", name_});
  }
  VethNamespace(const VethNamespace&) = delete;
  VethNamespace& operator=(const VethNamespace&) = delete;

  // Empty on success, else why the namespace could not be set up.
  std::string Create(int queues) {
    if (IpBinary().empty()) return "no ip(8) binary";
    std::string out;
    RunCommand({IpBinary(), "netns", "del", name_});  // left over from a killed run
    if (RunCommand({IpBinary(), "netns", "add", name_}, &out) != 0) {
      return "ip netns add: " + out;
    }
    created_ = true;
    const std::string q = std::to_string(queues);
    const std::vector<std::vector<std::string>> steps = {
        {"link", "add", "va", "numrxqueues", q, "numtxqueues", q, "type", "veth", "peer", "name",
         "vb", "numrxqueues", q, "numtxqueues", q},
        {"addr", "add", "10.214.0.1/30", "dev", "va"},
        {"addr", "add", "10.214.0.2/30", "dev", "vb"},
        {"link", "set", "va", "up"},
        {"link", "set", "vb", "up"},
    };
    for (const auto& step : steps) {
      std::vector<std::string> argv = {IpBinary(), "-n", name_};
      argv.insert(argv.end(), step.begin(), step.end());
      if (RunCommand(argv, &out) != 0) return "ip " + step[0] + " " + step[1] + ": " + out;
    }
    return "";
  }

  const std::string& name() const { return name_; }

  // Runs fn on a helper thread that has joined the namespace (setns(2) changes only the calling
  // thread); this process's other threads stay where they are. Sockets opened by fn stay bound
  // to the namespace after the thread ends. Returns false if setns failed.
  bool RunInside(const std::function<void()>& fn) const {
    bool entered = false;
    std::thread t([&] {
      const int fd = open(("/run/netns/" + name_).c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return;
      entered = setns(fd, CLONE_NEWNET) == 0;
      close(fd);
      if (entered) fn();
    });
    t.join();
    return entered;
  }

 private:
  std::string name_;
  bool created_ = false;
};

// Sets a legacy on/off offload (ETHTOOL_STSO, ETHTOOL_SGRO) through SIOCETHTOOL.
bool SetOffload(int fd, const char* ifname, uint32_t cmd, bool on) {
  ethtool_value v{cmd, on ? 1u : 0u};
  ifreq ifr;
  std::memset(&ifr, 0, sizeof(ifr));
  std::strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
  ifr.ifr_data = reinterpret_cast<char*>(&v);
  return ioctl(fd, SIOCETHTOOL, &ifr) == 0;
}

// Sets the active receive and transmit queue counts (ETHTOOL_GCHANNELS / ETHTOOL_SCHANNELS).
// veth has 1 + 7 x rx + 2 x tx ETH_SS_STATS entries (drivers/net/veth.c veth_get_sset_count).
bool SetChannels(int fd, const char* ifname, uint32_t count) {
  ethtool_channels ch;
  std::memset(&ch, 0, sizeof(ch));
  ch.cmd = ETHTOOL_GCHANNELS;
  ifreq ifr;
  std::memset(&ifr, 0, sizeof(ifr));
  std::strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
  ifr.ifr_data = reinterpret_cast<char*>(&ch);
  if (ioctl(fd, SIOCETHTOOL, &ifr) != 0) return false;
  ch.cmd = ETHTOOL_SCHANNELS;
  ch.rx_count = count;
  ch.tx_count = count;
  return ioctl(fd, SIOCETHTOOL, &ifr) == 0;
}

// Sends `n` broadcast frames of an experimental EtherType (IEEE 802 local 0x88B5) out of
// `ifname` with an AF_PACKET socket; they arrive on the veth peer and go nowhere else.
int SendFrames(const char* ifname, int n) {
  const int fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_ll to;
  std::memset(&to, 0, sizeof(to));
  to.sll_family = AF_PACKET;
  to.sll_ifindex = static_cast<int>(if_nametoindex(ifname));
  to.sll_halen = ETH_ALEN;
  std::memset(to.sll_addr, 0xff, ETH_ALEN);
  unsigned char frame[64];
  std::memset(frame, 'f', sizeof(frame));
  std::memset(frame, 0xff, ETH_ALEN);                                  // destination
  const unsigned char src[ETH_ALEN] = {0x02, 0, 0, 0x21, 0x40, 0x01};  // locally administered
  std::memcpy(frame + ETH_ALEN, src, ETH_ALEN);
  frame[12] = 0x88;
  frame[13] = 0xb5;
  int sent = 0;
  for (int i = 0; i < n; ++i) {
    if (sendto(fd, frame, sizeof(frame), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to)) ==
        static_cast<ssize_t>(sizeof(frame))) {
      ++sent;
    }
  }
  close(fd);
  return sent;
}

// Index of counter `name` of port `device` in sample order, or -1.
int CounterIndex(const Collector& c, const std::string& device, const std::string& name) {
  int i = 0;
  for (const PortDescriptor& p : c.ports()) {
    for (const CounterDescriptor& d : p.counters) {
      if (p.device == device && d.name == name) return i;
      ++i;
    }
  }
  return -1;
}

class EthtoolVethTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for a network namespace and a veth pair";
    const std::string why = ns_.Create(Queues());
    if (!why.empty()) GTEST_SKIP() << "network namespace / veth unavailable: " << why;
  }
  virtual int Queues() const { return 1; }
  VethNamespace ns_;
};

// The same with four queues per veth end, whose active count ETHTOOL_SCHANNELS changes.
class EthtoolVethQueuesTest : public EthtoolVethTest {
 protected:
  int Queues() const override { return 4; }
};

TEST_F(EthtoolVethTest, ReadsVethStatsUntilTheInterfaceVanishes) {
  testing::FakeTree sysfs;  // dev_port comes from <sysfs_root>/class/net/<if>/dev_port
  sysfs.Write("class/net/vb/dev_port", "1\n");
  std::vector<std::string> notes;
  absl::StatusOr<std::unique_ptr<EthtoolCollector>> c;
  absl::StatusOr<std::unique_ptr<EthtoolCollector>> roce_only;
  std::vector<std::string> roce_notes;
  unsigned vb_index = 0;
  ASSERT_TRUE(ns_.RunInside([&] {
    // veth counts received frames in its NAPI path only (drivers/net/veth.c): GRO on vb, and
    // no TSO on va so its frames qualify for that path.
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    EXPECT_TRUE(SetOffload(fd, "va", ETHTOOL_STSO, false)) << strerror(errno);
    EXPECT_TRUE(SetOffload(fd, "vb", ETHTOOL_SGRO, true)) << strerror(errno);
    close(fd);
    vb_index = if_nametoindex("vb");
    c = EthtoolCollector::Open({"va", "lo", "vb", "fsnosuch0"}, EthtoolSelection{.all = true}, 1,
                               &notes, sysfs.root());
    roce_only = EthtoolCollector::Open({"va"}, EthtoolSelection{}, 1, &roce_notes, sysfs.root());
  }));
  ASSERT_TRUE(c.ok()) << c.status();
  EthtoolCollector& col = **c;

  // lo has no ETH_SS_STATS; fsnosuch0 does not exist: notes, not errors.
  ASSERT_EQ(notes.size(), 2u) << ::testing::PrintToString(notes);
  EXPECT_THAT(notes[0], HasSubstr("lo: no ethtool stats"));
  EXPECT_THAT(notes[1], HasSubstr("fsnosuch0: no ethtool stats"));
  // The default (mlx5 RoCE) selection finds nothing on a veth.
  EXPECT_EQ(roce_only.status().code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_EQ(roce_notes.size(), 1u);
  EXPECT_THAT(roce_notes[0], HasSubstr("va: none of its"));

  ASSERT_EQ(col.ports().size(), 2u);
  const PortDescriptor& va = col.ports()[0];
  const PortDescriptor& vb = col.ports()[1];
  EXPECT_EQ(va.device, "va");
  EXPECT_EQ(va.port, 0u);  // no dev_port file in the fake sysfs: 0
  EXPECT_EQ(vb.device, "vb");
  EXPECT_EQ(vb.port, 1u);
  EXPECT_FALSE(va.rdma);
  std::vector<std::string> names;
  for (const CounterDescriptor& d : va.counters) {
    names.push_back(d.name);
    EXPECT_EQ(d.group, "ethtool");
    EXPECT_EQ(d.role, CounterRole::kOther);
    EXPECT_EQ(d.spec.width_bits, 64);
    EXPECT_EQ(d.spec.behavior, CounterBehavior::kWrapping);
    EXPECT_EQ(d.spec.scale, 1u);
    EXPECT_TRUE(d.path.empty());
    EXPECT_EQ(d.tick_divisor, 1u);
  }
  EXPECT_THAT(names, Contains("peer_ifindex"));
  EXPECT_THAT(names, Contains("rx_queue_0_xdp_packets"));
  EXPECT_EQ(col.counter_count(), va.counters.size() + vb.counters.size());

  std::vector<uint64_t> values(col.counter_count());
  std::vector<ReadStatus> status(col.counter_count());
  col.Sample(0, values.data(), status.data());
  for (size_t i = 0; i < status.size(); ++i) EXPECT_EQ(status[i], ReadStatus::kOk) << i;
  const int peer = CounterIndex(col, "va", "peer_ifindex");
  ASSERT_GE(peer, 0);
  EXPECT_EQ(values[peer], vb_index);  // the value at the right index of the driver's array
  EXPECT_GT(col.ReadCostNs(static_cast<size_t>(peer)), 0.0);  // tick 0 is measured

  const int rx = CounterIndex(col, "vb", "rx_queue_0_xdp_packets");
  ASSERT_GE(rx, 0);
  const uint64_t before = values[rx];
  int sent = 0;
  ASSERT_TRUE(ns_.RunInside([&] { sent = SendFrames("va", 5); }));
  ASSERT_EQ(sent, 5);
  uint64_t tick = 1;
  EXPECT_TRUE(testing::WaitFor(
      [&] {
        col.Sample(tick++, values.data(), status.data());
        return status[rx] == ReadStatus::kOk && values[rx] >= before + 5;
      },
      std::chrono::seconds(5)))
      << "vb rx_queue_0_xdp_packets " << before << " -> " << values[rx];

  // Deleting va removes its peer too: both read kError (ENODEV), nothing crashes.
  std::string out;
  ASSERT_EQ(RunCommand({IpBinary(), "-n", ns_.name(), "link", "del", "va"}, &out), 0) << out;
  col.Sample(tick++, values.data(), status.data());
  for (size_t i = 0; i < status.size(); ++i) EXPECT_EQ(status[i], ReadStatus::kError) << i;
}

TEST_F(EthtoolVethTest, TickDivisorAndReadCost) {
  absl::StatusOr<std::unique_ptr<EthtoolCollector>> c;
  ASSERT_TRUE(ns_.RunInside(
      [&] { c = EthtoolCollector::Open({"va"}, EthtoolSelection{.all = true}, 4, nullptr); }));
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<uint64_t> values((*c)->counter_count());
  std::vector<ReadStatus> status((*c)->counter_count());
  EXPECT_EQ((*c)->ports()[0].counters[0].tick_divisor, 4u);
  (*c)->Sample(1, values.data(), status.data());
  for (ReadStatus s : status) EXPECT_EQ(s, ReadStatus::kNotRead);
  EXPECT_EQ((*c)->ReadCostNs(0), 0.0);  // nothing measured yet
  (*c)->Sample(64, values.data(), status.data());
  for (ReadStatus s : status) EXPECT_EQ(s, ReadStatus::kOk);
  EXPECT_GT((*c)->ReadCostNs(0), 0.0);
}

// Before kernel commit 7b07be1ff1cb (v6.19) GSTATS writes as many stats as the driver has now,
// whatever n_stats says (net/ethtool/ioctl.c ethtool_get_stats); newer kernels answer n_stats 0.
// Either way a grown or shrunk set is a read error, never an overrun or shifted values.
TEST_F(EthtoolVethQueuesTest, ChangedStatCountIsAReadErrorNotAnOverrun) {
  int fd = -1;
  absl::StatusOr<std::unique_ptr<EthtoolCollector>> c;
  ASSERT_TRUE(ns_.RunInside([&] {
    fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);  // stays in the namespace
    ASSERT_TRUE(SetChannels(fd, "va", 2)) << strerror(errno);
    c = EthtoolCollector::Open({"va"}, EthtoolSelection{.all = true}, 1, nullptr);
  }));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)->counter_count(), 1u + 7 * 2 + 2 * 2);
  std::vector<uint64_t> values((*c)->counter_count());
  std::vector<ReadStatus> status((*c)->counter_count());
  auto all_are = [&](ReadStatus want) {
    for (ReadStatus s : status) {
      if (s != want) return false;
    }
    return true;
  };
  (*c)->Sample(0, values.data(), status.data());
  EXPECT_TRUE(all_are(ReadStatus::kOk));

  ASSERT_TRUE(SetChannels(fd, "va", 4)) << strerror(errno);  // 37 stats: grown
  (*c)->Sample(1, values.data(), status.data());
  EXPECT_TRUE(all_are(ReadStatus::kError));
  ASSERT_TRUE(SetChannels(fd, "va", 1)) << strerror(errno);  // 10 stats: shrunk
  (*c)->Sample(2, values.data(), status.data());
  EXPECT_TRUE(all_are(ReadStatus::kError));
  ASSERT_TRUE(SetChannels(fd, "va", 2)) << strerror(errno);  // as at Open again
  (*c)->Sample(3, values.data(), status.data());
  EXPECT_TRUE(all_are(ReadStatus::kOk));
  close(fd);
}

}  // namespace
}  // namespace fabricscope::collectors
