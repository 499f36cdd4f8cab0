#pragma once

// Matching the ranks of collective instances: the reports of one (communicator, function,
// sequence number) are gathered until all its ranks reported, then the instance is completed,
// classified (collective_cause.h) and kept among the recent ones
// (exporters/analysis/cross_rank.h states what each figure means).

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "exporters/analysis/collective_cause.h"
#include "exporters/analysis/cross_rank_types.h"
#include "exporters/analysis/diagnosis.h"

namespace fabricscope::exporters {

// Thread-safe, built for several ingest threads: communicators are split over kCommShards
// shards by hash, each behind its own lock, so that batches of different communicators match
// in parallel. Each shard has its own Diagnosis of up to diagnosis.max_comms communicators (and
// diagnosis.max_kinds / kCommShards histories) on one shared clock.
class CollectiveMatcher {
 public:
  static constexpr size_t kCommShards = 16;
  explicit CollectiveMatcher(const CrossRankOptions& options);

  // Matches the reports shard by shard; returns the straggler-score updates of the instances
  // they completed (one per rank of each). observe non-null: called with each completed instance
  // whose cause is not normal, under its shard's lock (the event history's,
  // exporters/history/).
  using InstanceObserver = std::function<void(const CollectiveInstance&)>;
  std::vector<BlameUpdate> Match(std::vector<RankReport>&& reports,
                                 const InstanceObserver* observe = nullptr);

  // The skew histogram, counts by cause, instances, evicted and pending into *s, and the
  // diagnoses (Diagnoses()).
  void AddTo(CrossRankSnapshot* s) const;
  // Per communicator, what holds it back now (Diagnosis::Snapshot), for the max_comms
  // communicators seen most recently over all shards; in no order.
  std::vector<CommDiagnosis> Diagnoses() const;
  // Copies of the recent instances (of `comm`'s 8-hex-digit label, or all when empty), longest
  // first, at most `limit` (0 = all).
  std::vector<CollectiveInstance> Slowest(size_t limit, const std::string& comm,
                                          const std::set<uint64_t>* comms = nullptr) const;
  // How many recent instances each (communicator, function) has.
  std::map<std::pair<uint64_t, std::string>, size_t> RecentCounts() const;
  // Copies of the recent instances of one (communicator, function), by sequence number, the
  // last `limit` (0 = all).
  std::vector<CollectiveInstance> Recent(uint64_t comm, const std::string& func,
                                         size_t limit) const;

  uint64_t pending() const;
  uint64_t instances_total() const;
  uint64_t evicted_total() const;  // before all their ranks reported (timeout or max_pending)
  uint64_t memory_bytes() const;   // pending and recent instances, approximately
  void ProbeLock() const;

 private:
  // Ranks up to this many are checked for a repeat by a scan of Instance::ranks, above it by
  // Instance::seen (communicators of tens of thousands of ranks made the scan quadratic).
  static constexpr int32_t kScanRanks = 64;
  // Rank entries reserved when an instance is first seen (its nranks if fewer): no regrowth
  // for the common communicators of 8 GPUs per node, and a bounded cost for a claimed 100,000.
  static constexpr int32_t kReserveRanks = 8;
  static constexpr size_t kCauses = v1::CollectiveCause_ARRAYSIZE;
  struct Instance {
    int32_t nranks = 0;
    int64_t first_seen_unix_ns = 0;
    std::vector<RankEntry> ranks;
    absl::flat_hash_set<int32_t> seen;  // ranks reported, when nranks > kScanRanks
  };
  // The matching state of the communicators whose hash falls in one shard: pending and recent
  // instances, their diagnosis and counters, behind the shard's own lock.
  struct CommShard {
    CommShard(const DiagnosisOptions& d, std::atomic<uint64_t>* clock) : diagnosis(d, clock) {}
    mutable absl::Mutex mu;
    absl::flat_hash_map<InstanceKey, Instance> pending ABSL_GUARDED_BY(mu);
    std::deque<std::pair<int64_t, InstanceKey>> pending_order ABSL_GUARDED_BY(mu);  // first seen
    std::deque<CollectiveInstance> recent ABSL_GUARDED_BY(mu);
    Diagnosis diagnosis ABSL_GUARDED_BY(mu);  // of the shard's communicators
    std::array<uint64_t, kCauses> by_cause ABSL_GUARDED_BY(mu) = {};
    std::vector<uint64_t> skew_buckets ABSL_GUARDED_BY(mu);
    double skew_sum ABSL_GUARDED_BY(mu) = 0;
    uint64_t instances ABSL_GUARDED_BY(mu) = 0;
    uint64_t evicted ABSL_GUARDED_BY(mu) = 0;
    int64_t newest_unix_ns ABSL_GUARDED_BY(mu) = 0;
  };
  // Instances that left a shard's recent ring, destroyed after its lock is released.
  using Retired = std::vector<CollectiveInstance>;

  // Adds one report to its shard; completes, evicts and finishes instances there.
  // What a batch's completed instances go to: the blames, the retired ring entries, and the
  // observer (Match).
  struct Outputs {
    std::vector<BlameUpdate>* blames;
    Retired* retired;
    const InstanceObserver* observe;
  };
  void MatchOne(CommShard& s, RankReport&& r, const Outputs& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Pops the shard's oldest pending_order entry (not empty) and evicts its instance when still
  // pending; false for a stale entry.
  bool PopOldest(CommShard& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Evicts the shard's instances that waited past pending_timeout_ns for their other ranks.
  void EvictExpired(CommShard& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // A complete instance: its skew and durations, its cause (CauseClassifier), the shard's
  // counters, its ranks' blame, and the recent ring (and a copy in *notable, as Match says).
  void Finish(CommShard& s, const InstanceKey& key, Instance&& inst, const Outputs& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // The diagnosis.max_comms communicators seen most recently over all shards.
  absl::flat_hash_set<uint64_t> DiagnosedComms() const;
  // The sum of f(shard) over the shards, each read under its own lock.
  template <typename F>
  uint64_t SumShards(F f) const {
    uint64_t n = 0;
    for (const auto& sp : shards_) {
      absl::MutexLock lock(&sp->mu);
      n += f(*sp);
    }
    return n;
  }
  CommShard& ShardOf(uint64_t comm_hash) const { return *shards_[comm_hash % shards_.size()]; }

  const CrossRankOptions options_;
  CauseClassifier classifier_;
  // The shards' diagnoses count "least recently seen" on this one clock.
  std::atomic<uint64_t> diag_clock_{0};
  std::vector<std::unique_ptr<CommShard>> shards_;
  std::atomic<uint64_t> pending_total_{0};  // over all shards, against max_pending
};

}  // namespace fabricscope::exporters
