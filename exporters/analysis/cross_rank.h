#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "collectors/common/port_activity.h"
#include "exporters/analysis/diagnosis.h"
#include "exporters/heatmap/heatmap_svg.h"
#include "fabricscope/v1/telemetry.pb.h"
#include "prometheus/metric_family.h"

namespace httplib {
class Server;
}

namespace fabricscope::exporters {

// Ranks one collective instance may have. NCCL's largest communicators in production are tens of
// thousands of ranks; an analysis claiming more, or a rank outside its communicator, is dropped
// on arrival and counted (fabricscope_collective_analyses_dropped_total).
inline constexpr int32_t kMaxRanksPerInstance = 1 << 17;

struct HeatmapPage;

struct CrossRankOptions {
  // An instance whose ranks have not all reported within this much (Unix time of the newest
  // collective seen) after its first report is evicted and counted.
  int64_t pending_timeout_ns = 30'000'000'000;
  size_t max_pending = 65536;  // beyond it the oldest pending instance is evicted
  // compute_straggler: arrival skew >= max(straggler_min_skew_ns, straggler_skew_ratio x the
  // median duration of the instance's ranks).
  int64_t straggler_min_skew_ns = 1'000'000;
  double straggler_skew_ratio = 0.25;
  // The persistent-straggler test and the per-communicator diagnosis
  // (exporters/analysis/diagnosis.h).
  DiagnosisOptions diagnosis;
  size_t score_window = 64;        // instances per (node, rank) in the straggler score
  size_t recent_instances = 1024;  // complete instances kept for the heat map and JSON
  size_t overlap_window = 256;     // analyses per node in the microburst overlap ratio
  size_t max_ranks = 4096;         // (node, rank) series kept
  // Rank pairs kept per node over all its communicators (limits: max_rank_pairs_per_node): a
  // communicator no longer reported (its job ended) is kept while room is left, the least
  // recently reported dropped first.
  size_t max_rank_pairs_per_node = 4096;
};

// Cross-rank analysis at the aggregator: matches the agents' analysed collectives (Collective
// records with their CollectiveAnalysis inside) by
// (comm_hash, func, seq) across ranks and nodes, and for every instance whose nranks ranks
// all reported:
//   arrival skew = latest start - earliest start (Unix times, each node's own offset);
//   cause: network_lossy / network_saturated when some rank's own analysis says so (the
//     bottleneck is that rank: the lossy one with most events, else the saturated one with the
//     highest saturated ratio); else compute_straggler when the skew >= max(min skew, ratio x
//     the ranks' median duration) (the bottleneck is the last rank to arrive: the others
//     waited for it with idle links); else normal.
//   blame of the bottleneck rank: lossy 1; saturated its port's saturated (or microburst)
//     share of the collective; compute min(1, skew / longest duration) (the share of the
//     collective the others spent waiting for it).
// Straggler score of a (node, rank) = the mean blame over the last score_window instances it
// took part in (0 when it was not the bottleneck): 1 = it held back every recent collective
// for all of its time; in [0, 1].
//
// Thread-safe.
class CrossRankAnalysis {
 public:
  explicit CrossRankAnalysis(CrossRankOptions options = {});

  void OnHello(const v1::Hello& hello);
  // Drops the node's ports, rank pairs and straggler scores (ClusterState::ExpireNodes).
  // Instances it took part in stay until they complete or are evicted, as for any silent rank.
  void ForgetNode(const std::string& node);
  // Takes and releases the lock (LockWatchdog).
  void ProbeLock() const { absl::MutexLock lock(&mu_); }
  void OnBatch(const std::string& node, const v1::Batch& batch);
  void Collect(std::vector<prometheus::MetricFamily>* out) const;

  // {"collectives":[{comm, func, seq, nranks, cause, skew_seconds, duration_seconds (longest),
  //   bottleneck:{node, rank, port, detail}, ranks:[{node, rank, cause, detail, start_unix_seconds,
  //   duration_seconds, slow, loss_events (on its deciding port: the larger of loss +
  //   retransmit counters and captured loss events), recording:{device, port, reason,
  //   from_unix_seconds, to_unix_seconds, samples:[{time_unix_seconds, interval_seconds,
  //   transmit_bytes, receive_bytes, transmit_utilization, receive_utilization}]}}]}]} slowest
  //   first. comm: only that communicator's (its 8-hex-digit label, as in the JSON); empty = all.
  std::string SlowJson(size_t limit, const std::string& comm = "") const;
  // Diagnosis::Json() (exporters/analysis/diagnosis.h): per communicator, what holds it back now.
  std::string DiagnosisJson() const;
  // Rank x sequence: each rank's duration of the recent instances of one communicator and
  // func (comm = 8-hex-digit label or "" for the busiest; func "" = AllReduce if present).
  HeatmapModel CollectivesHeatmap(const std::string& comm, const std::string& func,
                                  size_t instances) const;
  // Source rank x destination rank bytes of one communicator (the proxy's network bytes,
  // GpuWindow.rank_pairs, cumulative); comm "" = the one with the most bytes.
  HeatmapModel RanksHeatmap(const std::string& comm) const;

  uint64_t pending() const;
  uint64_t instances_total() const;
  // Approximate bytes held (pending + recent instances + series), for the benchmark.
  uint64_t memory_bytes() const;

 private:
  struct RankEntry {
    std::string node;
    int32_t rank = -1;
    int64_t start_unix_ns = 0, end_unix_ns = 0;
    v1::CollectiveCause cause = v1::COLLECTIVE_CAUSE_UNSPECIFIED;
    std::string detail;
    std::string port;  // "device:port" of port_index, "" none
    double saturated_ratio = 0;
    uint64_t events = 0;
    bool slow = false;
    bool lossy_by_tail = false;  // CollectiveAnalysis.lossy_by_tail
    uint64_t bytes = 0;
    v1::FlightRecording recording;  // empty unless slow and attached
    int64_t recording_offset_ns = 0;
  };
  using Key = std::tuple<uint64_t, std::string, uint64_t>;  // comm, func, seq
  struct Instance {
    int32_t nranks = 0;
    int64_t first_seen_unix_ns = 0;
    std::vector<RankEntry> ranks;
    absl::flat_hash_set<int32_t> seen;  // ranks reported, for the duplicate check
  };
  struct Done {
    Key key;
    int32_t nranks;
    std::string cause;
    std::string evidence;  // one line with numbers: the bottleneck's own detail, or the skew
    int64_t skew_ns;
    int64_t max_duration_ns;
    int bottleneck = -1;  // index into ranks
    std::vector<RankEntry> ranks;
  };
  struct Score {
    std::deque<double> blame;
    double sum = 0;
  };
  struct NodeInfo {
    std::vector<v1::PortInfo> ports;
    // Per port: (collective seconds, microburst overlap seconds) of the recent analyses.
    std::deque<std::vector<std::pair<double, double>>> overlap;
    double share = 0;
    bool have_share = false;
  };

  void Finish(const Key& key, Instance&& inst) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The rank whose own analysis says `cause` most strongly (lossy: most loss events;
  // saturated: highest saturated ratio), or -1. With a persistent straggler (its index, else
  // -1), ranks lossy by the slow tail alone are passed over.
  static int Strongest(const std::vector<RankEntry>& ranks, v1::CollectiveCause cause,
                       int straggler);
  void Blame(const std::string& node, int32_t rank, double w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const CrossRankOptions options_;
  mutable absl::Mutex mu_;
  std::map<std::string, NodeInfo> nodes_ ABSL_GUARDED_BY(mu_);
  std::map<Key, Instance> pending_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<int64_t, Key>> pending_order_ ABSL_GUARDED_BY(mu_);  // first seen
  std::deque<Done> recent_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, int32_t>, Score> scores_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, uint64_t> by_cause_ ABSL_GUARDED_BY(mu_);
  Diagnosis diagnosis_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> skew_buckets_ ABSL_GUARDED_BY(mu_);
  double skew_sum_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t instances_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t evicted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t dropped_analyses_ ABSL_GUARDED_BY(mu_) = 0;  // outside kMaxRanksPerInstance
  int64_t newest_unix_ns_ ABSL_GUARDED_BY(mu_) = 0;
  // Per reporting node, per communicator: (src, dst) -> cumulative bytes of the latest window
  // that named the communicator (StorePairs).
  struct CommPairs {
    uint64_t seen = 0;  // pair_tick_ when a window last named it
    std::map<std::pair<int32_t, int32_t>, uint64_t> bytes;
  };
  struct NodePairs {
    std::map<uint64_t, CommPairs> comms;
    size_t total = 0;  // pairs over all comms
  };
  void StorePairs(const std::string& node, const v1::GpuWindow& w)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<std::string, NodePairs> pairs_ ABSL_GUARDED_BY(mu_);
  uint64_t pair_tick_ ABSL_GUARDED_BY(mu_) = 0;
};

// Shared with the agent (collectors/common/collective_vocabulary.h).
using common::CollectiveCauseName;

// Upper bounds of fabricscope_collective_arrival_skew_seconds: 10 us .. 10 s, 1-2.5-5 steps.
std::vector<double> ArrivalSkewBounds();

// /heatmap/collectives (?comm=, ?func=, ?instances=100, ?format=svg|json),
// /heatmap/ranks (?comm=, ?format=) and /api/collectives/slow (?limit=20). Appends the heat maps
// to *pages for the index. `analysis` must outlive the server.
void RegisterCrossRankRoutes(httplib::Server& server, const CrossRankAnalysis& analysis,
                             std::vector<HeatmapPage>* pages);

}  // namespace fabricscope::exporters
