#include "exporters/analysis/names.h"

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "exporters/analysis/cross_rank.h"
#include "gtest/gtest.h"
#include "tests/exporters/analysis/cross_rank_test_util.h"

namespace fabricscope::exporters {
namespace {

TEST(NameTable, EqualStringsAreOneNameAndTheTableStopsAtItsBound) {
  NameTable t(3);
  const std::optional<Name> a = t.Intern("node-a");
  const std::string again = "node-a";  // another buffer with the same text
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->str(), "node-a");
  EXPECT_EQ(*t.Intern(again), *a);
  EXPECT_EQ(*t.Find("node-a"), *a);
  EXPECT_NE(*t.Intern("node-b"), *a);
  EXPECT_TRUE(t.Intern("")->empty());  // "" is no name and takes no room
  EXPECT_EQ(t.Intern("")->str(), "");
  EXPECT_FALSE(t.Find("node-c").has_value());  // Find adds nothing
  EXPECT_EQ(t.size(), 2u);
  EXPECT_TRUE(t.Intern("a name longer than sixteen bytes").has_value());
  EXPECT_FALSE(t.Intern("node-d").has_value());       // full: a new name is refused
  EXPECT_EQ(*t.Intern("node-b"), *t.Find("node-b"));  // known names still resolve
  EXPECT_EQ(t.size(), 3u);
}

// Threads interning the same names at once get the same Names (one copy each).
TEST(NameTable, ConcurrentInternsAgree) {
  NameTable t(1000);
  constexpr int kThreads = 4, kNames = 200;
  std::vector<std::vector<Name>> got(kThreads);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      for (int n = 0; n < kNames; ++n) {
        // Each thread walks the names from its own starting point.
        got[i].push_back(*t.Intern(absl::StrCat("n", (n + i * 37) % kNames)));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(t.size(), static_cast<size_t>(kNames));
  for (int i = 0; i < kThreads; ++i) {
    for (int n = 0; n < kNames; ++n) {
      const int name = (n + i * 37) % kNames;
      EXPECT_EQ(got[i][n], *t.Find(absl::StrCat("n", name)));
      EXPECT_EQ(got[i][n].str(), absl::StrCat("n", name));
    }
  }
}

// With the matcher's name table full, a new node's analyses and a new function's are dropped
// and counted, and a known node's instance still completes.
TEST(NameTable, AMatcherWithNoRoomForANameDropsAndCounts) {
  CrossRankOptions o;
  o.max_names = 3;  // node0, node1 and AllReduce
  CrossRankAnalysis x(o);
  auto send = [&](const std::string& node, int rank, const std::string& func) {
    v1::Batch b;
    v1::Collective* c = b.add_collectives();
    c->set_comm_hash(7);
    c->set_rank(rank);
    c->set_nranks(2);
    c->set_func(func);
    c->set_seq(1);
    c->set_start_ns(1'000);
    c->set_end_ns(2'000);
    c->mutable_analysis()->set_cause(v1::COLLECTIVE_CAUSE_NORMAL);
    x.OnBatch(node, b);
  };
  send("node0", 0, "AllReduce");
  send("node1", 1, "AllReduce");
  EXPECT_EQ(x.instances_total(), 1u);
  send("node2", 0, "AllReduce");  // a third node: no room
  send("node0", 0, "AllGather");  // a second function: no room
  EXPECT_EQ(x.pending(), 0u);
  EXPECT_EQ(DroppedAnalyses(x), 2);
}

}  // namespace
}  // namespace fabricscope::exporters
