#pragma once

// What holds a communicator back, from the history of its matched collective instances
// (exporters/analysis/cross_rank.h): a persistent-straggler test per (communicator, function, size
// class), and a per-communicator diagnosis in one sentence with numbers (rendered as
// /api/diagnosis and fabricscope_diagnosis_info by exporters/exposition/diagnosis_render.h).

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/types/span.h"
#include "collectors/common/collective_vocabulary.h"
#include "exporters/analysis/names.h"
#include "exporters/analysis/path_evidence.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

struct DiagnosisOptions {
  // Persistent straggler, per (comm, func, floor(log2 bytes)) over the last `history`
  // instances: the rank that arrived last in this instance is named when, over some suffix of
  // the history (the last m instances, min_instances <= m <= history: a scan for the change
  // point where it began),
  //   - a one-sided binomial test rejects "each rank is last with probability 1/nranks" at
  //     max_p_value (sign test on the arrival order, W. J. Conover, "Practical Nonparametric
  //     Statistics", 3rd ed., 1999, §3.4): 5 of 5 with 4 ranks, 10 of 10 with 2;
  //   - its median lateness there, its arrival minus the median arrival of the other ranks, is
  //     at least min_lateness_ratio of the instances' median duration (arrival: the time since
  //     the rank's own previous collective on the communicator ended, when every rank has one,
  //     so a rank delayed by a slow link is not taken for a compute straggler; else its start)
  //     (per-rank robust location, not mean: one 300 ms outlier does not make a straggler; cf.
  //     Greyhound, USENIX ATC '25, which flags ranks by their step-time distribution rather than a
  //     single step).
  // and it is late in this instance by at least min_lateness_ratio of its median duration.
  size_t history = 16;
  size_t min_instances = 4;
  double max_p_value = 1e-3;
  double min_lateness_ratio = 0.05;
  size_t max_kinds =
      4096;  // (comm, func, size class) histories; beyond it new kinds are not tested
  // Diagnosis per communicator, over its last `window` instances (all functions): the most
  // common (cause, node, rank, port) other than normal, when it holds at least min_share of
  // them. "Since" is the first instance of that run not separated from the next one by
  // `gap` or more instances without it. The cost is p90(duration) of its instances over the
  // p90 of the normal instances before "since" (the baseline), minus 1.
  size_t window = 16;
  double min_share = 0.5;
  size_t gap = 8;
  size_t instances_per_comm = 256;
  size_t max_comms = 64;  // as GpuState's comm labels: the least recently seen is dropped
};

// One rank of a matched instance: Unix times, ns.
struct RankArrival {
  Name node;
  int32_t rank = -1;
  int64_t start_unix_ns = 0, end_unix_ns = 0;
};

// The persistent-straggler test's verdict on one instance. index = -1: nobody is named.
struct StragglerVerdict {
  // This instance alone, whatever the history says: the latest rank to arrive (index into the
  // ranks, -1 with fewer than 2) and by how much after the others' median arrival (arrival as
  // in DiagnosisOptions: from the rank's own previous collective when known).
  int latest = -1;
  int64_t latest_lateness_ns = 0;
  int index = -1;             // into the instance's ranks
  size_t last_count = 0;      // instances of the window the named rank was last in
  size_t window = 0;          // instances in the window
  double p_value = 1;         // binomial tail P(X >= last_count), X ~ B(window, 1/nranks)
  int64_t lateness_ns = 0;    // this instance: its start minus the others' median start
  double lateness_ratio = 0;  // lateness_ns / the instance's median duration
  std::string evidence;       // one line with those numbers
};

// Shared with the agent (collectors/common/collective_vocabulary.h).
using common::BinomialUpperTail;
using common::CollectiveSizeClass;

// What holds one communicator back now: over its last `window` instances, the most common
// (cause, node, rank, port) other than normal, when it holds at least min_share of them;
// cause normal (node etc. empty, affected 0) when nothing does.
struct CommDiagnosis {
  uint64_t comm = 0;
  v1::CollectiveCause cause = v1::COLLECTIVE_CAUSE_NORMAL;
  EvidenceRule rule = EvidenceRule::kNone;  // of the latest affected instance
  std::string node, port, func, evidence;   // func, evidence: of the latest affected instance
  int32_t rank = -1;
  size_t affected = 0, instances = 0;  // instances with that label / in the window
  int64_t since_unix_ns = 0;           // the first instance of its run
  double p90_s = 0;                    // p90 duration of the affected instances, seconds
  double baseline_p90_s = -1;          // p90 of the normal instances before `since`; -1: none
  double best_share = -1;  // the affected instances' median PathVerdict.best_share; -1 unknown
  std::string sentence;    // the whole diagnosis in one sentence with its numbers
  // Of the latest affected instance's bottleneck rank: its communicator's bytes on its node and
  // the other communicators' meanwhile (Outcome), 0 / none when unknown.
  uint64_t own_bytes = 0;
  NodeSharers sharers;
};

// Not thread-safe: CrossRankAnalysis calls it under its own lock.
class Diagnosis {
 public:
  // clock: where "least recently seen" is counted; shared by the Diagnosis of several shards
  // (CrossRankAnalysis) so that their communicators compare. Null: this object's own.
  explicit Diagnosis(DiagnosisOptions options = {}, std::atomic<uint64_t>* clock = nullptr)
      : options_(options), clock_(clock != nullptr ? clock : &own_clock_) {}

  // Adds the instance's arrival order to the history of its kind and tests it. `ranks` has
  // at least one entry.
  StragglerVerdict ObserveArrivals(uint64_t comm, Name func, uint64_t bytes,
                                   absl::Span<const RankArrival> ranks);

  // The final cause of an instance (after ObserveArrivals and the network rules).
  struct Outcome {
    std::string func;
    int64_t end_unix_ns = 0;
    int64_t duration_ns = 0;  // the longest rank's
    v1::CollectiveCause cause = v1::COLLECTIVE_CAUSE_NORMAL;
    EvidenceRule rule = EvidenceRule::kNone;  // what named the cause; kNone for normal
    std::string node, port, evidence;
    int32_t rank = -1;
    // Its busBw's share of the best its kind reaches on the fabric (PathVerdict.best_share);
    // -1 unknown. The cost of a fault that no clean instance preceded.
    double best_share = -1;
    // The bottleneck rank's own bytes and the other communicators on its node meanwhile
    // (PortFigures), for naming the job that shared its link.
    uint64_t own_bytes = 0;
    NodeSharers sharers;
  };
  void Record(uint64_t comm, Outcome outcome);

  // What holds each communicator back now (only: those to include; null = all), in no order;
  // rendered by exporters/exposition/diagnosis_render.h.
  std::vector<CommDiagnosis> Snapshot(const absl::flat_hash_set<uint64_t>* only = nullptr) const;
  // Each communicator held and when it was last seen, on the clock given at construction.
  std::vector<std::pair<uint64_t, uint64_t>> LastSeen() const;

  size_t comms() const { return comms_.size(); }

 private:
  struct Arrival {
    Name last_node;
    int32_t last_rank = -1;
    double lateness_ratio = 0;
  };
  using Kind = std::tuple<uint64_t, Name, int>;
  struct Comm {
    std::deque<Outcome> recent;
    uint64_t touched = 0;
  };
  CommDiagnosis Diagnose(uint64_t comm, const Comm& c) const;
  static std::string Sentence(const CommDiagnosis& d);

  const DiagnosisOptions options_;
  // Hash maps: looked up for every rank of every instance, iterated only to forget a comm.
  absl::flat_hash_map<Kind, std::deque<Arrival>> arrivals_;
  // (comm, node, rank) -> end of its latest collective on the communicator (Unix ns).
  using RankKey = std::tuple<uint64_t, Name, int32_t>;
  absl::flat_hash_map<RankKey, int64_t> previous_end_;
  std::map<uint64_t, Comm> comms_;
  std::atomic<uint64_t> own_clock_{0};
  std::atomic<uint64_t>* clock_;
};

}  // namespace fabricscope::exporters
