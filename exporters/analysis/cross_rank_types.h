#pragma once

// The cross-rank analysis's options and plain values: what a rank reports, a matched collective
// instance, and the snapshot the exposition renders. Shared by its parts: the report builder
// (rank_reports.h), the matcher (collective_matcher.h), the cause classifier
// (collective_cause.h), the node ledger (node_ledger.h) and the heat maps
// (cross_rank_heatmaps.h); CrossRankAnalysis (cross_rank.h) joins them.

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "collectors/common/collective_vocabulary.h"
#include "exporters/analysis/diagnosis.h"
#include "exporters/analysis/fabric_loss.h"
#include "exporters/analysis/fabric_placement.h"
#include "exporters/analysis/names.h"
#include "exporters/analysis/path_evidence.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

// Ranks one collective instance may have. NCCL's largest communicators in production are tens of
// thousands of ranks; an analysis claiming more, or a rank outside its communicator, is dropped
// on arrival and counted (fabricscope_collective_analyses_dropped_total).
inline constexpr int32_t kMaxRanksPerInstance = 1 << 17;

struct CrossRankOptions {
  // An instance whose ranks have not all reported within this much (Unix time of the newest
  // collective seen) after its first report is evicted and counted.
  int64_t pending_timeout_ns = 30'000'000'000;
  // Pending instances over all shards; beyond it the oldest pending instance of the new
  // instance's shard is evicted (a shard with none may still take one: at most kCommShards - 1
  // over). Batches arrive spread over a window, so about (instances completed per second) x
  // (window) instances wait at once: 125,000 at 10,000 nodes x 100 collectives/s on 8-rank
  // communicators (fabricscope_bench_cluster --nodes=10000; at 65,536 none completed there).
  // One pending instance holds ~0.3 KiB plus ~0.2 KiB per rank reported.
  size_t max_pending = 1 << 20;
  // compute_straggler: arrival skew >= max(straggler_min_skew_ns, straggler_skew_ratio x the
  // median duration of the instance's ranks).
  int64_t straggler_min_skew_ns = 1'000'000;
  double straggler_skew_ratio = 0.25;
  // The persistent-straggler test and the per-communicator diagnosis
  // (exporters/analysis/diagnosis.h).
  DiagnosisOptions diagnosis;
  // Absolute evidence: the path's expected rate, another flow, the fabric's loss
  // (exporters/analysis/path_evidence.h, fabric_loss.h).
  PathEvidenceOptions path;
  FabricLossOptions fabric_loss;
  size_t score_window = 64;  // instances per (node, rank) in the straggler score
  // Complete instances kept for the heat map and JSON, per shard of communicators (a
  // communicator's instances are all in one shard: kCommShards x this in all, 4,096 by
  // default).
  size_t recent_instances = 256;
  size_t overlap_window = 256;  // analyses per node in the microburst overlap ratio
  size_t max_ranks = 4096;      // (node, rank) series kept
  // Rank pairs kept per node over all its communicators (limits: max_rank_pairs_per_node): a
  // communicator no longer reported (its job ended) is kept while room is left, the least
  // recently reported dropped first.
  size_t max_rank_pairs_per_node = 4096;
  // Distinct names (nodes, collective functions, port labels) the matcher keeps (NameTable);
  // an analysis naming a new one beyond it is dropped and counted
  // (fabricscope_collective_analyses_dropped_total). About 100 bytes a name.
  size_t max_names = 1 << 18;
  // fabric_oversubscribed: with no rank's host port saturated or lossy, a leaf whose uplinks
  // carried at least this share of their capacity of the instance's own cross-leaf traffic
  // over its transfer time (collective_cause.h FabricRule).
  double fabric_oversubscribed_ratio = 0.8;
  // Each node's leaf and each leaf's uplink capacity (ClusterState sets it to its fabric
  // model's placement); unset or empty: the rule never fires.
  FabricPlacementSource fabric;
};

// What CrossRankAnalysis::Snapshot reads: plain values, no lock held.
struct CrossRankSnapshot {
  // fabricscope_collective_arrival_skew_seconds: per-bucket counts over ArrivalSkewBounds()
  // (the last one +Inf), their sum in seconds, instances matched.
  std::vector<uint64_t> skew_buckets;
  double skew_sum = 0;
  uint64_t instances = 0, evicted = 0, pending = 0, dropped_analyses = 0;
  std::array<uint64_t, v1::CollectiveCause_ARRAYSIZE> by_cause = {};  // by v1::CollectiveCause
  struct Score {
    std::string node;
    int32_t rank;
    double score;  // in [0, 1]
  };
  std::vector<Score> scores;
  std::vector<std::pair<std::string, double>> network_shares;  // (node, share)
  struct Overlap {
    std::string node, device;
    uint32_t port;
    double ratio;  // in [0, 1]
  };
  std::vector<Overlap> overlaps;
  std::vector<CommDiagnosis> diagnoses;  // CrossRankAnalysis::Diagnoses()
};

// One rank's report of one collective instance: its node, rank, port ("device:port" of
// port_index; none: Name()) and the absolute evidence of its ports (RankPath): PathEvidence
// reads the entries in place.
struct RankEntry : RankPath {
  int64_t start_unix_ns = 0, end_unix_ns = 0;
  v1::CollectiveCause cause = v1::COLLECTIVE_CAUSE_UNSPECIFIED;
  // CollectiveAnalysis.detail: detail_size bytes at detail_begin of detail_text, the details
  // of all the analyses of the batch it came in, written once into one buffer that the
  // batch's rank entries share (one allocation a batch, not one a rank report).
  std::shared_ptr<const std::string> detail_text;
  uint32_t detail_begin = 0, detail_size = 0;
  absl::string_view detail() const {
    return detail_text ? absl::string_view(*detail_text).substr(detail_begin, detail_size)
                       : absl::string_view();
  }
  double saturated_ratio = 0;
  uint64_t events = 0;
  bool slow = false;
  bool lossy_by_tail = false;  // CollectiveAnalysis.lossy_by_tail
  uint64_t bytes = 0;
  double bus_bytes = 0;  // Collective.busbw x its duration: nccl-tests' S x factor
  // Null unless slow and a recording covering it came in the same batch; shared, not copied,
  // when the instance completes.
  std::shared_ptr<const v1::FlightRecording> recording;
  int64_t recording_offset_ns = 0;
};

// An instance: (communicator, function, sequence number).
struct InstanceKey {
  uint64_t comm = 0;
  Name func;
  uint64_t seq = 0;
  friend bool operator==(const InstanceKey& a, const InstanceKey& b) {
    return a.comm == b.comm && a.seq == b.seq && a.func == b.func;
  }
  template <typename H>
  friend H AbslHashValue(H h, const InstanceKey& k) {
    return H::combine(std::move(h), k.comm, k.seq, k.func);
  }
};

// A collective instance whose ranks all reported, with its cause and evidence.
struct CollectiveInstance {
  InstanceKey key;
  int32_t nranks = 0;
  v1::CollectiveCause cause = v1::COLLECTIVE_CAUSE_NORMAL;
  EvidenceRule rule = EvidenceRule::kNone;  // what named the cause
  std::string evidence;  // one line with numbers: the bottleneck's own detail, or the skew
  // The path's figures (PathVerdict): busBw, its share of the slowest line rate and of its
  // kind's best; -1 unknown.
  double busbw = -1, line_share = -1, best_share = -1;
  int64_t skew_ns = 0;          // latest start - earliest start
  int64_t max_duration_ns = 0;  // its longest rank's
  int bottleneck = -1;          // index into ranks
  std::vector<RankEntry> ranks;
};

// One analysed rank report (a node's own, or one a peer forwarded), bound for matching.
struct RankReport {
  InstanceKey key;
  int32_t nranks = 0;
  RankEntry entry;
};

// A straggler-score update of one (node, rank): the blame of one instance, 0 when it was not
// the bottleneck (NodeLedger::ApplyBlames).
struct BlameUpdate {
  Name node;
  int32_t rank;
  double weight;
};

// A node's ports as its Hello announced them, and each one's label ("device:port" for RDMA,
// the device otherwise); immutable, shared with the batches being matched.
struct NodePorts {
  std::vector<v1::PortInfo> info;
  std::vector<Name> labels;
};

// The indexes 0..n-1 grouped by shard_of(i) (< shards), in order within each shard (a counting
// sort): shard k's are (*order)[(*starts)[k] .. (*starts)[k + 1]).
template <typename ShardOf>
void GroupByShard(size_t n, size_t shards, ShardOf shard_of, std::vector<uint32_t>* order,
                  std::vector<uint32_t>* starts) {
  std::vector<uint32_t> shard(n);
  starts->assign(shards + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    shard[i] = static_cast<uint32_t>(shard_of(i));
    ++(*starts)[shard[i] + 1];
  }
  for (size_t k = 1; k <= shards; ++k) (*starts)[k] += (*starts)[k - 1];
  std::vector<uint32_t> next(starts->begin(), starts->end() - 1);
  order->resize(n);
  for (size_t i = 0; i < n; ++i) (*order)[next[shard[i]]++] = static_cast<uint32_t>(i);
}

// Shared with the agent (collectors/common/collective_vocabulary.h).
using common::CollectiveCauseName;

// Upper bounds of fabricscope_collective_arrival_skew_seconds: 10 us .. 10 s, 1-2.5-5 steps.
std::vector<double> ArrivalSkewBounds();

}  // namespace fabricscope::exporters
