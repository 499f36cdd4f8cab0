// LLDP neighbours (agent/lldp_neighbors.h): lldpcli's json0 output as lldpd 1.0.16 prints it
// (recorded, tests/testdata/SOURCES.md), bad and hostile output, the port each neighbour goes
// to, and a real lldpd in each of two network namespaces joined by a veth pair, read through
// its own control socket: a neighbour that appears, one renamed while watched, a daemon that is
// absent at the first look and starts later, and one that goes away.
#include "agent/lldp_neighbors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/common/wait.h"

namespace fabricscope::agent {
namespace {

using testing::WaitFor;

std::string ReadLldpTestdata(const std::string& name) {
  std::ifstream in(std::string(FABRICSCOPE_TESTDATA) + "/lldp/" + name);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(LldpNeighbors, ParsesLldpdsJson0) {
  absl::StatusOr<NeighborMap> m =
      ParseLldpcliJson0(ReadLldpTestdata("lldpcli-1.0.16-json0-one-neighbor.json"));
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 1u);
  const v1::PortNeighbor& n = m->at("vla");
  EXPECT_EQ(n.source(), "lldp");
  EXPECT_EQ(n.chassis_name(), "leaf-b");
  EXPECT_EQ(n.chassis_id(), "06:f8:e7:5a:ef:1f");
  EXPECT_EQ(n.port_id(), "06:f8:e7:5a:ef:1f");
  EXPECT_EQ(n.port_description(), "vlb");
  EXPECT_EQ(n.management_address(), "fe80::4f8:e7ff:fe5a:ef1f");
  EXPECT_EQ(DescribeNeighbor(n), "leaf-b 06:f8:e7:5a:ef:1f (vlb)");

  absl::StatusOr<NeighborMap> none =
      ParseLldpcliJson0(ReadLldpTestdata("lldpcli-1.0.16-json0-no-neighbor.json"));
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_TRUE(none->empty());
}

TEST(LldpNeighbors, BadOutputIsAnErrorAndHostileTextIsCleaned) {
  for (const char* bad : {"", "not json", "[]", "{\"lldp\": {}}", "{\"other\": []}"}) {
    absl::StatusOr<NeighborMap> m = ParseLldpcliJson0(bad);
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  // An interface without a name, one of the wrong type, a switch sending control bytes and a
  // 300-byte name, one heard over CDP; a second neighbour of eth0 (a hub) does not replace the
  // first.
  const std::string long_name(300, 'x');
  const std::string json = absl::StrCat(
      R"({"lldp": [{"interface": [{"via": "LLDP"}, 7,
        {"name": "eth0", "chassis": [{"name": [{"value": "leaf\u0001\n3"}]}],
         "port": [{"id": [{"type": "ifname", "value": "Ethernet1/5"}]}]},
        {"name": "eth0", "chassis": [{"name": [{"value": "other"}]}]},
        {"name": "eth2", "via": "CDPv2", "chassis": [{"name": [{"value": "cisco-1"}]}]},
        {"name": "eth1", "chassis": [{"name": [{"value": ")",
      long_name, R"("}]}], "port": "not a list"}]}]})");
  absl::StatusOr<NeighborMap> m = ParseLldpcliJson0(json);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->size(), 3u);
  EXPECT_EQ(m->at("eth0").chassis_name(), "leaf??3");
  EXPECT_EQ(m->at("eth0").source(), "lldp");
  EXPECT_EQ(m->at("eth1").source(), "lldp");  // no "via": LLDP, lldpd's only default protocol
  EXPECT_EQ(m->at("eth2").source(), "cdpv2");
  EXPECT_EQ(m->at("eth0").port_id(), "Ethernet1/5");
  EXPECT_EQ(m->at("eth1").chassis_name(), std::string(255, 'x'));
  EXPECT_EQ(m->at("eth1").port_id(), "");

  // More interfaces than kMaxNeighborInterfaces: the rest are left out.
  std::string many = R"({"lldp": [{"interface": [)";
  for (size_t i = 0; i < kMaxNeighborInterfaces + 10; ++i) {
    absl::StrAppend(&many, i > 0 ? "," : "", R"({"name": "eth)", i, R"("})");
  }
  many += "]}]}";
  absl::StatusOr<NeighborMap> big = ParseLldpcliJson0(many);
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(big->size(), kMaxNeighborInterfaces);
}

TEST(LldpNeighbors, EachPortGetsItsInterfacesNeighbour) {
  NeighborMap map;
  map["eth2"].set_chassis_name("leaf-1");
  map["ens1f0"].set_chassis_name("leaf-2");
  std::vector<collectors::PortDescriptor> ports(4);
  ports[0].device = "mlx5_0";  // RoCE: its netdev's neighbour
  ports[0].rdma = true;
  ports[0].netdev = "ens1f0";
  ports[1].device = "mlx5_1";  // InfiniBand: no netdev, no LLDP
  ports[1].rdma = true;
  ports[2].device = "eth2";
  ports[3].device = "tcp";
  ports[3].node_level = true;
  v1::Batch b;
  for (uint32_t i = 0; i < 4; ++i) b.add_ports()->set_port_index(i);
  b.add_ports()->set_port_index(99);  // not a port of this agent: left alone
  AttachNeighbors(map, ports, &b);
  EXPECT_EQ(b.ports(0).neighbor().chassis_name(), "leaf-2");
  EXPECT_FALSE(b.ports(1).has_neighbor());
  EXPECT_EQ(b.ports(2).neighbor().chassis_name(), "leaf-1");
  EXPECT_FALSE(b.ports(3).has_neighbor());
  EXPECT_FALSE(b.ports(4).has_neighbor());
}

// Two namespaces joined by a veth pair, an lldpd in each on its own control socket (lldpd's
// -u; the socket is a file, reachable from this namespace). Needs root, iproute2 and lldpd.
class RealLldpd : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root for network namespaces";
    if (std::system("command -v lldpd >/dev/null && command -v lldpcli >/dev/null") != 0) {
      GTEST_SKIP() << "lldpd is not installed (deploy/install-deps.sh installs it)";
    }
    const std::string id = absl::StrCat(getpid() % 100000);
    ns_a_ = "fsl-a-" + id;
    ns_b_ = "fsl-b-" + id;
    if_a_ = "fsla" + id;
    if_b_ = "fslb" + id;
    char tmpl[] = "/tmp/fabricscope-lldp-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    // lldpcli, run as root, connects as lldpd's own user (_lldpd): the socket's folder must let
    // it through, as /run does for the default /run/lldpd.socket.
    ASSERT_EQ(chmod(tmpl, 0755), 0);
    ASSERT_EQ(
        Sh(absl::StrCat("ip netns add ", ns_a_, " && ip netns add ", ns_b_, " && ip link add ",
                        if_a_, " type veth peer name ", if_b_, " && ip link set ", if_a_, " netns ",
                        ns_a_, " && ip link set ", if_b_, " netns ", ns_b_, " && ip -n ", ns_a_,
                        " link set ", if_a_, " up && ip -n ", ns_b_, " link set ", if_b_, " up")),
        0);
  }
  void TearDown() override {
    if (ns_a_.empty()) return;
    KillLldpd(ns_a_);
    KillLldpd(ns_b_);
    Sh(absl::StrCat("ip netns del ", ns_a_, "; ip netns del ", ns_b_));
    if (!dir_.empty()) Sh("rm -rf '" + dir_ + "'");
  }
  static int Sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }
  std::string Socket(const std::string& ns) const { return dir_ + "/" + ns + ".sock"; }
  // lldpd in `ns`, daemonized (it forks its privileged monitor and, at start, an lldpcli for its
  // configuration), sending on `iface` every second. lldpd starts paused and does nothing
  // until a client says `resume` (lldpcli(8); the start-up lldpcli sends it after reading
  // /etc/lldpd.d): configured from a test at the same moment it sometimes stayed paused (1 run
  // in 8 here heard nothing for 20 s), so the test resumes it itself once it answers.
  void StartLldpd(const std::string& ns, const std::string& iface) {
    ASSERT_EQ(Sh(absl::StrCat("ip netns exec ", ns, " lldpd -u ", Socket(ns), " -I ", iface)), 0);
    ASSERT_TRUE(WaitFor([&] { return Lldpcli(ns, "resume") == 0; }))
        << "lldpd in " << ns << " never answered on " << Socket(ns);
    ASSERT_EQ(Lldpcli(ns, "configure lldp tx-interval 1"), 0);
  }
  // Every process in `ns` (its lldpd monitor and daemon: no pid file to go by), SIGKILL.
  static void KillLldpd(const std::string& ns) {
    Sh(absl::StrCat("ip netns pids ", ns, " | xargs -r kill -9"));
  }
  int Lldpcli(const std::string& ns, const std::string& args) const {
    return Sh(absl::StrCat("lldpcli -u ", Socket(ns), " ", args));
  }

  std::string ns_a_, ns_b_, if_a_, if_b_, dir_;
};

TEST_F(RealLldpd, NeighbourAppearsChangesAndGoes) {
  LldpWatcher::Options o;
  o.socket = Socket(ns_a_);
  o.period_ns = 3'600'000'000'000;  // the test refreshes; the thread's first look is at start
  LldpWatcher w(o);
  // The starting state: no lldpd on the socket yet. Said once, host-only, nothing invented.
  ASSERT_TRUE(WaitFor([&] { return w.stats().failures >= 1; }));
  EXPECT_TRUE(w.Latest()->empty());
  EXPECT_NE(w.stats().last_error.find(Socket(ns_a_)), std::string::npos) << w.stats().last_error;
  EXPECT_NE(w.stats().last_error.find("lldpd"), std::string::npos);

  ASSERT_NO_FATAL_FAILURE(StartLldpd(ns_b_, if_b_));
  ASSERT_EQ(Lldpcli(ns_b_, "configure system hostname leaf-b"), 0);
  ASSERT_NO_FATAL_FAILURE(StartLldpd(ns_a_, if_a_));
  // What ns_a's lldpd has heard on its interface, as the watcher reads it ("" for nothing).
  auto heard = [&] {
    auto m = w.Latest();
    auto it = m->find(if_a_);
    return it == m->end() ? std::string() : DescribeNeighbor(it->second);
  };
  auto neighbour = [&](const std::string& chassis) {
    w.RefreshNow();
    auto m = w.Latest();
    auto it = m->find(if_a_);
    return it != m->end() && it->second.chassis_name() == chassis;
  };
  ASSERT_TRUE(WaitFor([&] { return neighbour("leaf-b"); }, std::chrono::seconds(20)))
      << "lldpd in " << ns_a_ << " never heard leaf-b from " << ns_b_ << " (heard: '" << heard()
      << "'): " << w.stats().last_error;
  const v1::PortNeighbor n = w.Latest()->at(if_a_);
  EXPECT_EQ(n.port_description(), if_b_);  // lldpd's default: the sender's interface name
  EXPECT_EQ(n.source(), "lldp");
  EXPECT_FALSE(n.chassis_id().empty());
  EXPECT_FALSE(n.management_address().empty());  // the veth's link-local address
  EXPECT_TRUE(w.stats().last_error.empty());
  EXPECT_FALSE(w.Latest()->contains(if_b_)) << "only ns_a's lldpd is read";

  // Renamed while watched: the next frames carry the new name.
  ASSERT_EQ(Lldpcli(ns_b_, "configure system hostname leaf-c"), 0);
  ASSERT_TRUE(WaitFor([&] { return neighbour("leaf-c"); }, std::chrono::seconds(20)));

  // lldpd goes away: the map stays through the first two failed looks, and the third drops it.
  KillLldpd(ns_a_);
  const uint64_t failures = w.stats().failures;
  ASSERT_TRUE(WaitFor([&] {
    w.RefreshNow();
    return !w.stats().last_error.empty();
  }));
  EXPECT_EQ(w.stats().failures, failures + 1);
  EXPECT_FALSE(w.Latest()->empty());
  w.RefreshNow();
  EXPECT_FALSE(w.Latest()->empty());
  w.RefreshNow();
  EXPECT_TRUE(w.Latest()->empty());
  EXPECT_EQ(w.stats().failures, failures + 3);
}

}  // namespace
}  // namespace fabricscope::agent
