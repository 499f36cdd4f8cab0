#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "exporters/analysis/collective_matcher.h"
#include "exporters/analysis/cross_rank_types.h"
#include "exporters/analysis/fabric_loss.h"
#include "exporters/analysis/heatmap_model.h"
#include "exporters/analysis/names.h"
#include "exporters/analysis/node_ledger.h"
#include "exporters/analysis/rank_reports.h"
#include "exporters/shard/peer_ring.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

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
// Its parts, one concern each: ReportBuilder (rank_reports.h) turns a batch into rank reports,
// CollectiveMatcher (collective_matcher.h) gathers an instance's ranks, CauseClassifier
// (collective_cause.h) names its cause, NodeLedger (node_ledger.h) keeps the node-level state
// and the straggler scores, cross_rank_heatmaps.h draws the heat maps.
//
// Thread-safe, and built for several ingest threads: communicators are split over kCommShards
// shards by hash, each behind its own lock, and the node-level state (ports, overlap, share,
// rank pairs, straggler scores) over NodeLedger::kNodeShards shards by node name, never held
// with a communicator shard's lock. A batch takes its node's shard once, then the shards its
// collectives name, skipping those another thread holds (TryLock) before waiting on one. Each
// communicator shard has its own Diagnosis of up to diagnosis.max_comms communicators (and
// diagnosis.max_kinds / kCommShards histories) on one shared clock; fabricscope_diagnosis_* and
// /api/diagnosis show the max_comms seen most recently over all shards.
class CrossRankAnalysis {
 public:
  static constexpr size_t kCommShards = CollectiveMatcher::kCommShards;
  explicit CrossRankAnalysis(CrossRankOptions options = {});

  void OnHello(const v1::Hello& hello);
  // Drops the node's ports, rank pairs and straggler scores (ClusterState::ExpireNodes).
  // Instances it took part in stay until they complete or are evicted, as for any silent rank.
  void ForgetNode(const std::string& node);
  // Takes and releases each lock in turn (LockWatchdog).
  void ProbeLock() const {
    ledger_.ProbeLock();
    matcher_.ProbeLock();
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

  // Copies of the recent complete instances, longest first, at most `limit` (0 = all); comm:
  // only that communicator's (its 8-hex-digit label), empty = all; comms non-null: only those
  // communicators' (a job's, exporters/state/job_table.h). Rendered as
  // /api/collectives/slow by exporters/exposition/cross_rank_render.h SlowJson.
  std::vector<CollectiveInstance> Slowest(size_t limit, const std::string& comm = "",
                                          const std::set<uint64_t>* comms = nullptr) const {
    return matcher_.Slowest(limit, comm, comms);
  }
  // Per communicator, what holds it back now (Diagnosis::Snapshot), for the max_comms
  // communicators seen most recently over all shards; in no order.
  std::vector<CommDiagnosis> Diagnoses() const { return matcher_.Diagnoses(); }
  // Rank x sequence: each rank's duration of the recent instances of one communicator and
  // func (comm = 8-hex-digit label or "" for the busiest; func "" = AllReduce if present;
  // comms non-null: among those communicators only, a job's).
  HeatmapModel CollectivesHeatmap(const std::string& comm, const std::string& func,
                                  size_t instances,
                                  const std::set<uint64_t>* comms = nullptr) const;
  // Source rank x destination rank bytes of one communicator (the proxy's network bytes,
  // GpuWindow.rank_pairs, cumulative); comm "" = the one with the most bytes (of `comms`).
  HeatmapModel RanksHeatmap(const std::string& comm,
                            const std::set<uint64_t>* comms = nullptr) const;

  // Called with each completed instance whose cause is not normal (the event history), under
  // its communicator shard's lock: it must be quick and take no lock of this analysis. Set
  // before the first batch; null = none.
  void SetInstanceObserver(CollectiveMatcher::InstanceObserver observe) {
    observe_ = std::move(observe);
  }

  uint64_t pending() const { return matcher_.pending(); }
  uint64_t instances_total() const { return matcher_.instances_total(); }
  // Instances evicted before all their ranks reported (timeout or max_pending).
  uint64_t evicted_total() const { return matcher_.evicted_total(); }
  // Approximate bytes held (pending + recent instances + series), for the benchmark.
  uint64_t memory_bytes() const {
    return names_.memory_bytes() + matcher_.memory_bytes() + ledger_.memory_bytes();
  }

 private:
  // Matches the reports, applies their blame and counts `dropped`.
  void MatchReports(std::vector<RankReport>&& reports, uint64_t dropped);

  NameTable names_;
  // Fabric-wide, over all shards (behind its own lock, taken after a shard's, never before).
  FabricLoss fabric_loss_;
  NodeLedger ledger_;
  ReportBuilder reports_{names_, fabric_loss_};
  CollectiveMatcher matcher_;
  std::atomic<uint64_t> dropped_analyses_{0};  // outside kMaxRanksPerInstance
  CollectiveMatcher::InstanceObserver observe_;
};

}  // namespace fabricscope::exporters
