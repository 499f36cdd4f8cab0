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

#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::agent {

// Cost per analysed collective: AddSharers and Settled look at each other communicator's newest
// transfers, back to 8 in a row that ended before the collective began (measured by
// fabricscope_bench_jobs, tests/README.md "Benchmarks").
// Not thread-safe: the collective analysis calls it from its one thread.
// Memory: at most max_comms x kPerComm x 24 bytes (1,024 communicators: 1.5 MiB).
class TransferLedger {
 public:
  // Transfers kept per communicator: 8 local ranks x 8 sequence numbers.
  static constexpr size_t kPerComm = 64;
  // The most communicators CollectiveAnalysis.sharers names (the bytes' largest).
  static constexpr size_t kMaxSharers = 4;
  // A communicator counts as busy at a collective's start when one of its transfers ended at
  // most this long before it (a training job's gap between collectives, its compute, is shorter).
  static constexpr int64_t kBusyBeforeNs = 1'000'000'000;
  // How long past a collective's end its analysis waits for the busy ones to report (Settled):
  // a record comes when its collective ends, so another job's collective that began before this
  // one and ends within this of it is counted. Bounded so that a job that stopped holds the
  // node's analyses back this long at most (at 16,000 collectives a second, 8,000 wait: within
  // CollectiveAnalysisOptions::max_pending).
  static constexpr int64_t kSettleWaitNs = 500'000'000;

  // max_comms: communicators kept; one more forgets the one whose newest transfer ended first
  // (its job is the likeliest over).
  explicit TransferLedger(size_t max_comms) : max_comms_(max_comms) {}

  // Keeps c's transfer (nothing when it has no proxy bytes).
  void Remember(const v1::Collective& c);
  // This node's proxy bytes of c's communicator during c, pro rata to each transfer's overlap
  // with [c.start_ns, c.end_ns] (a transfer of no duration counts whole inside), at least c's
  // own; 0 when c has none.
  uint64_t OwnBytes(const v1::Collective& c) const;
  // Appends to a->sharers the other communicators' proxy bytes during c, pro rata likewise,
  // the kMaxSharers largest, most first (ties by communicator hash); none that moved nothing.
  void AddSharers(const v1::Collective& c, v1::CollectiveAnalysis* a) const;
  // Whether every other communicator busy when c began (kBusyBeforeNs) has reported a transfer
  // that ends at or after c's end, so that AddSharers(c) sees all of theirs that overlap c.
  bool Settled(const v1::Collective& c) const;

  size_t comms() const { return transfers_.size(); }

 private:
  struct Transfer {
    int64_t start_ns, end_ns;
    uint64_t bytes;
  };
  static double OverlapBytes(const std::deque<Transfer>& transfers, int64_t t0, int64_t t1);

  size_t max_comms_;
  std::map<uint64_t, std::deque<Transfer>> transfers_;  // by communicator hash
};

}  // namespace fabricscope::agent
