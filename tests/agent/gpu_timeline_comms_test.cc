// The communicators GpuTimeline keeps (agent/comm_registry.h): bounded, least recently active
// first out, and those of ended jobs forgotten; plus kernel times at the ends of int64.

#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "agent/comm_registry.h"
#include "agent/gpu_timeline.h"
#include "gtest/gtest.h"
#include "tests/agent/gpu_events.h"

namespace fabricscope::agent {
namespace {

constexpr int64_t kWindow = 1'000'000'000;

std::set<uint64_t> TotalsComms(const v1::Batch& b) {
  std::set<uint64_t> comms;
  for (const v1::CollectiveTotals& t : b.gpu().collective_totals()) comms.insert(t.comm_hash());
  return comms;
}

GpuEvent CommOf(uint64_t comm, int32_t pid) {
  GpuEvent e = Event(gpu::RecordType::kComm, pid, 0, 0);
  e.comm.comm_hash = comm;
  e.comm.rank = 1;
  e.comm.nranks = 4;
  gpu::CopyFixed(e.comm.name, "dp");
  return e;
}

TEST(CommRegistry, ForgetsTheLeastRecentlyActiveWhenFull) {
  CommRegistry r(2);
  EXPECT_FALSE(r.Touch(1, 0).has_value());
  EXPECT_FALSE(r.Touch(2, 0).has_value());
  EXPECT_TRUE(r.full());
  EXPECT_FALSE(r.Touch(1, 1).has_value());  // 1 is now the more recent
  EXPECT_EQ(r.Touch(3, 2), std::optional<uint64_t>(2));
  EXPECT_TRUE(r.Contains(1));
  EXPECT_FALSE(r.Contains(2));
  EXPECT_EQ(r.IdleSince(2), std::vector<uint64_t>{1});  // 3 was active at 2
  EXPECT_EQ(r.LeastRecent([](uint64_t c) { return c != 1; }), std::optional<uint64_t>(3));
  r.Erase(1);
  EXPECT_EQ(r.size(), 1u);
  EXPECT_FALSE(r.Touch(4, 3).has_value());
}

// A producer naming ever more communicators (a hostile one, or a node that ran job after job)
// must not push a window past what the aggregator accepts: that would drop the node's GPU
// window at every window from then on. Communicators no connected process names (no
// communicator record: ended jobs) make room first, uncounted.
TEST(GpuTimelineComms, AWindowNeverNamesMoreCommunicatorsThanTheBound) {
  GpuTimeline t({.max_communicators = 4});
  int64_t at = 0;
  for (uint64_t comm = 1; comm <= 10; ++comm) {
    t.Add(Collective(comm, 1, "AllReduce", 1 << 20, at + 1000, at + 2000));
    at += 10'000;
  }
  v1::Batch b;
  FillWindow(t, 0, kWindow, {4242}, &b);
  EXPECT_EQ(TotalsComms(b), (std::set<uint64_t>{7, 8, 9, 10}));  // the last four
  EXPECT_EQ(b.gpu().communicators_evicted_total(), 0u);          // none was named: ended
  EXPECT_EQ(b.collectives_size(), 10);                           // each is still sent

  // A communicator active again counts as recent: 7 stays when 11 arrives, 8 goes.
  t.Add(Collective(7, 2, "AllReduce", 1 << 20, kWindow + 1000, kWindow + 2000));
  t.Add(Collective(11, 1, "AllReduce", 1 << 20, kWindow + 3000, kWindow + 4000));
  v1::Batch b2;
  FillWindow(t, kWindow, 2 * kWindow, {4242}, &b2);
  EXPECT_EQ(TotalsComms(b2), (std::set<uint64_t>{7, 9, 10, 11}));
  uint64_t count7 = 0;
  for (const v1::CollectiveTotals& c : b2.gpu().collective_totals()) {
    if (c.comm_hash() == 7) count7 = c.count();
  }
  EXPECT_EQ(count7, 2u);

  // Proxy bytes count as activity, at once: 9 becomes the most recent, and 12 pushes out the
  // least recent (10), its totals with it.
  t.Add(ProxyOp(9, 3, 2, true, 4096));
  t.Add(ProxyOp(12, 1, 2, true, 4096));
  v1::Batch b3;
  FillWindow(t, 2 * kWindow, 3 * kWindow, {4242}, &b3);
  EXPECT_EQ(TotalsComms(b3), (std::set<uint64_t>{7, 9, 11}));
  std::set<uint64_t> pair_comms;
  for (const v1::RankPairBytes& p : b3.gpu().rank_pairs()) pair_comms.insert(p.comm_hash());
  EXPECT_EQ(pair_comms, (std::set<uint64_t>{9, 12}));
  EXPECT_EQ(b3.gpu().communicators_evicted_total(), 0u);
}

// A live job's rarely used communicator (a checkpoint barrier) outlasts ended ones however
// long ago it was active; only when every communicator is live does one go, counted.
TEST(GpuTimelineComms, ALiveCommunicatorOutlastsEndedOnesAndIsCountedWhenItGoes) {
  GpuTimeline t({.max_communicators = 2});
  t.Add(CommOf(1, 4242));
  t.Add(Collective(1, 1, "AllReduce", 1 << 20, 1000, 2000));  // the oldest activity
  for (uint64_t comm = 2; comm <= 6; ++comm) {
    t.Add(Collective(comm, 1, "AllReduce", 1 << 20, comm * 10'000, comm * 10'000 + 1000));
  }
  v1::Batch b;
  FillWindow(t, 0, kWindow, {4242}, &b);
  EXPECT_EQ(TotalsComms(b), (std::set<uint64_t>{1, 6}));
  EXPECT_EQ(b.gpu().communicators_evicted_total(), 0u);
  ASSERT_EQ(b.gpu().communicators_size(), 1);

  // Both live now (2 is named, 6 goes uncounted for it); a third live one costs the least
  // recent live one, counted.
  t.Add(CommOf(2, 4242));
  t.Add(Collective(2, 2, "AllReduce", 1 << 20, kWindow + 1000, kWindow + 2000));
  v1::Batch b2;
  FillWindow(t, kWindow, 2 * kWindow, {4242}, &b2);
  EXPECT_EQ(TotalsComms(b2), (std::set<uint64_t>{1, 2}));
  EXPECT_EQ(b2.gpu().communicators_evicted_total(), 0u);
  t.Add(Collective(3, 1, "AllReduce", 1 << 20, 2 * kWindow + 1000, 2 * kWindow + 2000));
  v1::Batch b3;
  FillWindow(t, 2 * kWindow, 3 * kWindow, {4242}, &b3);
  EXPECT_EQ(TotalsComms(b3), (std::set<uint64_t>{2, 3}));
  EXPECT_EQ(b3.gpu().communicators_evicted_total(), 1u);
}

TEST(GpuTimelineComms, AnEndedJobsCommunicatorsLeaveAfterFiveIdleMinutes) {
  GpuTimeline t;
  t.Add(CommOf(0xaa, 100));  // a job still running, idle meanwhile
  t.Add(CommOf(0xbb, 200));  // a job that ends
  t.Add(Collective(0xaa, 1, "AllReduce", 1 << 20, 1000, 2000));
  t.Add(Collective(0xbb, 1, "AllReduce", 1 << 20, 1000, 2000));
  const std::vector<int32_t> running = {100};  // pid 200 disconnected
  // Both were last active 2 us into the first window (their collectives' receipt). A
  // communicator is forgotten at the end of the first window that ends more than kIdleNs later:
  // 301 s.
  v1::Batch b;
  int64_t w = 0;
  for (; (w + 1) * kWindow <= GpuTimeline::kIdleNs + kWindow; ++w) {
    b.Clear();
    FillWindow(t, w * kWindow, (w + 1) * kWindow, running, &b);
    ASSERT_EQ(TotalsComms(b), (std::set<uint64_t>{0xaa, 0xbb})) << "window " << w;
  }
  b.Clear();
  FillWindow(t, w * kWindow, (w + 1) * kWindow, running, &b);
  EXPECT_EQ(TotalsComms(b), std::set<uint64_t>{0xaa});
  EXPECT_EQ(b.gpu().communicators_evicted_total(), 0u);  // an ended job is not a lost one
  ASSERT_EQ(b.gpu().communicators_size(), 1);
  EXPECT_EQ(b.gpu().communicators(0).comm_hash(), 0xaau);
}

// A job of a few seconds can connect, run and leave inside one window: its communicator is still
// listed in the first window after its process left (the aggregator learns the communicator's
// job from that list), and not in the next.
TEST(GpuTimelineComms, ACommunicatorIsListedOnceMoreAfterItsProcessLeaves) {
  GpuTimeline t;
  t.Add(CommOf(0xdd, 500));
  t.Add(Collective(0xdd, 1, "AllReduce", 1 << 20, 1000, 2000));
  v1::Batch first, second;
  FillWindow(t, 0, kWindow, {}, &first);  // pid 500 has already gone
  ASSERT_EQ(first.gpu().communicators_size(), 1);
  EXPECT_EQ(first.gpu().communicators(0).pid(), 500);
  FillWindow(t, kWindow, 2 * kWindow, {}, &second);
  EXPECT_EQ(second.gpu().communicators_size(), 0);
  // A process that reconnects (the same pid: its CommRecord again) is listed as before.
  t.Add(CommOf(0xdd, 500));
  v1::Batch third;
  FillWindow(t, 2 * kWindow, 3 * kWindow, {500}, &third);
  EXPECT_EQ(third.gpu().communicators_size(), 1);
}

// On a node up for hours the windows end hours into CLOCK_MONOTONIC. A job that ran and ended
// before the agent's first window end was stamped at the clock's 0 and forgotten at once (its
// totals went back to nothing: CI's GpuAgent.StandaloneAgentServesCollectivesFromItsSocket
// showed 1,500 of 2,000 collectives); it is as old as its datagrams.
TEST(GpuTimelineComms, AJobThatEndsBeforeTheFirstWindowEndKeepsItsTotals) {
  constexpr int64_t kUp = 16LL * 3600 * kWindow;  // 16 hours since boot
  GpuTimeline t;
  GpuEvent comm = CommOf(0xcc, 300);
  comm.received_ns = kUp + 500;
  t.Add(comm);
  t.Add(Collective(0xcc, 1, "AllReduce", 1 << 20, kUp + 1000, kUp + 2000));
  t.Add(ProxyOp(0xcc, 1, 2, true, 4096));
  for (int w = 0; w < 3; ++w) {  // pid 300 has gone
    v1::Batch b;
    FillWindow(t, kUp + w * kWindow, kUp + (w + 1) * kWindow, {}, &b);
    ASSERT_EQ(TotalsComms(b), std::set<uint64_t>{0xcc}) << "window " << w;
    EXPECT_EQ(b.gpu().collective_totals(0).count(), 1u);
    ASSERT_EQ(b.gpu().rank_pairs_size(), 1) << "window " << w;
    EXPECT_EQ(b.gpu().rank_pairs(0).bytes_total(), 4096u);
  }
}

TEST(GpuTimelineComms, KernelTimesAtTheEndsOfInt64GiveTheirTrueSpan) {
  GpuTimeline t;
  const int64_t lo = -std::numeric_limits<int64_t>::max();
  const int64_t hi = std::numeric_limits<int64_t>::max();
  for (auto [start, end] : {std::pair{lo, hi}, {hi, lo}}) {  // the second ends before it starts
    GpuEvent k = Kernel(0, "k", false, start, end);
    k.received_ns = 0;  // before the window: due whatever its times say
    t.Add(k);
  }
  v1::Batch b;
  FillWindow(t, 1, kWindow, {}, &b);
  ASSERT_EQ(b.gpu().kernel_totals_size(), 1);
  EXPECT_EQ(b.gpu().kernel_totals(0).kernels_total(), 2u);
  EXPECT_DOUBLE_EQ(b.gpu().kernel_totals(0).kernel_seconds_total(), 2.0 * 9223372036.854775807);
}

}  // namespace
}  // namespace fabricscope::agent
