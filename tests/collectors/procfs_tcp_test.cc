#include "collectors/procfs_tcp.h"

#include <gtest/gtest.h>

#include "collectors/sysfs_ports.h"
#include "tests/common/fake_tree.h"

namespace fabricscope::collectors {
namespace {

const std::string kProc = std::string(FABRICSCOPE_TESTDATA) + "/procfs-real";

TEST(ParseProcNetTable, RealSnmpByColumnName) {
  auto text = ReadSmallFile(kProc + "/net/snmp");
  ASSERT_TRUE(text.ok());
  auto tcp = ParseProcNetTable(*text, "Tcp");
  ASSERT_TRUE(tcp.ok()) << tcp.status();
  EXPECT_EQ(tcp->at("OutSegs"), 594855u);
  EXPECT_EQ(tcp->at("RetransSegs"), 348u);
  EXPECT_EQ(tcp->at("InSegs"), 653161u);
  EXPECT_EQ(tcp->count("MaxConn"), 0u);  // -1: not a counter
  // "Udp" and "UdpLite" are different tables: the prefix must match whole.
  auto udp = ParseProcNetTable(*text, "Udp");
  ASSERT_TRUE(udp.ok());
  EXPECT_EQ(udp->at("InDatagrams"), 10179u);
}

TEST(ParseProcNetTable, RealNetstat) {
  auto text = ReadSmallFile(kProc + "/net/netstat");
  ASSERT_TRUE(text.ok());
  auto ext = ParseProcNetTable(*text, "TcpExt");
  ASSERT_TRUE(ext.ok()) << ext.status();
  EXPECT_TRUE(ext->count("TCPLostRetransmit"));
  EXPECT_TRUE(ext->count("TCPTimeouts"));
}

TEST(ParseProcNetTable, ColumnsMatchedByNameNotPosition) {
  auto r = ParseProcNetTable("Tcp: B A\nTcp: 2 1\n", "Tcp");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->at("A"), 1u);
  EXPECT_EQ(r->at("B"), 2u);
}

TEST(ParseProcNetTable, BadInput) {
  EXPECT_EQ(ParseProcNetTable("Ip: a\nIp: 1\n", "Tcp").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ParseProcNetTable("Tcp: a b\nTcp: 1\n", "Tcp").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseProcNetTable("Tcp: a\nTcp: x\n", "Tcp").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseProcNetTable("Tcp: a\n", "Tcp").status().code(), absl::StatusCode::kNotFound);
}

TEST(ProcNetTcpCollector, SamplesTheRealFilesAndFollowsChanges) {
  testing::FakeTree t;
  t.CopyTestdata("procfs-real/net", "net");
  auto c = ProcNetTcpCollector::Open(t.root());
  ASSERT_TRUE(c.ok()) << c.status();
  const PortDescriptor& p = (*c)->ports()[0];
  EXPECT_TRUE(p.node_level);
  EXPECT_EQ(p.device, "tcp");
  std::vector<uint64_t> v((*c)->counter_count());
  std::vector<ReadStatus> s((*c)->counter_count());
  (*c)->Sample(0, v.data(), s.data());
  auto value = [&](const std::string& name) -> int64_t {
    for (size_t i = 0; i < p.counters.size(); ++i) {
      if (p.counters[i].name == name)
        return s[i] == ReadStatus::kOk ? static_cast<int64_t>(v[i]) : -2;
    }
    return -1;
  };
  EXPECT_EQ(value("OutSegs"), 594855);
  EXPECT_EQ(value("RetransSegs"), 348);
  EXPECT_GE(value("TCPTimeouts"), 0);
  // The kernel rewrites the values; the same descriptor sees them.
  auto snmp = ReadSmallFile(t.Path("net/snmp"));
  std::string text = *snmp;
  text.replace(text.find(" 594855 348 "), 12, " 594999 350 ");
  t.Write("net/snmp", text);
  (*c)->Sample(1, v.data(), s.data());
  EXPECT_EQ(value("OutSegs"), 594999);
  EXPECT_EQ(value("RetransSegs"), 350);
  // A garbled file is a read error for its counters, not a crash.
  t.Write("net/snmp", "Tcp: OutSegs\nTcp: banana\n");
  (*c)->Sample(2, v.data(), s.data());
  EXPECT_EQ(value("OutSegs"), -2);
}

TEST(ProcNetTcpCollector, MissingFilesAreNotFound) {
  testing::FakeTree t;
  EXPECT_EQ(ProcNetTcpCollector::Open(t.root()).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace fabricscope::collectors
