#pragma once

// The network transfers of each communicator on this node, as the collective records say (each
// record's proxy bytes over its [start, end]), kept for the collective analysis: how many bytes a
// collective's own communicator moved while it ran (CollectiveAnalysis.own_bytes) and how many
// every other communicator moved meanwhile (CollectiveAnalysis.sharers), which is how the
// aggregator names the job that shared a node's link with a slow collective.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <utility>

#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::agent {

// Which ports a transfer crossed, or a collective's figures are restricted to: a bit per port
// index below 64 (agent/qp_ports.h: the ports its process has queue pairs on); 0 = unknown,
// node-wide. A query over `mask` counts a transfer over ports m by the share of m in it,
// popcount(m & mask) / popcount(m) (its bytes spread evenly over its ports: NCCL alternates
// a connection's QPs over its devices, src/transport/net_ib.cc ncclIbConnect), and a transfer
// whose ports are unknown by unknown_share, what the caller takes as the mask's part of the
// node (popcount(mask) over the ports a collective could use); mask 0 counts everything whole.
struct LedgerScope {
  uint64_t mask = 0;
  double unknown_share = 1;
};

// Kept by time, not by count: each communicator's transfers sorted by their end, a new one that
// overlaps or follows the latest within kMergeGapNs merged into it while the merged span stays
// under kMergeSpanNs (the node's 8 ranks' back-to-back collectives of a fast communicator become
// one entry per 10 ms, spread evenly over it: totals exact, timing to 10 ms), and entries that
// ended more than kKeepNs before the communicator's newest one dropped (a collective is analysed
// within CollectiveAnalysisOptions::max_wait, 3 s, of its arrival).
// Cost per analysed collective: AddSharers and Settled look at each other communicator's
// entries that end after the collective began (measured by fabricscope_bench_jobs,
// tests/README.md "Benchmarks").
// Not thread-safe: the collective analysis calls it from its one thread.
// Memory: at most max_comms x kPerComm x 24 bytes (1,024 (communicator, port set) pairs:
// 12 MiB; a node of 16 busy communicators on one port each: 200 KiB).
class TransferLedger {
 public:
  // Entries kept per communicator: 5 s of back-to-back traffic at kMergeSpanNs each.
  static constexpr size_t kPerComm = 512;
  static constexpr int64_t kKeepNs = 5'000'000'000;
  static constexpr int64_t kMergeGapNs = 1'000'000;
  static constexpr int64_t kMergeSpanNs = 10'000'000;
  // The most communicators CollectiveAnalysis.sharers names (the bytes' largest).
  static constexpr size_t kMaxSharers = 4;
  // A communicator counts as busy at a collective's start when one of its transfers ended at
  // most this long before it (a training job's gap between collectives, its compute, is shorter).
  static constexpr int64_t kBusyBeforeNs = 1'000'000'000;
  // How long past a collective's end its analysis waits for the busy ones to report (Settled):
  // a record comes when its collective ends, so another job's collective that began before this
  // one and ends within this of it is counted. The analyses go in arrival order, so a wait holds
  // the node's later ones back with it, this long at most, whenever a busy communicator has not
  // reported past the collective's end (a job that stopped, a per-step all-reduce beside a
  // continuous one): at 16,000 collectives a second 8,000 wait, within
  // CollectiveAnalysisOptions::max_pending.
  static constexpr int64_t kSettleWaitNs = 500'000'000;

  using Scope = LedgerScope;

  // max_comms: (communicator, port set) pairs kept; one more forgets the one whose newest
  // transfer ended first (its job is the likeliest over).
  explicit TransferLedger(size_t max_comms) : max_comms_(max_comms) {}

  // Keeps c's transfer over the ports `mask` (nothing when it has no proxy bytes).
  void Remember(const v1::Collective& c, uint64_t mask = 0);
  // This node's proxy bytes of c's communicator during c within `scope`, pro rata to each
  // transfer's overlap with [c.start_ns, c.end_ns] (a transfer of no duration counts whole
  // inside), at least c's own; 0 when c has none.
  uint64_t OwnBytes(const v1::Collective& c, Scope scope = {}) const;
  // Appends to a->sharers the other communicators' proxy bytes during c within `scope`, pro
  // rata likewise, the kMaxSharers largest, most first (ties by communicator hash); none that
  // moved nothing. Sets a->sharers_bytes_total to all of theirs.
  void AddSharers(const v1::Collective& c, v1::CollectiveAnalysis* a, Scope scope = {}) const;
  // Whether every other communicator busy when c began (kBusyBeforeNs) has reported a transfer
  // that ends at or after c's end, so that AddSharers(c) sees all of theirs that overlap c.
  bool Settled(const v1::Collective& c) const;

  // (communicator, port set) pairs held.
  size_t comms() const { return transfers_.size(); }

 private:
  struct Transfer {
    int64_t start_ns, end_ns;
    uint64_t bytes;
  };
  // Sorted by end: the ones that end before t0 are skipped without being read.
  static double OverlapBytes(const std::deque<Transfer>& transfers, int64_t t0, int64_t t1);
  // The share of a transfer over `ports` that a query in `scope` counts.
  static double Weight(uint64_t ports, Scope scope);

  size_t max_comms_;
  // By (communicator hash, port mask): one communicator's ranks on different ports are kept
  // apart, so that a query over one port reads only theirs.
  std::map<std::pair<uint64_t, uint64_t>, std::deque<Transfer>> transfers_;
};

}  // namespace fabricscope::agent
