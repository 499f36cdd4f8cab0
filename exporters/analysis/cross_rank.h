#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "collectors/common/port_activity.h"
#include "exporters/analysis/diagnosis.h"
#include "exporters/analysis/fabric_loss.h"
#include "exporters/analysis/heatmap_model.h"
#include "exporters/analysis/names.h"
#include "exporters/analysis/path_evidence.h"
#include "exporters/shard/peer_ring.h"
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

// Cross-rank analysis at the aggregator: matches the agents' analysed collectives (Collective
// records with their CollectiveAnalysis inside) by
// (comm_hash, func, seq) across ranks and nodes, and for every instance whose nranks ranks
// all reported:
//   arrival skew = latest start - earliest start (Unix times, each node's own offset);
//   cause: network_lossy / network_saturated when some rank's own analysis says so (the
//     bottleneck is that rank: the lossy one with most events, else the saturated one with the
//     highest saturated ratio); else compute_straggler when the persistent-straggler test names
//     a rank; else network_lossy / network_saturated from the absolute evidence of the ranks'
//     ports (exporters/analysis/path_evidence.h: the fabric's loss, another flow, a slow link),
//     which needs no history of the communicator; else compute_straggler when the skew >=
//     max(min skew, ratio x the ranks' median duration) (the bottleneck is the last rank to
//     arrive: the others waited for it with idle links); else normal.
//   blame of the bottleneck rank: lossy 1; saturated its port's saturated (or microburst)
//     share of the collective; another flow the share of its port that flow took; a slow link
//     1 - its transmit peak over the others'; compute min(1, skew / longest duration) (the share
//     of the collective the others spent waiting for it).
// Straggler score of a (node, rank) = the mean blame over the last score_window instances it
// took part in (0 when it was not the bottleneck): 1 = it held back every recent collective
// for all of its time; in [0, 1].
//
// Thread-safe, and built for several ingest threads: communicators are split over kCommShards
// shards by hash, each behind its own lock, and the node-level state (ports, overlap, share,
// rank pairs, straggler scores) over kNodeShards shards by node name, never held with a
// communicator shard's lock. A batch takes its node's shard once, then the shards its
// collectives name, skipping those another thread holds (TryLock) before waiting on one. Each
// communicator shard has its own Diagnosis of up to diagnosis.max_comms communicators (and
// diagnosis.max_kinds / kCommShards histories) on one shared clock; fabricscope_diagnosis_* and
// /api/diagnosis show the max_comms seen most recently over all shards.
class CrossRankAnalysis {
 public:
  static constexpr size_t kCommShards = 16;
  explicit CrossRankAnalysis(CrossRankOptions options = {});

  void OnHello(const v1::Hello& hello);
  // Drops the node's ports, rank pairs and straggler scores (ClusterState::ExpireNodes).
  // Instances it took part in stay until they complete or are evicted, as for any silent rank.
  void ForgetNode(const std::string& node);
  // Takes and releases the lock (LockWatchdog).
  void ProbeLock() const {
    for (const auto& s : node_shards_) absl::MutexLock lock(&s->mu);
    for (const auto& s : shards_) absl::MutexLock lock(&s->mu);
  }
  // A batch of `node`'s. With a ring (sharded aggregators, issue 18), the analyses of
  // communicators another peer owns are not matched here: they are appended to *forward, to be
  // sent to their owner, which matches them through OnForwarded. The node-level parts (ports,
  // overlap, share, rank pairs) stay here either way.
  void OnBatch(const std::string& node, const v1::Batch& batch, const PeerRing* ring = nullptr,
               std::vector<v1::ForwardedAnalysis>* forward = nullptr);
  // A peer's Batch.forwarded: each record matched as its origin node's own report would be
  // (its node, port label, offset and recording travel with it). A record naming no node, or
  // a name the table has no room for, is dropped and counted
  // (fabricscope_collective_analyses_dropped_total).
  void OnForwarded(const v1::Batch& batch);
  // The counters, scores and diagnoses at this moment, read one shard lock at a time; rendered
  // as metrics by exporters/exposition/cross_rank_render.h.
  CrossRankSnapshot Snapshot() const;

  // {"collectives":[{comm, func, seq, nranks, cause, skew_seconds, duration_seconds (longest),
  //   bottleneck:{node, rank, port, detail}, ranks:[{node, rank, cause, detail, start_unix_seconds,
  //   duration_seconds, slow, loss_events (on its deciding port: the larger of loss +
  //   retransmit counters and captured loss events), recording:{device, port, reason,
  //   from_unix_seconds, to_unix_seconds, samples:[{time_unix_seconds, interval_seconds,
  //   transmit_bytes, receive_bytes, transmit_utilization, receive_utilization}]}}]}]} slowest
  //   first. comm: only that communicator's (its 8-hex-digit label, as in the JSON); empty = all.
  std::string SlowJson(size_t limit, const std::string& comm = "") const;
  // Per communicator, what holds it back now (Diagnosis::Snapshot), for the max_comms
  // communicators seen most recently over all shards; in no order.
  std::vector<CommDiagnosis> Diagnoses() const;
  // Rank x sequence: each rank's duration of the recent instances of one communicator and
  // func (comm = 8-hex-digit label or "" for the busiest; func "" = AllReduce if present).
  HeatmapModel CollectivesHeatmap(const std::string& comm, const std::string& func,
                                  size_t instances) const;
  // Source rank x destination rank bytes of one communicator (the proxy's network bytes,
  // GpuWindow.rank_pairs, cumulative); comm "" = the one with the most bytes.
  HeatmapModel RanksHeatmap(const std::string& comm) const;

  uint64_t pending() const;
  uint64_t instances_total() const;
  // Instances evicted before all their ranks reported (timeout or max_pending).
  uint64_t evicted_total() const;
  // Approximate bytes held (pending + recent instances + series), for the benchmark.
  uint64_t memory_bytes() const;

 private:
  // Its node, rank, port ("device:port" of port_index; none: Name()) and the absolute evidence
  // of its ports (RankPath): PathEvidence reads the entries in place.
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
  struct Key {
    uint64_t comm = 0;
    Name func;
    uint64_t seq = 0;
    friend bool operator==(const Key& a, const Key& b) {
      return a.comm == b.comm && a.seq == b.seq && a.func == b.func;
    }
    template <typename H>
    friend H AbslHashValue(H h, const Key& k) {
      return H::combine(std::move(h), k.comm, k.seq, k.func);
    }
  };
  // Instances counted per cause, indexed by v1::CollectiveCause (the aggregator sets normal,
  // network_saturated, network_lossy and compute_straggler: common::CollectiveCauses()).
  static constexpr size_t kCauses = v1::CollectiveCause_ARRAYSIZE;
  // Ranks up to this many are checked for a repeat by a scan of Instance::ranks, above it by
  // Instance::seen (communicators of tens of thousands of ranks made the scan quadratic).
  static constexpr int32_t kScanRanks = 64;
  // Rank entries reserved when an instance is first seen (its nranks if fewer): no regrowth
  // for the common communicators of 8 GPUs per node, and a bounded cost for a claimed 100,000.
  static constexpr int32_t kReserveRanks = 8;
  struct Instance {
    int32_t nranks = 0;
    int64_t first_seen_unix_ns = 0;
    std::vector<RankEntry> ranks;
    absl::flat_hash_set<int32_t> seen;  // ranks reported, when nranks > kScanRanks
  };
  struct Done {
    Key key;
    int32_t nranks;
    v1::CollectiveCause cause = v1::COLLECTIVE_CAUSE_NORMAL;
    EvidenceRule rule = EvidenceRule::kNone;  // what named the cause
    std::string evidence;  // one line with numbers: the bottleneck's own detail, or the skew
    // The path's figures (PathVerdict): busBw, its share of the slowest line rate and of its
    // kind's best; -1 unknown.
    double busbw = -1, line_share = -1, best_share = -1;
    int64_t skew_ns;
    int64_t max_duration_ns;
    int bottleneck = -1;  // index into ranks
    std::vector<RankEntry> ranks;
  };
  struct Score {
    std::deque<double> blame;
    double sum = 0;
  };
  // A straggler-score update of one (node, rank), made while a CommShard is locked and applied
  // under the node's shard lock after it is released.
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
  // Per communicator the node's rank pairs: (src, dst) -> cumulative bytes of the latest window
  // that named the communicator (StorePairs).
  struct CommPairs {
    uint64_t seen = 0;  // NodePairs::tick when a window last named it
    std::map<std::pair<int32_t, int32_t>, uint64_t> bytes;
  };
  struct NodePairs {
    std::map<uint64_t, CommPairs> comms;
    size_t total = 0;   // pairs over all comms
    uint64_t tick = 0;  // windows stored
  };
  struct NodeInfo {
    std::shared_ptr<const NodePorts> ports = std::make_shared<const NodePorts>();
    NodePairs pairs;
    std::map<int32_t, Score> scores;  // straggler score per rank
    // The node's last overlap_window analyses, per port (collective seconds, microburst overlap
    // seconds): a ring of overlap_window x ports entries (allocated at the first analysis), the
    // sums over it per port, and per port how many entries in it are nonzero.
    std::vector<std::pair<float, float>> overlap;  // 8 bytes an entry: 16 KiB a node of 8 ports
    std::vector<std::pair<double, double>> overlap_sum;
    std::vector<uint32_t> overlap_nonzero;
    size_t overlap_next = 0, overlap_count = 0;
    double share = 0;
    bool have_share = false;
  };
  // The matching state of the communicators whose hash falls in one shard (comm_hash %
  // kCommShards): pending and recent instances, their diagnosis and counters, behind the
  // shard's own lock, so that batches of different communicators match in parallel.
  struct CommShard {
    CommShard(const DiagnosisOptions& d, std::atomic<uint64_t>* clock) : diagnosis(d, clock) {}
    mutable absl::Mutex mu;
    absl::flat_hash_map<Key, Instance> pending ABSL_GUARDED_BY(mu);
    std::deque<std::pair<int64_t, Key>> pending_order ABSL_GUARDED_BY(mu);  // first seen
    std::deque<Done> recent ABSL_GUARDED_BY(mu);
    Diagnosis diagnosis ABSL_GUARDED_BY(mu);  // of the shard's communicators
    std::array<uint64_t, kCauses> by_cause ABSL_GUARDED_BY(mu) = {};
    std::vector<uint64_t> skew_buckets ABSL_GUARDED_BY(mu);
    double skew_sum ABSL_GUARDED_BY(mu) = 0;
    uint64_t instances ABSL_GUARDED_BY(mu) = 0;
    uint64_t evicted ABSL_GUARDED_BY(mu) = 0;
    int64_t newest_unix_ns ABSL_GUARDED_BY(mu) = 0;
  };
  // One analysed rank report bound for a shard.
  struct Report {
    size_t shard;
    Key key;
    int32_t nranks;
    RankEntry entry;
  };

  // The batch's node-level parts (share, pairs, overlap) under the node's shard lock; returns
  // the node's ports.
  std::shared_ptr<const NodePorts> TakeNodeParts(Name node, const v1::Batch& batch);
  // Applies straggler-score updates, each under its node's shard lock, and counts `dropped`.
  void ApplyBlames(std::vector<BlameUpdate>&& blames, uint64_t dropped);
  // The batch's rank reports, without a lock; *dropped counts those outside their communicator.
  // (with a ring, those of communicators another peer owns go to *forward instead).
  void MakeReports(Name node, const v1::Batch& batch, const NodePorts& ports, const PeerRing* ring,
                   std::vector<v1::ForwardedAnalysis>* forward, std::vector<Report>* reports,
                   uint64_t* dropped);
  // The function names of one batch, each looked up in names_ once.
  class FuncNames;
  // One analysed collective's report appended to *reports, its detail to *details (the
  // batch's shared buffer); false (to be counted as dropped) when its ranks are impossible or
  // its function name has no room. port: its port_index's label, when known there.
  // fabric_loss: its port's loss against the fabric (FabricLoss::Of) where known.
  bool AddReport(Name node, const v1::Collective& c, int64_t unix_offset_ns,
                 std::optional<Name> port, const v1::FlightRecording* recording,
                 const v1::FabricLossEvidence& fabric_loss, FuncNames& funcs, std::string* details,
                 std::vector<Report>* reports);
  // Matches the reports shard by shard, then applies their blame and counts `dropped`.
  void MatchReports(std::vector<Report>&& reports, uint64_t dropped);
  // Adds one report to its shard; completes, evicts and finishes instances there.
  // Instances that left a shard's recent ring, destroyed after its lock is released.
  using Retired = std::vector<Done>;
  void Match(CommShard& s, Report&& r, std::vector<BlameUpdate>* blames, Retired* retired)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Pops the shard's oldest pending_order entry (not empty) and evicts its instance when still
  // pending; false for a stale entry.
  bool PopOldest(CommShard& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // Evicts the shard's instances that waited past pending_timeout_ns for their other ranks.
  void EvictExpired(CommShard& s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // The instance as the path evidence reads it (pointers to its ranks into *paths, which it
  // points at);
  // transfer time from the last rank's start to the last end.
  static InstancePath PathOf(const Key& key, const Done& d, int64_t last_start, int64_t last_end,
                             absl::InlinedVector<const RankPath*, 16>* paths);
  void Finish(CommShard& s, const Key& key, Instance&& inst, std::vector<BlameUpdate>* blames,
              Retired* retired) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s.mu);
  // The rank whose own analysis says `cause` most strongly (lossy: most loss events;
  // saturated: highest saturated ratio), or -1. With a persistent straggler (its index, else
  // -1), ranks lossy by the slow tail alone are passed over.
  static int Strongest(const std::vector<RankEntry>& ranks, v1::CollectiveCause cause,
                       int straggler);
  void Blame(NodeInfo& n, int32_t rank, double w);
  // Copies of the recent instances (of `comm`'s label, or all when empty), longest first, at
  // most `limit` (0 = all).
  std::vector<Done> SlowestRecent(size_t limit, const std::string& comm) const;
  // The sum of f(shard) over the communicator shards, each read under its own lock.
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
  NameTable names_;
  // The shards' diagnoses count "least recently seen" on this one clock.
  std::atomic<uint64_t> diag_clock_{0};
  // The diagnosis.max_comms communicators seen most recently over all shards: what
  // fabricscope_diagnosis_* and /api/diagnosis show.
  absl::flat_hash_set<uint64_t> DiagnosedComms() const;
  std::vector<std::unique_ptr<CommShard>> shards_;
  std::atomic<uint64_t> pending_total_{0};  // over all shards, against max_pending
  // Node-level state (ports, overlap, share, rank pairs, straggler scores), split over
  // kNodeShards shards by node name, each behind its own lock; never held with a CommShard's.
  static constexpr size_t kNodeShards = 16;
  struct NodeShard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<Name, NodeInfo> nodes ABSL_GUARDED_BY(mu);
  };
  NodeShard& NodeShardOf(Name node) const {
    return *node_shards_[absl::Hash<Name>{}(node) % kNodeShards];
  }
  void StorePairs(NodePairs& np, const v1::GpuWindow& w) const;
  std::vector<std::unique_ptr<NodeShard>> node_shards_;
  // Fabric-wide, over all shards (each behind its own lock, taken after a shard's, never before).
  PathEvidence path_;
  FabricLoss fabric_loss_;
  std::atomic<uint64_t> scored_ranks_{0};      // (node, rank) scores held, against max_ranks
  std::atomic<uint64_t> dropped_analyses_{0};  // outside kMaxRanksPerInstance
};

// Shared with the agent (collectors/common/collective_vocabulary.h).
using common::CollectiveCauseName;

// Upper bounds of fabricscope_collective_arrival_skew_seconds: 10 us .. 10 s, 1-2.5-5 steps.
std::vector<double> ArrivalSkewBounds();

}  // namespace fabricscope::exporters
