#include "collectors/sysfs_ports.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>

#include "tests/common/fake_tree.h"

namespace fabricscope::collectors {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kSysfs = std::string(FABRICSCOPE_TESTDATA) + "/sysfs-real";

TEST(ParseIbRate, RealRateStrings) {
  EXPECT_EQ(*ParseIbRate("100 Gb/sec (4X EDR)\n"), 12'500'000'000u);
  EXPECT_EQ(*ParseIbRate("25 Gb/sec (1X EDR)"), 3'125'000'000u);
  EXPECT_EQ(*ParseIbRate("2.5 Gb/sec (1X SDR)"), 312'500'000u);
  EXPECT_EQ(*ParseIbRate("400 Gb/sec (4X NDR)"), 50'000'000'000u);
}

TEST(ParseIbRate, RejectsOtherText) {
  EXPECT_FALSE(ParseIbRate("fast").ok());
  EXPECT_FALSE(ParseIbRate("100 Mb/sec").ok());
  EXPECT_FALSE(ParseIbRate("").ok());
}

TEST(ParseNetdevSpeed, MegabitsToBytes) {
  EXPECT_EQ(*ParseNetdevSpeed("1000\n"), 125'000'000u);
  EXPECT_EQ(*ParseNetdevSpeed("100000"), 12'500'000'000u);
  EXPECT_EQ(*ParseNetdevSpeed("-1\n"), 0u);  // virtio, veth: unknown
  EXPECT_FALSE(ParseNetdevSpeed("unknown").ok());
}

TEST(ParseBitRate, TcUnits) {
  EXPECT_EQ(*ParseBitRate("1gbit"), 125'000'000u);
  EXPECT_EQ(*ParseBitRate("100Mbit"), 12'500'000u);
  EXPECT_EQ(*ParseBitRate("400G"), 50'000'000'000u);
  EXPECT_EQ(*ParseBitRate("25Gb/s"), 3'125'000'000u);
  EXPECT_EQ(*ParseBitRate("2.5gbit"), 312'500'000u);
  EXPECT_EQ(*ParseBitRate("8000"), 1000u);
  EXPECT_EQ(*ParseBitRate("1e9"), 125'000'000u);
}

TEST(ParseBitRate, RejectsBadRates) {
  EXPECT_FALSE(ParseBitRate("").ok());
  EXPECT_FALSE(ParseBitRate("fast").ok());
  EXPECT_FALSE(ParseBitRate("10 furlongs").ok());
  EXPECT_FALSE(ParseBitRate("0gbit").ok());
  EXPECT_FALSE(ParseBitRate("-5gbit").ok());
}

TEST(DiscoverRdmaPorts, FindsEveryPortOfTheRealTree) {
  auto r = DiscoverRdmaPorts(kSysfs);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<std::string> keys;
  for (const PortDescriptor& p : r->ports) keys.push_back(p.Key());
  EXPECT_THAT(keys, ElementsAre("hfi1_0:1", "mlx4_0:1", "mlx4_0:2", "mlx5_0:1"));
  for (const PortDescriptor& p : r->ports) {
    EXPECT_TRUE(p.rdma);
    EXPECT_EQ(p.link_layer, LinkLayer::kInfiniBand);
    EXPECT_EQ(p.line_rate_source, LineRateSource::kSysfs);
  }
  EXPECT_EQ(r->ports[0].line_rate_bytes_per_second, 12'500'000'000u);  // 100 Gb/sec (4X EDR)
  EXPECT_EQ(r->ports[1].line_rate_bytes_per_second, 5'000'000'000u);   // 40 Gb/sec (4X QDR)
  EXPECT_EQ(r->ports[3].line_rate_bytes_per_second, 3'125'000'000u);   // 25 Gb/sec (1X EDR)
  // mlx5_0's node_guid file reads "0a7f:bc12:45ef:d23b" (no trailing newline); the other
  // devices have none in the tree: 0, unknown.
  EXPECT_EQ(r->ports[3].node_guid, 0x0a7fbc1245efd23bu);
  EXPECT_EQ(r->ports[0].node_guid, 0u);
}

TEST(ParseNodeGuid, KernelFormatOnly) {
  EXPECT_EQ(*ParseNodeGuid("e09d:7303:007a:4bd8\n"), 0xe09d7303007a4bd8u);
  for (const char* bad : {"", "e09d7303007a4bd8", "e09d:7303:007a", "e09d:7303:007a:4bd8:0000",
                          "e09d:7303:007a:4bdx", "0xe09:7303:007a:4bd8", "e09d:7303:007a:4bd"}) {
    EXPECT_FALSE(ParseNodeGuid(bad).ok()) << bad;
  }
}

TEST(DiscoverRdmaPorts, CounterSetHasWidthsScaleAndRoles) {
  auto r = DiscoverRdmaPorts(kSysfs);
  ASSERT_TRUE(r.ok());
  const PortDescriptor& mlx5 = r->ports[3];
  size_t standard = 0, hw = 0;
  for (const CounterDescriptor& c : mlx5.counters) {
    standard += c.group == "counters";
    hw += c.group == "hw_counters";
  }
  EXPECT_EQ(standard, 17u);  // with port_xmit_wait
  EXPECT_EQ(hw, 24u);        // every hw_counters file but lifespan
  EXPECT_EQ(mlx5.hw_lifespan_ms, 10u);
  EXPECT_EQ(r->ports[0].hw_lifespan_ms, 0u);  // hfi1 has no hw_counters
  const CounterDescriptor& xmit = mlx5.counters[0];
  EXPECT_EQ(xmit.name, "port_xmit_data");
  EXPECT_EQ(xmit.spec.scale, 4u);  // 4-octet words
  EXPECT_EQ(xmit.role, CounterRole::kTransmitBytes);
  EXPECT_EQ(xmit.path, kSysfs + "/class/infiniband/mlx5_0/ports/1/counters/port_xmit_data");
  for (const CounterDescriptor& c : mlx5.counters) {
    if (c.name == "symbol_error") {
      EXPECT_EQ(c.spec.width_bits, 16);
      EXPECT_EQ(c.spec.behavior, CounterBehavior::kSaturating);
    }
    // Each counter's meaning is set here, at discovery, from the one table.
    EXPECT_EQ(c.meaning, MeaningOf(c.group, c.name).meaning) << c.name;
    if (c.name == "port_xmit_wait") {
      EXPECT_EQ(c.meaning, Meaning::kTransmitWait);
    }
    if (c.name == "out_of_sequence") {
      EXPECT_EQ(c.meaning, Meaning::kOutOfSequence);
      EXPECT_EQ(c.group, "hw_counters");
      EXPECT_EQ(c.role, CounterRole::kOther);
      EXPECT_EQ(c.spec.width_bits, 32);  // mlx5 queue counter
    }
    if (c.name == "local_link_integrity_errors") {
      EXPECT_EQ(c.spec.width_bits, 4);
    }
  }
}

TEST(DiscoverRdmaPorts, ErrorCountersGetTheTickDivisor) {
  auto r = DiscoverRdmaPorts(kSysfs, 10);
  ASSERT_TRUE(r.ok());
  for (const CounterDescriptor& c : r->ports[0].counters) {
    EXPECT_EQ(c.tick_divisor, c.role == CounterRole::kError ? 10u : 1u) << c.name;
  }
}

TEST(DiscoverRdmaPorts, NoPmaCountersAreLeftOutAndNoted) {
  testing::FakeTree t;
  const std::string dir = "class/infiniband/i40iw0/ports/1";
  t.Write(dir + "/rate", "10 Gb/sec (1X QDR)\n");
  t.Write(dir + "/link_layer", "Ethernet\n");
  for (const char* c : {"port_xmit_data", "port_rcv_data", "symbol_error"}) {
    t.Write(dir + "/counters/" + c, "N/A (no PMA)\n");
  }
  auto r = DiscoverRdmaPorts(t.root());
  ASSERT_TRUE(r.ok());
  // Kept for its state files, without counters.
  ASSERT_EQ(r->ports.size(), 1u);
  EXPECT_TRUE(r->ports[0].counters.empty());
  EXPECT_EQ(r->ports[0].line_rate_bytes_per_second, 1'250'000'000u);
  EXPECT_EQ(r->ports[0].lanes, 1u);
  ASSERT_EQ(r->notes.size(), 2u);
  EXPECT_THAT(r->notes[0], HasSubstr("N/A"));
  EXPECT_THAT(r->notes[1], HasSubstr("i40iw0:1: no readable traffic counters; its state"));
}

// The legacy mlx4 layout (tests/testdata/generated/mlx4-legacy, SOURCES.md): the four data and
// packet counters come from counters_ext/*_64, not the 32-bit counters/ files stuck at
// 2^32 - 1 next to them, and the choice is noted; where no counters_ext exists, the counters/
// ones are marked to flag a stuck 32-bit value as saturated.
TEST(DiscoverRdmaPorts, PrefersTheSixtyFourBitCountersExt) {
  const std::string legacy = std::string(FABRICSCOPE_TESTDATA) + "/generated/mlx4-legacy";
  auto r = DiscoverRdmaPorts(legacy);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->ports.size(), 1u);
  std::map<std::string, const CounterDescriptor*> by_name;
  for (const CounterDescriptor& c : r->ports[0].counters) by_name[c.name] = &c;
  for (const char* name :
       {"port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets"}) {
    ASSERT_TRUE(by_name.contains(name)) << name;
    const CounterDescriptor& c = *by_name[name];
    EXPECT_EQ(c.group, "counters_ext") << name;
    EXPECT_EQ(c.path, legacy + "/class/infiniband/mlx4_0/ports/1/counters_ext/" + name + "_64");
    EXPECT_EQ(c.spec.width_bits, 64);
    EXPECT_FALSE(c.spec.stuck_at_32_bits_saturates);
  }
  EXPECT_EQ(by_name["port_xmit_data"]->spec.scale, 4u);  // still 4-octet words
  EXPECT_EQ(by_name["symbol_error"]->group, "counters");
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_THAT(r->notes[0], HasSubstr("mlx4_0:1: port_xmit_data, port_rcv_data, "
                                     "port_xmit_packets, port_rcv_packets read from "
                                     "counters_ext/*_64"));
  // The real trees have no counters_ext: counters/ stays, marked.
  auto real = DiscoverRdmaPorts(kSysfs);
  ASSERT_TRUE(real.ok());
  for (const CounterDescriptor& c : real->ports[1].counters) {
    const bool data = c.role != CounterRole::kError && c.role != CounterRole::kOther;
    EXPECT_EQ(c.spec.stuck_at_32_bits_saturates, data) << c.name;
    if (data) {
      EXPECT_EQ(c.group, "counters");
    }
  }
}

// irdma (tests/testdata/generated/irdma-rocev2, SOURCES.md): no counters/ at all (procfs PR 605,
// node_exporter#2769); the driver's own IPv4 + IPv6 octet and packet counters in hw_counters are
// the port's bytes and packets, one counter per role with the IPv6 file as a part, 64-bit; its
// CNP and ECN counters keep their names, 64-bit as irdma accumulates them.
TEST(DiscoverRdmaPorts, IrdmaBytesComeFromTheDriversOwnCounters) {
  const std::string root = std::string(FABRICSCOPE_TESTDATA) + "/generated/irdma-rocev2";
  auto r = DiscoverRdmaPorts(root);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->ports.size(), 1u);
  const PortDescriptor& p = r->ports[0];
  EXPECT_EQ(p.Key(), "irdma0:1");
  EXPECT_EQ(p.link_layer, LinkLayer::kEthernet);
  EXPECT_EQ(p.line_rate_bytes_per_second, 12'500'000'000u);
  std::map<std::string, const CounterDescriptor*> by_name;
  for (const CounterDescriptor& c : p.counters) by_name[c.name] = &c;
  const std::string hw = root + "/class/infiniband/irdma0/ports/1/hw_counters/";
  const struct {
    const char* name;
    CounterRole role;
    const char* v6;
  } traffic[] = {{"ip4OutOctets+ip6OutOctets", CounterRole::kTransmitBytes, "ip6OutOctets"},
                 {"ip4InOctets+ip6InOctets", CounterRole::kReceiveBytes, "ip6InOctets"},
                 {"ip4OutPkts+ip6OutPkts", CounterRole::kTransmitPackets, "ip6OutPkts"},
                 {"ip4InPkts+ip6InPkts", CounterRole::kReceivePackets, "ip6InPkts"}};
  for (const auto& t : traffic) {
    ASSERT_TRUE(by_name.contains(t.name)) << t.name;
    const CounterDescriptor& c = *by_name[t.name];
    EXPECT_EQ(c.role, t.role) << t.name;
    EXPECT_EQ(c.group, "hw_counters");
    EXPECT_EQ(c.spec.width_bits, 64);
    EXPECT_EQ(c.spec.scale, 1u);  // octets, not 4-octet words
    EXPECT_THAT(c.part_paths, ElementsAre(hw + t.v6)) << t.name;
  }
  // The parts are not counted a second time as counters of their own.
  EXPECT_FALSE(by_name.contains("ip4InOctets"));
  EXPECT_FALSE(by_name.contains("ip6InOctets"));
  for (const char* n : {"cnpSent", "cnpHandled", "RxECNMrkd", "ip4InDiscards"}) {
    ASSERT_TRUE(by_name.contains(n)) << n;
    EXPECT_EQ(by_name[n]->role, CounterRole::kOther);
    EXPECT_EQ(by_name[n]->spec.width_bits, 64) << n;
  }
  EXPECT_THAT(r->notes, ElementsAre(HasSubstr("irdma0:1: bytes and packets from the driver's "
                                              "hw_counters (ip4OutOctets+ip6OutOctets")));
}

// A port with counters/ keeps them: a driver byte counter in hw_counters does not replace them.
TEST(DiscoverRdmaPorts, CountersDirectoryWinsOverDriverByteCounters) {
  testing::FakeTree tree;
  tree.CopyTestdata("sysfs-real/class/infiniband/mlx5_0", "class/infiniband/mlx5_0");
  tree.Write("class/infiniband/mlx5_0/ports/1/hw_counters/ip4InOctets", "5\n");
  auto r = DiscoverRdmaPorts(tree.root());
  ASSERT_TRUE(r.ok()) << r.status();
  for (const CounterDescriptor& c : r->ports[0].counters) {
    if (c.role == CounterRole::kReceiveBytes) {
      EXPECT_EQ(c.name, "port_rcv_data");
    }
    EXPECT_NE(c.name, "ip4InOctets");
  }
}

TEST(DiscoverRdmaPorts, MissingRootIsNotFound) {
  auto r = DiscoverRdmaPorts("/nonexistent/fabricscope");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

TEST(DiscoverRdmaPorts, NoInfinibandClassIsEmpty) {
  testing::FakeTree t;
  t.AddNetdev("eth0");
  auto r = DiscoverRdmaPorts(t.root());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ports.empty());
}

TEST(DiscoverNetdevs, RealTreeWithoutStatisticsIsSkippedWithANote) {
  auto r = DiscoverNetdevs(kSysfs);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->ports.empty());
  ASSERT_EQ(r->notes.size(), 1u);
  EXPECT_THAT(r->notes[0], HasSubstr("eth0: no statistics/"));
}

TEST(DiscoverNetdevs, SpeedDevPortAndVirtualLinks) {
  testing::FakeTree t;
  t.AddNetdev("eth1", "25000");
  t.Write("class/net/eth1/dev_port", "1\n");
  // A virtual device: its class/net entry links under devices/virtual, as the kernel does.
  t.AddLinkedNetdev("veth0", "virtual");
  auto r = DiscoverNetdevs(t.root());
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->ports.size(), 2u);
  EXPECT_EQ(r->ports[0].device, "eth1");
  EXPECT_EQ(r->ports[0].port, 1u);
  EXPECT_EQ(r->ports[0].line_rate_bytes_per_second, 3'125'000'000u);
  EXPECT_FALSE(r->ports[0].is_virtual);
  EXPECT_EQ(r->ports[0].link_layer, LinkLayer::kEthernet);
  EXPECT_EQ(r->ports[1].device, "veth0");
  EXPECT_TRUE(r->ports[1].is_virtual);
  EXPECT_EQ(r->ports[1].line_rate_bytes_per_second, 0u);
  EXPECT_EQ(r->ports[1].line_rate_source, LineRateSource::kUnknown);
  EXPECT_EQ(r->ports[1].counters.size(), 8u);
}

TEST(FindRdmaNetdev, FirstReadableGidNdev) {
  testing::FakeTree t;
  const std::string port = "class/infiniband/mlx5_0/ports/1";
  std::filesystem::create_directories(t.Path(port + "/gid_attrs/ndevs"));
  // Index 10 sorts before 2 as text; the lowest readable index wins. An empty entry (a GID
  // without a netdev) and a directory in place of a file are passed over.
  t.Write(port + "/gid_attrs/ndevs/0", "");
  std::filesystem::create_directories(t.Path(port + "/gid_attrs/ndevs/1"));
  t.Write(port + "/gid_attrs/ndevs/2", "ens1f0np0\n");
  t.Write(port + "/gid_attrs/ndevs/10", "ens1f0np0.100\n");
  auto r = FindRdmaNetdev(t.root(), "mlx5_0", 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "ens1f0np0");
}

TEST(FindRdmaNetdev, FallsBackToTheDevicesNetDirectory) {
  testing::FakeTree t;
  const std::string dev = "class/infiniband/mlx5_1";
  t.Write(dev + "/ports/1/gid_attrs/ndevs/0", "");  // unreadable in the real kernel
  t.Write(dev + "/device/net/ens2f1np1/dev_port", "0\n");
  auto r = FindRdmaNetdev(t.root(), "mlx5_1", 1);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "ens2f1np1");
}

TEST(FindRdmaNetdev, SeveralNetdevsArePickedByDevPort) {
  testing::FakeTree t;
  const std::string dev = "class/infiniband/mlx4_0";  // one PCI function, two ports
  t.Write(dev + "/device/net/eth2/dev_port", "0\n");
  t.Write(dev + "/device/net/eth3/dev_port", "1\n");
  EXPECT_EQ(*FindRdmaNetdev(t.root(), "mlx4_0", 1), "eth2");
  EXPECT_EQ(*FindRdmaNetdev(t.root(), "mlx4_0", 2), "eth3");
  EXPECT_EQ(FindRdmaNetdev(t.root(), "mlx4_0", 3).status().code(), absl::StatusCode::kNotFound);
}

TEST(FindRdmaNetdev, InfinibandPortsHaveNone) {
  testing::FakeTree t;
  const std::string dev = "class/infiniband/mlx5_2";
  t.Write(dev + "/ports/1/link_layer", "InfiniBand\n");
  t.Write(dev + "/device/net/ib0/dev_port", "0\n");  // IPoIB: not the port's Ethernet netdev
  t.Write(dev + "/device/net/ib0/type", "32\n");
  auto r = FindRdmaNetdev(t.root(), "mlx5_2", 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
  EXPECT_EQ(FindRdmaNetdev(t.root(), "nosuch_0", 1).status().code(), absl::StatusCode::kNotFound);
}

TEST(FindRdmaNetdev, RealTreeIbPortsHaveNoNetdev) {
  auto r = FindRdmaNetdev(kSysfs, "mlx5_0", 1);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound) << r.status();
}

}  // namespace
}  // namespace fabricscope::collectors
