#include "agent/source_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "agent/options.h"
#include "collectors/counter_meaning.h"
#include "collectors/sysfs_ports.h"
#include "tests/common/fake_tree.h"

namespace fabricscope::agent {
namespace {

using ::testing::ElementsAre;
using testing::FakeTree;
using ::testing::HasSubstr;

const SourceSpec* Find(const std::string& name) {
  for (const SourceSpec& s : Sources()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

TEST(SourceRegistry, EverySourceRegistersItselfInItsGroupAndOrder) {
  std::vector<std::string> names;
  for (const SourceSpec& s : Sources()) names.push_back(s.name);
  // Slow group first (link state, then ethtool, then TCP, the order their counters merge in),
  // then the PerfMgt group: whatever order the linker ran the files' initializers in.
  EXPECT_THAT(names, ElementsAre("port_state", "ethtool", "tcp", "pma"));
  EXPECT_EQ(Find("tcp")->group, SamplerGroupId::kSlow);
  EXPECT_EQ(Find("pma")->group, SamplerGroupId::kPma);
}

TEST(SourceRegistry, ItsOptionsAndMeaningGroupsExist) {
  std::set<std::string> flags;
  for (const auto& spec : AgentOptionTable()) flags.insert(spec.flag);
  for (const SourceSpec& s : Sources()) {
    EXPECT_FALSE(s.options.empty()) << s.name;
    for (const std::string& f : s.options) EXPECT_TRUE(flags.contains(f)) << s.name << ": --" << f;
    if (!s.meaning_group.empty()) {
      EXPECT_TRUE(collectors::HasMeaningGroup(s.meaning_group)) << s.name;
    }
  }
  EXPECT_FALSE(collectors::HasMeaningGroup("no_such_group"));
}

TEST(SourceRegistry, SourcesOpenAsTheirOptionsSay) {
  FakeTree t;
  t.CopyTestdata("sysfs-real/class", "class");
  t.CopyTestdata("procfs-real/net", "net");
  AgentOptions o;
  o.sysfs_root = t.root();
  o.procfs_root = t.root();
  o.ethtool = false;
  o.tcp = false;
  auto rdma = collectors::DiscoverRdmaPorts(o.sysfs_root);
  ASSERT_TRUE(rdma.ok()) << rdma.status();
  std::vector<std::string> notes;
  const SourceContext ctx{o, rdma->ports, notes};
  EXPECT_NE(Find("port_state")->open(ctx), nullptr);
  EXPECT_EQ(Find("ethtool")->open(ctx), nullptr);  // --ethtool=off
  EXPECT_EQ(Find("tcp")->open(ctx), nullptr);      // --tcp=off
  EXPECT_EQ(Find("pma")->open(ctx), nullptr);      // no --pma
  EXPECT_TRUE(notes.empty()) << notes[0];

  o.tcp = true;
  EXPECT_NE(Find("tcp")->open(ctx), nullptr);  // procfs-real/net/{snmp,netstat}
  o.procfs_root = t.Path("nowhere");
  EXPECT_EQ(Find("tcp")->open(ctx), nullptr);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes[0], HasSubstr("TCP counters not read"));
}

}  // namespace
}  // namespace fabricscope::agent
