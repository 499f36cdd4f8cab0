// The per-communicator transfer ledger of the collective analysis (agent/transfer_ledger.h):
// bounded, and the sharers of a collective ranked and cut as CollectiveAnalysis.sharers says.
#include "agent/transfer_ledger.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace fabricscope::agent {
namespace {

constexpr int64_t kMs = 1'000'000;

v1::Collective Transfer(uint64_t comm, int64_t start_ms, int64_t end_ms, uint64_t bytes) {
  v1::Collective c;
  c.set_comm_hash(comm);
  c.set_start_ns(start_ms * kMs);
  c.set_end_ns(end_ms * kMs);
  c.set_proxy_bytes(bytes);
  return c;
}

// The (comm hash, bytes) sharers of c within scope (node-wide by default), and their total.
std::vector<std::pair<uint64_t, uint64_t>> Sharers(const TransferLedger& l, const v1::Collective& c,
                                                   TransferLedger::Scope scope = {},
                                                   uint64_t* total = nullptr) {
  v1::CollectiveAnalysis a;
  l.AddSharers(c, &a, scope);
  if (total != nullptr) *total = a.sharers_bytes_total();
  std::vector<std::pair<uint64_t, uint64_t>> v;
  for (const v1::SharerBytes& s : a.sharers()) v.emplace_back(s.comm_hash(), s.bytes());
  return v;
}

// Six other communicators ran beside one collective: the four that moved the most are named,
// most first, ties by hash; one that ran before it and one without network bytes are not.
TEST(TransferLedger, NamesTheFourLargestOthersMostFirst) {
  TransferLedger l(16);
  const v1::Collective mine = Transfer(1, 100, 200, 1'000);
  l.Remember(mine);
  l.Remember(Transfer(2, 100, 200, 300));
  l.Remember(Transfer(3, 150, 250, 800));  // half inside: 400
  l.Remember(Transfer(4, 0, 400, 4'000));  // a quarter inside: 1,000
  l.Remember(Transfer(5, 100, 200, 400));  // ties with 3 at 400: the lower hash first
  l.Remember(Transfer(6, 120, 130, 50));
  l.Remember(Transfer(7, 10, 90, 9'999));  // before it: silent throughout
  l.Remember(Transfer(8, 100, 200, 0));    // no network bytes: not kept
  using V = std::vector<std::pair<uint64_t, uint64_t>>;
  EXPECT_EQ(Sharers(l, mine), (V{{4, 1'000}, {3, 400}, {5, 400}, {2, 300}}));
  EXPECT_EQ(l.OwnBytes(mine), 1'000u);
  EXPECT_EQ(l.comms(), 7u);
}

// A collective alone on its node has no sharers, and one of no duration counts a transfer
// whole when it falls inside.
TEST(TransferLedger, AloneNoneAndAnInstantCountsWhole) {
  TransferLedger l(16);
  const v1::Collective mine = Transfer(1, 100, 200, 1'000);
  l.Remember(mine);
  EXPECT_TRUE(Sharers(l, mine).empty());
  l.Remember(Transfer(2, 150, 150, 700));
  using V = std::vector<std::pair<uint64_t, uint64_t>>;
  EXPECT_EQ(Sharers(l, mine), (V{{2, 700}}));
}

// At most max_comms communicators: one more forgets the one whose newest transfer ended first.
// Within one, back-to-back transfers merge into 10 ms entries with their bytes whole, entries
// that ended 5 s before the newest leave, and at most kPerComm stay.
TEST(TransferLedger, BoundedInCommunicatorsTimeAndEntries) {
  TransferLedger l(2);
  l.Remember(Transfer(1, 0, 100, 10));
  l.Remember(Transfer(2, 0, 300, 10));
  l.Remember(Transfer(3, 0, 200, 10));  // forgets 1 (ended at 100)
  EXPECT_EQ(l.comms(), 2u);
  const v1::Collective probe = Transfer(9, 0, 1'000, 1);
  using V = std::vector<std::pair<uint64_t, uint64_t>>;
  EXPECT_EQ(Sharers(l, probe), (V{{2, 10}, {3, 10}}));
  const auto all = [&](uint64_t comm) { return l.OwnBytes(Transfer(comm, 0, 100'000, 1)); };
  for (int i = 0; i < 1'000; ++i) l.Remember(Transfer(2, 1'000 + i, 1'001 + i, 1));
  EXPECT_EQ(all(2), 1'010u);                 // merged, every byte kept
  l.Remember(Transfer(2, 7'000, 7'001, 1));  // 5 s after the 1,000: they leave
  EXPECT_EQ(all(2), 1u);
  // 600 transfers 5 ms apart do not merge (a gap over 1 ms): the latest 512 stay.
  for (int i = 0; i < 600; ++i) l.Remember(Transfer(3, 8'000 + 5 * i, 8'001 + 5 * i, 1));
  EXPECT_EQ(all(3), TransferLedger::kPerComm);
}

// A fast communicator of another job (8 local ranks, a 1 KB collective of 0.5 ms each every
// 0.5 ms) during a 100 ms collective, fed 25 ms past its end: every one of its 1,600 transfers
// is counted, not only the newest few.
TEST(TransferLedger, AFastOtherJobIsCountedWhole) {
  TransferLedger l(16);
  const v1::Collective mine = Transfer(1, 50, 150, 1'000'000);
  for (int step = 0; step < 350; ++step) {
    const double t = step * 0.5;
    for (int rank = 0; rank < 8; ++rank) {
      v1::Collective c;
      c.set_comm_hash(2);
      c.set_start_ns(static_cast<int64_t>(t * kMs));
      c.set_end_ns(static_cast<int64_t>((t + 0.5) * kMs));
      c.set_proxy_bytes(1'000);
      l.Remember(c);
    }
    if (step == 100) l.Remember(mine);
  }
  const auto v = Sharers(l, mine);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NEAR(static_cast<double>(v[0].second), 1.6e6, 0.02 * 1.6e6);
}

// Records come in blocks per rank (a producer flushes every 5 ms): one rank's 20 collectives,
// then another's 20 of the same times. A collective that overlaps the tenth of each counts
// both.
TEST(TransferLedger, RecordsOutOfOrderByRankAreAllFound) {
  TransferLedger l(16);
  for (int rank = 0; rank < 2; ++rank) {
    for (int i = 0; i < 20; ++i) l.Remember(Transfer(2, 10 * i, 10 * i + 5, 1'000));
  }
  const v1::Collective mine = Transfer(1, 100, 105, 10);
  l.Remember(mine);
  using V = std::vector<std::pair<uint64_t, uint64_t>>;
  EXPECT_EQ(Sharers(l, mine), (V{{2, 2'000}}));
}

// A collective is settled once every communicator that was busy when it began (a transfer
// ending less than kBusyBeforeNs before its start) has reported one ending at or after its end:
// the other job's long collective that overlaps it is then in the ledger. One idle longer
// before holds nothing back.
TEST(TransferLedger, SettledOnceTheBusyOthersReportedPastItsEnd) {
  TransferLedger l(16);
  const v1::Collective mine = Transfer(1, 3'000, 3'100, 1'000);
  l.Remember(mine);
  l.Remember(Transfer(3, 0, 1'000, 500));  // idle for 2 s before it began
  EXPECT_TRUE(l.Settled(mine));
  l.Remember(Transfer(2, 2'500, 2'900, 400));  // busy: ended 100 ms before it began
  EXPECT_FALSE(l.Settled(mine));
  l.Remember(Transfer(2, 2'900, 3'050, 300));  // still inside it
  EXPECT_FALSE(l.Settled(mine));
  l.Remember(Transfer(2, 3'050, 3'400, 700));  // reaches past its end
  EXPECT_TRUE(l.Settled(mine));
  using V = std::vector<std::pair<uint64_t, uint64_t>>;
  EXPECT_EQ(Sharers(l, mine), (V{{2, 100 + 100}}));  // 50 of 150 ms of 300, 50 of 350 of 700
}

// A multi-rail node: job A's ranks on ports 0 and 1, job B's bulk transfer on port 1 only, job
// C's on port 0, and D spread over both. A's collective on port 1 counts B whole, C not at
// all, D by half, and only its own rank's port-1 bytes; node-wide it counts every one.
TEST(TransferLedger, AScopeOfOnePortCountsOnlyWhatCrossedIt) {
  TransferLedger l(16);
  const v1::Collective mine = Transfer(1, 100, 200, 1'000);
  l.Remember(mine, 0b10);
  l.Remember(Transfer(1, 100, 200, 3'000), 0b01);  // A's rank on port 0
  l.Remember(Transfer(2, 100, 200, 5'000), 0b10);  // B on port 1
  l.Remember(Transfer(3, 100, 200, 7'000), 0b01);  // C on port 0
  l.Remember(Transfer(4, 100, 200, 800), 0b11);    // D over both
  using V = std::vector<std::pair<uint64_t, uint64_t>>;
  const TransferLedger::Scope port1{0b10, 0.5};
  uint64_t total = 0;
  EXPECT_EQ(Sharers(l, mine, port1, &total), (V{{2, 5'000}, {4, 400}}));
  EXPECT_EQ(total, 5'400u);
  EXPECT_EQ(l.OwnBytes(mine, port1), 1'000u);
  EXPECT_EQ(Sharers(l, mine), (V{{3, 7'000}, {2, 5'000}, {4, 800}}));
  EXPECT_EQ(l.OwnBytes(mine), 4'000u);
  EXPECT_EQ(l.comms(), 5u);  // (communicator, port set) pairs
}

// A transfer whose ports are unknown (its process had no queue pair seen yet) counts by the
// scope's share of the node; with no scope it counts whole.
TEST(TransferLedger, UnknownPortsCountByTheScopesShare) {
  TransferLedger l(16);
  const v1::Collective mine = Transfer(1, 100, 200, 1'000);
  l.Remember(mine, 0b0100);
  l.Remember(Transfer(2, 100, 200, 8'000));  // ports unknown
  using V = std::vector<std::pair<uint64_t, uint64_t>>;
  EXPECT_EQ(Sharers(l, mine, {0b0100, 0.25}), (V{{2, 2'000}}));
  EXPECT_EQ(Sharers(l, mine, {}), (V{{2, 8'000}}));
}

}  // namespace
}  // namespace fabricscope::agent
