// The forwarder's queue (exporters/shard/forwarder.h) without a live owner: bounded, the oldest
// batch dropped and counted, and records routed under the current peer list.

#include "exporters/shard/forwarder.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace fabricscope::exporters {
namespace {

// A communicator hash whose owner in `ring` is `owner`.
uint64_t CommOwnedBy(const PeerRing& ring, size_t owner) {
  for (uint64_t label = 1;; ++label) {
    if (ring.OwnerOfLabel(static_cast<uint32_t>(label)) == owner) return label << 32 | 1;
  }
}

v1::ForwardedAnalysis Record(uint64_t comm, const std::string& node) {
  v1::ForwardedAnalysis r;
  r.set_node(node);
  r.mutable_collective()->set_comm_hash(comm);
  return r;
}

// Port 1 on loopback: nothing listens, so nothing is ever acked.
std::shared_ptr<const PeerRing> Ring(int peers) {
  std::vector<Peer> list = {{"127.0.0.1:9", "127.0.0.1:10"}};
  for (int i = 1; i < peers; ++i) list.push_back({absl::StrCat("127.0.0.1:", i), "127.0.0.1:2"});
  return std::make_shared<const PeerRing>(list, 0);
}

TEST(Forwarder, AFullQueueDropsItsOldestBatchAndCountsItsRecords) {
  std::vector<v1::ForwardedAnalysis> here;
  Forwarder f({.self = "127.0.0.1:9",
               .max_queued_batches = 2,
               .max_records_per_batch = 1,
               .match_here = [&](std::vector<v1::ForwardedAnalysis>&& r) {
                 for (auto& x : r) here.push_back(std::move(x));
               }});
  const auto ring = Ring(2);
  f.SetRing(ring);
  const uint64_t theirs = CommOwnedBy(*ring, 1), mine = CommOwnedBy(*ring, 0);
  for (int i = 0; i < 5; ++i) {
    std::vector<v1::ForwardedAnalysis> batch = {Record(theirs, absl::StrCat("n", i))};
    f.Forward(*ring, std::move(batch));
  }
  std::vector<v1::ForwardedAnalysis> own = {Record(mine, "n9")};
  f.Forward(*ring, std::move(own));  // this aggregator's own: matched here, never queued
  ASSERT_EQ(f.Stats().size(), 1u);
  EXPECT_EQ(f.Stats()[0].peer, "127.0.0.1:1");
  EXPECT_EQ(f.Stats()[0].queued, 2u);
  EXPECT_EQ(f.Stats()[0].dropped, 3u);
  EXPECT_EQ(f.Stats()[0].forwarded, 0u);
  ASSERT_EQ(here.size(), 1u);
  EXPECT_EQ(here[0].node(), "n9");
  EXPECT_EQ(f.peers(), 2u);

  // The peer leaves the list: what its stream held is dropped and counted, and the records
  // still gathered for it (none here) would be routed under the new list.
  f.SetRing(Ring(1));
  EXPECT_EQ(f.Stats()[0].queued, 0u);
  EXPECT_EQ(f.Stats()[0].dropped, 5u);
  std::vector<v1::ForwardedAnalysis> after = {Record(theirs, "n7")};
  f.Forward(*ring, std::move(after));  // routed by an older list: the current one owns it here
  ASSERT_EQ(here.size(), 2u);
  EXPECT_EQ(here[1].node(), "n7");
  f.Stop(0);
}

}  // namespace
}  // namespace fabricscope::exporters
