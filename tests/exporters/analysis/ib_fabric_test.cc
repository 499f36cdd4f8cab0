// The IB fabric file: ibnetdiscover output of a public two-level NDR fat tree
// (tests/testdata/ibnetdiscover/topograph-example.out, SOURCES.md says where it comes from and
// how its counts were taken), its leaves, spines and uplink capacities, its merge with the
// topology file, and nodes placed on leaves by their HCAs' node GUIDs.

#include "exporters/analysis/ib_fabric.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <memory>

#include "exporters/analysis/fabric_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fabricscope::exporters {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

const std::string kIbFabricFile =
    std::string(FABRICSCOPE_TESTDATA) + "/ibnetdiscover/topograph-example.out";

const FabricLeaf* FindIbLeaf(const FabricTopology& t, const std::string& name) {
  for (const FabricLeaf& l : t.leaves) {
    if (l.name == name) return &l;
  }
  return nullptr;
}

// The topology document `yaml` with the public fabric merged in; *notes gets the merge's.
FabricTopology MergedWithFabric(const char* yaml, std::vector<std::string>* notes) {
  absl::StatusOr<FabricTopology> t = ParseFabricTopology(YAML::Load(yaml));
  EXPECT_TRUE(t.ok()) << t.status();
  absl::StatusOr<IbFabric> f = LoadIbFabric(kIbFabricFile);
  EXPECT_TRUE(f.ok()) << f.status();
  if (!t.ok() || !f.ok()) return {};
  EXPECT_TRUE(MergeIbFabric(*f, &*t, notes).ok());
  return *std::move(t);
}

TEST(IbFabricTest, ReadsThePublicFatTreeWithItsSwitchAndPortCounts) {
  absl::StatusOr<IbFabric> f = LoadIbFabric(kIbFabricFile);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->switches.size(), 40u);
  EXPECT_EQ(f->cas.size(), 582u);  // 542 host HCAs and 40 aggregation nodes
  const IbFabricSummary s = SummarizeIbFabric(*f);
  EXPECT_EQ(s.leaves, 31u);
  EXPECT_EQ(s.spines, 9u);
  EXPECT_EQ(s.aggregation_nodes, 40u);
  EXPECT_EQ(s.host_ports, 542u);
  EXPECT_EQ(s.switch_links, 532u);
  // Every switch is a 64-port Quantum-2 (65 ports with its management port 0's virtual one).
  for (const IbNode& sw : f->switches) EXPECT_EQ(sw.ports, 65u) << IbSwitchName(sw);
  // The first switch block, port by port as printed.
  const IbNode& leaf = f->switches[0];
  EXPECT_EQ(leaf.guid, 0x2c5eab0300b87b40u);
  EXPECT_EQ(leaf.sysimgguid, 0x2c5eab0300b87b40u);
  EXPECT_EQ(IbSwitchName(leaf), "A09-P1-IBLEAF-04-04");
  ASSERT_EQ(leaf.links.size(), 17u + 16u + 1u);
  EXPECT_EQ(leaf.links[0].port, 1u);
  EXPECT_EQ(leaf.links[0].remote_type, 'H');
  EXPECT_EQ(leaf.links[0].remote_guid, 0xe09d7303007a4bd8u);
  EXPECT_EQ(leaf.links[0].remote_port, 1u);
  EXPECT_EQ(leaf.links[0].remote_desc, "a08-p1-dgx-04-c01 mlx5_5");
  EXPECT_EQ(leaf.links[0].lanes, 4u);
  EXPECT_EQ(leaf.links[0].speed, "NDR");
  EXPECT_DOUBLE_EQ(leaf.links[0].bytes_per_second, 400e9 / 8);  // 4 x 100 Gb/s
  EXPECT_EQ(leaf.links[17].port, 35u);
  EXPECT_EQ(leaf.links[17].remote_type, 'S');
  EXPECT_EQ(leaf.links[17].remote_guid, 0x2c5eab0300c26280u);
  EXPECT_EQ(leaf.links[17].remote_port, 32u);
  // A CA block's port line: its own port GUID in parentheses, the switch's comment after it.
  const auto ca = std::find_if(f->cas.begin(), f->cas.end(),
                               [](const IbNode& n) { return n.guid == 0xe09d7303007a4bd8u; });
  ASSERT_NE(ca, f->cas.end());
  EXPECT_EQ(ca->desc, "a08-p1-dgx-04-c01 mlx5_5");
  ASSERT_EQ(ca->links.size(), 1u);
  EXPECT_EQ(ca->links[0].remote_guid, 0x2c5eab0300b87b40u);
  EXPECT_EQ(ca->links[0].remote_port, 1u);
  EXPECT_EQ(ca->links[0].remote_desc, "MF0;A09-P1-IBLEAF-04-04:MQM9701/U1");
  EXPECT_DOUBLE_EQ(ca->links[0].bytes_per_second, 400e9 / 8);
}

TEST(IbFabricTest, LeavesTakeTheirUplinkCapacityAndHcaPortsFromTheFabric) {
  absl::StatusOr<IbFabric> f = LoadIbFabric(kIbFabricFile);
  ASSERT_TRUE(f.ok()) << f.status();
  FabricTopology t;
  std::vector<std::string> notes;
  ASSERT_TRUE(MergeIbFabric(*f, &t, &notes).ok());
  EXPECT_TRUE(notes.empty());
  ASSERT_EQ(t.leaves.size(), 31u);
  EXPECT_EQ(t.spines.size(), 9u);
  EXPECT_EQ(t.leaf_of_hca_port.size(), 542u);
  // 16 uplinks of 4x NDR (ports 35-50), 17 hosts.
  const FabricLeaf* a = FindIbLeaf(t, "A09-P1-IBLEAF-04-04");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->source, "ibnetdiscover");
  EXPECT_EQ(a->uplinks, 16u);
  EXPECT_DOUBLE_EQ(a->uplink_bytes_per_second, 16 * 400e9 / 8);
  // Ports 39 and 40 (spine 04) are not cabled on this one: 14 uplinks.
  const FabricLeaf* b = FindIbLeaf(t, "A09-P1-IBLEAF-01-02");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->uplinks, 14u);
  EXPECT_DOUBLE_EQ(b->uplink_bytes_per_second, 14 * 400e9 / 8);
  const size_t ia = static_cast<size_t>(a - t.leaves.data());
  EXPECT_EQ(t.leaf_of_hca_port.at({0xe09d7303007a4bd8u, 1}), ia);
  EXPECT_EQ(t.leaf_of_node_desc.at("a08-p1-dgx-04-c01 mlx5_5"), ia);
  EXPECT_EQ(t.leaf_of_chassis.at("0x2c5eab0300b87b40"), ia);
  // Spines and aggregation nodes are no leaves and no hosts.
  EXPECT_EQ(FindIbLeaf(t, "A10-P1-IBSPINE-02"), nullptr);
  EXPECT_FALSE(t.leaf_of_hca_port.contains({0x2c5eab0300b87b50u, 1}));
  EXPECT_FALSE(t.leaf_of_node_desc.contains("Mellanox Technologies Aggregation Node"));
}

TEST(IbFabricTest, TheTopologyFilesLeafKeepsItsNameAndCapacityAndTheDifferenceIsReported) {
  std::vector<std::string> notes;
  FabricTopology merged = MergedWithFabric(R"(
leaves:
  - name: rack4-rail4
    chassis: ["0x2c5eab0300b87b40"]
    uplinks: 8
    uplink_speed: 400gbit
  - name: rack1-rail2
    chassis: [A09-P1-IBLEAF-01-02]
  - name: rack4-rail2
    chassis: ["0X2C5EAB0300B87BC0"]
)",
                                           &notes);
  FabricTopology* t = &merged;
  EXPECT_EQ(t->leaves.size(), 31u);                      // three named by the file, 28 added
  EXPECT_EQ(t->leaves[2].source, "file+ibnetdiscover");  // its GUID in capitals
  EXPECT_DOUBLE_EQ(t->leaves[2].uplink_bytes_per_second, 16 * 400e9 / 8);
  EXPECT_EQ(t->leaves[0].name, "rack4-rail4");
  EXPECT_EQ(t->leaves[0].source, "file+ibnetdiscover");
  EXPECT_DOUBLE_EQ(t->leaves[0].uplink_bytes_per_second, 8 * 400e9 / 8);  // the file's stands
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("leaf rack4-rail4: the topology file states 3200 Gb/s"));
  EXPECT_THAT(notes[0], HasSubstr("16 switch links of 6400 Gb/s"));
  // No capacity in the file: the fabric's.
  EXPECT_EQ(t->leaves[1].name, "rack1-rail2");
  EXPECT_DOUBLE_EQ(t->leaves[1].uplink_bytes_per_second, 14 * 400e9 / 8);
  EXPECT_EQ(t->leaf_of_hca_port.at({0xe09d7303007a4bd8u, 1}), 0u);
}

TEST(IbFabricTest, NodesArePlacedByTheirHcasNodeGuidOrTheirNodeDescription) {
  std::vector<std::string> notes;
  FabricModel m(std::make_shared<const FabricTopology>(MergedWithFabric(
                    "leaves: [{name: stale, nodes: [a08-p1-dgx-04-c01]}]", &notes)),
                {});
  auto hello = [&](const std::string& node, const std::string& dev, uint64_t guid) {
    v1::Hello h;
    h.set_node(node);
    v1::PortInfo* p = h.add_ports();
    p->set_device(dev);
    p->set_port(1);
    p->set_rdma(true);
    p->set_node_guid(guid);
    m.OnHello(h);
  };
  hello("a08-p1-dgx-04-c01", "mlx5_5", 0xe09d7303007a4bd8u);  // by GUID
  hello("a06-p1-dgx-02-c01", "HCA-6", 0);                     // by "<host> <device>"
  hello("b08-p1-dgx-08-c03", "mlx5_0", 0xe09d730300858f00u);  // GUID; description unset
  hello("elsewhere", "mlx5_0", 0x1234);                       // not in the fabric
  std::shared_ptr<const FabricPlacement> p = m.Placement();
  auto leaf = [&](const std::string& node) {
    const int i = p->LeafOf(node);
    return i < 0 ? std::string("-") : p->leaves[i].name;
  };
  EXPECT_EQ(leaf("a08-p1-dgx-04-c01"), "A09-P1-IBLEAF-04-04");
  EXPECT_EQ(leaf("a06-p1-dgx-02-c01"), "A09-P1-IBLEAF-04-02");
  EXPECT_EQ(leaf("b08-p1-dgx-08-c03"), "B09-P1-IBLEAF-04-08");
  EXPECT_EQ(leaf("elsewhere"), "-");
  // The fabric's cable wins over the topology file's stale entry, and the difference is listed.
  const FabricSnapshot s = m.Snapshot(0, {});
  ASSERT_EQ(s.disagreements.size(), 1u);
  EXPECT_EQ(s.disagreements[0].node, "a08-p1-dgx-04-c01");
  EXPECT_EQ(s.disagreements[0].file_leaf, "stale");
  EXPECT_EQ(s.disagreements[0].cable_leaf, "A09-P1-IBLEAF-04-04");
  EXPECT_EQ(s.disagreements[0].cable_source, "ibnetdiscover");
  // A node whose HCAs reach several leaves (a rail-optimized node) is listed.
  v1::Hello h;
  h.set_node("a06-p1-dgx-02-c01");
  for (const char* dev : {"HCA-6", "HCA-1"}) {
    v1::PortInfo* port = h.add_ports();
    port->set_device(dev);
    port->set_port(1);
    port->set_rdma(true);
  }
  m.OnHello(h);
  EXPECT_THAT(m.Snapshot(0, {}).multi_leaf_nodes, ElementsAre("a06-p1-dgx-02-c01"));
}

TEST(IbFabricTest, RefusesWhatIsNotIbnetdiscoverOutputNamingTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "no node in the file"},
      {"# only a comment\n", "no node in the file"},
      {"hello world\n", "line 1: not ibnetdiscover output"},
      {"[1]\t\"S-0000000000000001\"[1]\n", "line 1: a port line before any node line"},
      {"Switch\t36 \"S-0000000000000001\"\n[x]\t\"S-02\"[1]\n", "line 2: not a port line"},
      {"Switch\t36 \"S-0000000000000001\"\n[1]\t\"Q-02\"[1]\n", "line 2: not a port line"},
      {"Switch\t36 \"S-0000000000000001\"\n[300]\t\"S-02\"[1]\n", "line 2: not a port line"},
      {"Switch\t36 \"H-0000000000000001\"\n", "line 1: no \"X-guid\" name matching"},
      {"Switch\tmany \"S-0000000000000001\"\n", "line 1: no port count"},
      {"Ca\t2 \"H-01\"\n\nCa\t2 \"H-1\"\n", "line 3: node GUID given twice"},
      {"sysimgguid=0xnothex\n", "line 1: not a GUID"},
      {"Switch\t36 \"S-00000000000000001\"\n", "line 1: no \"X-guid\""},  // 17 hex digits
      {"Switch\n", "line 1: not ibnetdiscover output"},                   // a file cut off mid-line
      {"Ca\n", "line 1: not ibnetdiscover output"},
      {"Cafoo\t2 \"H-01\"\n", "line 1: not ibnetdiscover output"},
      {"Switch\t3 \"S-01\"\n[1]\t\"S-02\"[1]\n[1]\t\"S-03\"[1]\n", "line 3: a port given twice"},
      {"Switch\t3 \"S-01\"\n[4]\t\"S-02\"[1]\n", "line 2: port 4 beyond the node's 3"},
  };
  for (const auto& [text, want] : cases) {
    absl::StatusOr<IbFabric> f = ParseIbnetdiscover(text);
    ASSERT_FALSE(f.ok()) << text;
    EXPECT_THAT(std::string(f.status().message()), HasSubstr(want)) << text;
  }
  EXPECT_EQ(LoadIbFabric("/nonexistent/fabric.txt").status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(LoadIbFabric(::testing::TempDir()).status().message()),
              HasSubstr("a directory"));
}

TEST(IbFabricTest, AFileCutShortIsRefusedNotReadAsASmallerFabric) {
  // Written while the aggregator reads it, or a partial copy: the blocks it has still cable
  // ports to nodes it no longer describes. A SIGHUP with it keeps the fabric read before.
  std::ifstream in(kIbFabricFile);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(text.size(), 299484u);
  size_t thirty_lines = 0;
  for (int i = 0; i < 30; ++i) thirty_lines = text.find('\n', thirty_lines) + 1;
  for (size_t cut : {thirty_lines, size_t{3000}, text.size() / 2, text.size() - 200}) {
    absl::StatusOr<IbFabric> f = ParseIbnetdiscover(text.substr(0, cut));
    ASSERT_FALSE(f.ok()) << "cut at " << cut;
    EXPECT_THAT(std::string(f.status().message()), HasSubstr("cut short")) << cut;
  }
  // The first 30 lines: the first leaf's hosts are not described yet.
  EXPECT_THAT(std::string(ParseIbnetdiscover(text.substr(0, thirty_lines)).status().message()),
              HasSubstr("(the first: H-e09d7303007a4bd8)"));
}

TEST(IbFabricTest, ASwitchTheFileNamesTwiceOrALeafWithTwoSwitchesIsReported) {
  std::vector<std::string> notes;
  FabricTopology t = MergedWithFabric(R"(
leaves:
  - name: A09-P1-IBLEAF-04-04
    rail: r4
  - name: by-guid
    chassis: ["0x2c5eab0300b87b40"]
  - name: two-switches
    chassis: ["0x2c5eab0300b87bc0", "0x2c5eab0300b87a80"]
)",
                                      &notes);
  ASSERT_EQ(notes.size(), 2u) << ::testing::PrintToString(notes);
  EXPECT_THAT(notes[0], HasSubstr("is leaf by-guid's by its GUID and leaf A09-P1-IBLEAF-04-04's "
                                  "by its name; leaf by-guid takes it"));
  EXPECT_THAT(notes[1], HasSubstr("leaf two-switches matches two switches; the second is a leaf "
                                  "of its own: A09-P1-IBLEAF-01-02 (0x2c5eab0300b87a80)"));
  EXPECT_EQ(t.leaves[1].source, "file+ibnetdiscover");
  EXPECT_EQ(t.leaves[0].source, "file");  // stays the file's, without the fabric's ports
  EXPECT_NE(FindIbLeaf(t, "A09-P1-IBLEAF-01-02 (0x2c5eab0300b87a80)"), nullptr);
}

TEST(IbFabricTest, UnknownWidthOrSpeedLeavesTheLinkWithoutARate) {
  // dump_linkwidth_compat prints "??" and dump_linkspeedext_compat "???" for values they do not
  // know; the `-f` (full info) output appends " s=.. w=.. v=..".
  absl::StatusOr<IbFabric> f = ParseIbnetdiscover(
      "Switch\t4 \"S-0000000000000001\"\t\t# \"sw\" base port 0 lid 1 lmc 0\n"
      "[1]\t\"S-0000000000000002\"[1]\t\t# \"sw2\" lid 2 ?????\n"
      "[2]\t\"S-0000000000000002\"[2]\t\t# \"sw2\" lid 2 12xEDR s=16 w=8 v=4\n"
      "[3]\t\"S-0000000000000002\"[3]\t\t# \"sw2\" lid 2 4xFDR10\n"
      "[4]\t\"S-0000000000000003\"[1]\t\t# \"named 12xXDR\" lid 3 ?????\n"
      "\nSwitch\t3 \"S-0000000000000002\"\t\t# \"sw2\" base port 0 lid 2 lmc 0\n"
      "\nSwitch\t1 \"S-0000000000000003\"\t\t# \"named 12xXDR\" base port 0 lid 3 lmc 0\n");
  ASSERT_TRUE(f.ok()) << f.status();
  const std::vector<IbLink>& l = f->switches[0].links;
  ASSERT_EQ(l.size(), 4u);
  EXPECT_EQ(l[0].lanes, 0u);
  EXPECT_EQ(l[0].bytes_per_second, 0);
  EXPECT_EQ(l[1].lanes, 12u);
  EXPECT_DOUBLE_EQ(l[1].bytes_per_second, 12 * 25e9 / 8);
  EXPECT_EQ(l[2].speed, "FDR10");
  EXPECT_DOUBLE_EQ(l[2].bytes_per_second, 4 * 10e9 / 8);
  EXPECT_EQ(l[3].lanes, 0u);  // the description's text is not the link's rate
  EXPECT_EQ(l[3].bytes_per_second, 0);
  EXPECT_EQ(IbSwitchName(f->switches[0]), "sw");
}

}  // namespace
}  // namespace fabricscope::exporters
