// LoadOneYamlDocument (collectors/common/yaml_file.h): one document, no key given twice at any
// depth, a bounded walk over aliases.
#include "collectors/common/yaml_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/common/fake_tree.h"

namespace fabricscope::common {
namespace {

using ::testing::HasSubstr;

std::string Error(testing::FakeTree& t, const std::string& text) {
  t.Write("f.yaml", text);
  return std::string(LoadOneYamlDocument(t.Path("f.yaml")).status().message());
}

TEST(LoadOneYamlDocument, ReturnsTheDocumentOrNullForAnEmptyFile) {
  testing::FakeTree t;
  t.Write("f.yaml", "a: 1\nb: {c: [x, y]}\n---\n");  // a trailing empty document is allowed
  absl::StatusOr<YAML::Node> doc = LoadOneYamlDocument(t.Path("f.yaml"));
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_EQ((*doc)["b"]["c"][1].as<std::string>(), "y");
  t.Write("f.yaml", "# only a comment\n");
  doc = LoadOneYamlDocument(t.Path("f.yaml"));
  ASSERT_TRUE(doc.ok()) << doc.status();
  EXPECT_TRUE(doc->IsNull());
  // The same key in two different maps is two keys.
  t.Write("f.yaml", "a: {x: 1}\nb: {x: 2}\nl: [{x: 1}, {x: 2}]\n");
  EXPECT_TRUE(LoadOneYamlDocument(t.Path("f.yaml")).ok());
}

TEST(LoadOneYamlDocument, AKeyGivenTwiceAnywhereIsNamedByItsPath) {
  testing::FakeTree t;
  EXPECT_EQ(Error(t, "a: 1\nb: 2\na: 3\n"), "a: given twice");
  EXPECT_EQ(Error(t, "line_rate: {eth0: 100Gb, eth1: 1Gb, eth0: 200Gb}\n"),
            "line_rate.eth0: given twice");
  EXPECT_EQ(Error(t, "remote_write:\n  - url: http://a\n  - url: http://b\n    url: http://c\n"),
            "remote_write[1].url: given twice");
  EXPECT_THAT(Error(t, "a: 1\n---\nb: 2\n"), HasSubstr("2 YAML documents (---)"));
}

TEST(LoadOneYamlDocument, NestedAliasesStopAtTheNodeBound) {
  // Each level names the previous one ten times: 10^8 nodes when walked, a few hundred bytes.
  std::string text = "l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i <= 8; ++i) {
    const std::string prev = "*l" + std::to_string(i - 1);
    text += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) text += (k == 0 ? "" : ", ") + prev;
    text += "]\n";
  }
  testing::FakeTree t;
  EXPECT_EQ(Error(t, text), "more than 1000000 YAML nodes");
}

TEST(LoadOneYamlDocument, AnAliasInsideItselfIsRefusedNotFollowedForever) {
  testing::FakeTree t;
  // The list is at depth 1 as "a", and at depth 64 as "a" and 63 x "[0]".
  std::string at = "a";
  for (int i = 0; i < 63; ++i) at += "[0]";
  EXPECT_EQ(Error(t, "a: &x [*x]\n"),
            at + ": nested deeper than 64 levels, or an alias inside the node it names");
  std::string deep = "v";  // 65 lists, one inside the next
  for (int i = 0; i < 65; ++i) deep = "[" + deep + "]";
  EXPECT_THAT(Error(t, "a: " + deep + "\n"), HasSubstr("nested deeper than 64 levels"));
  deep = "v";
  for (int i = 0; i < 63; ++i) deep = "[" + deep + "]";  // the top map and 63 lists: 64 levels
  EXPECT_EQ(Error(t, "a: " + deep + "\n"), "");
}

// yaml-cpp 0.7 reads this as documents without end (HandleNextDocument returns true forever):
// YAML::LoadAll filled memory until it died (fuzz.config found it, under ASan a timeout).
TEST(LoadOneYamlDocument, AStreamWhoseParseNeverEndsIsRefused) {
  testing::FakeTree t;
  EXPECT_THAT(Error(t, "[1, 2]\n,} {a: b{}]\n"), HasSubstr("more than 100 YAML documents"));
  std::string many;  // 100 documents, empty but one: allowed
  for (int i = 0; i < 99; ++i) many += "---\n";
  EXPECT_EQ(Error(t, many + "---\nnode: a\n"), "");
  EXPECT_THAT(Error(t, many + "---\n---\nnode: a\n"), HasSubstr("more than 100 YAML"));
}

TEST(LoadOneYamlDocument, MalformedTextThrowsForTheCallerToWord) {
  testing::FakeTree t;
  t.Write("f.yaml", "a: [\n");
  EXPECT_THROW((void)LoadOneYamlDocument(t.Path("f.yaml")), YAML::Exception);
}

}  // namespace
}  // namespace fabricscope::common
