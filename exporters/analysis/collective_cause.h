#pragma once

// The cause of one matched collective instance, and the blame of its bottleneck rank
// (exporters/analysis/cross_rank.h states the rules in order).

#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "exporters/analysis/cross_rank_types.h"
#include "exporters/analysis/diagnosis.h"
#include "exporters/analysis/path_evidence.h"

namespace fabricscope::exporters {

// When the instance's ranks ran: the last rank's start and the last end (Unix ns), and the
// median of the ranks' durations (ns).
struct InstanceTimes {
  int64_t last_start = 0, last_end = 0, median_duration = 0;
};

// Thread-safe: the path evidence has its own lock; the Diagnosis passed in is the caller's,
// under the caller's lock.
class CauseClassifier {
 public:
  explicit CauseClassifier(const CrossRankOptions& options)
      : options_(options), path_(options.path) {}

  // Names d's cause: sets its cause, rule, bottleneck, evidence and the path's figures (busbw,
  // line_share, best_share), from its ranks (sorted by rank), skew and longest duration; shows
  // the arrivals to `diagnosis` (the persistent-straggler test) and records the outcome there.
  // Returns the bottleneck's blame in [0, 1] (0 for normal).
  double Classify(CollectiveInstance& d, const InstanceTimes& t, Diagnosis& diagnosis);

 private:
  // The rank whose own analysis says `cause` most strongly (lossy: most loss events;
  // saturated: highest saturated ratio), or -1. With a persistent straggler (its index, else
  // -1), ranks lossy by the slow tail alone are passed over.
  static int Strongest(const std::vector<RankEntry>& ranks, v1::CollectiveCause cause,
                       int straggler);
  // The instance as the path evidence reads it (pointers to its ranks into *paths, which it
  // points at); transfer time from the last rank's start to the last end.
  static InstancePath PathOf(const CollectiveInstance& d, const InstanceTimes& t,
                             absl::InlinedVector<const RankPath*, 16>* paths);
  // fabric_oversubscribed: each placed rank's bus bytes (what a ring rank sends: nccl-tests'
  // S x its busBw factor) split evenly over its top send peers; a share whose peer is on another
  // leaf crosses both leaves' uplinks. The leaf whose crossing bytes, the larger direction, over
  // the transfer time reach options_.fabric_oversubscribed_ratio of its uplink capacity (the
  // highest such share) names the cause; its bottleneck is the leaf's rank that sent and
  // received the most across (ties: the lowest rank). bottleneck -1: no such leaf, or no
  // placement.
  struct FabricVerdict {
    int bottleneck = -1;
    double ratio = 0;
    std::string evidence;
  };
  FabricVerdict LeafUplinks(const CollectiveInstance& d, int64_t transfer_ns) const;
  // The outcome of d into `diagnosis`.
  static void Record(const CollectiveInstance& d, int64_t last_end, Diagnosis& diagnosis);

  const CrossRankOptions options_;
  PathEvidence path_;  // fabric-wide, over all communicators
};

}  // namespace fabricscope::exporters
