#include "exporters/shard/peer_ring.h"

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace fabricscope::exporters {
namespace {

std::vector<Peer> Peers(int n) {
  std::vector<Peer> v;
  for (int i = 1; i <= n; ++i) {
    v.push_back({absl::StrCat("10.0.0.", i, ":50051"), absl::StrCat("10.0.0.", i, ":9400")});
  }
  return v;
}

std::vector<uint32_t> Labels(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint32_t> v(n);
  for (uint32_t& l : v) l = static_cast<uint32_t>(rng());
  return v;
}

TEST(PeerRing, ParsesTheListAndNamesABadEntry) {
  const auto ok = ParsePeers(" a:50051=a:9400, [::1]:7000=[::1]:7001 ,");
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->size(), 2u);
  EXPECT_EQ((*ok)[0].grpc, "a:50051");
  EXPECT_EQ((*ok)[0].http, "a:9400");
  EXPECT_EQ((*ok)[1].grpc, "[::1]:7000");
  for (const char* bad :
       {"a:50051", "a:50051=a", "a:0=a:9400", "a:50051=a:70000", ":1=a:2", "a:1=b:2=c:3"}) {
    const auto r = ParsePeers(bad);
    EXPECT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status();
  }
  const auto twice = ParsePeers("a:1=a:2,a:1=b:3");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("listed twice"), std::string::npos);
}

// The owners of a few labels among three peers, computed independently (FNV-1a 64 and the
// splitmix64 finalizer written in Python): aggregators of different builds must agree.
TEST(PeerRing, OwnersMatchAnIndependentComputation) {
  const PeerRing ring(Peers(3), 0);
  EXPECT_EQ(ring.OwnerOfLabel(0x12345678), 1u);
  EXPECT_EQ(ring.OwnerOfLabel(0xdeadbeef), 0u);
  EXPECT_EQ(ring.OwnerOfLabel(0), 2u);
  EXPECT_EQ(ring.OwnerOfLabel(0xffffffff), 0u);
  EXPECT_EQ(ring.OwnerOfLabel(0xc1ea0001), 2u);
  // Only the label (top 32 bits) counts.
  EXPECT_EQ(ring.OwnerOf(0xc1ea000100000000ull), 2u);
  EXPECT_EQ(ring.OwnerOf(0xc1ea0001ffffffffull), 2u);
  EXPECT_TRUE(PeerRing(Peers(3), 2).Owns(0xc1ea000112345678ull));
  EXPECT_FALSE(PeerRing(Peers(3), 1).Owns(0xc1ea000112345678ull));
}

TEST(PeerRing, TheListsOrderDoesNotMatterAndTheShareIsEven) {
  std::vector<Peer> shuffled = Peers(3);
  std::reverse(shuffled.begin(), shuffled.end());
  const PeerRing a(Peers(3), 0), b(shuffled, 0);
  std::vector<size_t> owned(3, 0);
  const std::vector<uint32_t> labels = Labels(30'000, 1);
  for (uint32_t l : labels) {
    EXPECT_EQ(a.peers()[a.OwnerOfLabel(l)].grpc, b.peers()[b.OwnerOfLabel(l)].grpc);
    ++owned[a.OwnerOfLabel(l)];
  }
  for (size_t n : owned) {  // 1/3 each; 30,000 draws: sd 82, so +-1,000 is 12 sd
    EXPECT_GT(n, 9'000u);
    EXPECT_LT(n, 11'000u);
  }
}

// Adding a fourth peer moves about a quarter of the communicators, all to it; removing one
// moves only those it owned.
TEST(PeerRing, AddingOrRemovingAPeerMovesOnlyItsShare) {
  const PeerRing three(Peers(3), 0), four(Peers(4), 0);
  const std::vector<uint32_t> labels = Labels(40'000, 2);
  size_t moved = 0;
  for (uint32_t l : labels) {
    const size_t before = three.OwnerOfLabel(l), after = four.OwnerOfLabel(l);
    if (before == after) continue;
    ++moved;
    EXPECT_EQ(after, 3u) << "label " << l << " moved between old peers";
  }
  EXPECT_GT(moved, 9'000u);  // 1/4 of 40,000 = 10,000, sd 87
  EXPECT_LT(moved, 11'000u);

  std::vector<Peer> without_second = Peers(3);
  without_second.erase(without_second.begin() + 1);
  const PeerRing two(without_second, 0);
  for (uint32_t l : labels) {
    const std::string& before = three.peers()[three.OwnerOfLabel(l)].grpc;
    const std::string& after = two.peers()[two.OwnerOfLabel(l)].grpc;
    if (before != "10.0.0.2:50051") {
      EXPECT_EQ(before, after) << "label " << l;
    }
  }
}

}  // namespace
}  // namespace fabricscope::exporters
