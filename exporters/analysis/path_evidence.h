#pragma once

// Absolute evidence on a matched collective instance, judged without the collective's past, so
// that a fault present before the job's first collective is named from its first instance
// (issue 33). The history rules (agent/collective_rules.cc, exporters/analysis/diagnosis.h)
// compare a collective with the clean instances of its own kind; a job launched onto a link
// already shared, lossy or slow has no clean instance to compare with. Here an instance is
// compared with what its path should give instead:
//
//   efficiency  = busBw / the slowest line rate among its ranks' ports, busBw = the instance's
//                 bus bytes (nccl-tests' S x factor, Collective.busbw x duration, the same on
//                 every rank) over its transfer time: from the last rank's start to the last
//                 rank's end (a compute straggler's wait is not transfer time);
//   best share  = efficiency / the best its kind reaches on the fabric: per (function, log2 size
//                 class, nranks), over every communicator of that kind, the highest median
//                 efficiency of a communicator's recent clean instances (normal, with no loss
//                 event, no other flow's bytes and no slow port: a fault does not become the
//                 best). Efficiency, not busBw, so that a communicator on slower links is held
//                 to its own links' rate (the slowest link sets the expectation).
//
// An instance is "low" when its best share is <= low_best_share (the kind's best is known), or,
// with no best known yet, its efficiency is <= low_line_share. A low instance is named from the
// evidence of one of its ranks' ports, first match wins:
//
//   network_lossy (fabric_loss)     the port lost or retransmitted >= fabric_loss_ratio x the
//                                   median rate of the fabric's other ports of its kind in their
//                                   latest windows, >= fabric_loss_min_rate, its window's events
//                                   too many for a port at the larger of that median and half
//                                   the min rate (one-sided binomial test, p <=
//                                   fabric_loss_max_p_value), and one in this collective
//                                   (exporters/analysis/fabric_loss.h). Not gated
//                                   by "low": a lost packet costs a timeout or a replay in the
//                                   tail, not always in this instance's mean rate.
//   network_saturated (shared_flow) its ports moved >= shared_ratio x its node's own bytes of
//                                   the communicator (CollectiveAnalysis.own_bytes): another
//                                   flow shared the link.
//   network_saturated (slow_link)   the rate the port sent at when it had data (the median
//                                   transmit utilization of its busy samples), as a share of
//                                   what its path can carry (the lowest line rate of its own
//                                   port and of the ports of the ranks it sent to), was <=
//                                   slow_link_ratio x the median of the other ranks' shares:
//                                   the path from it carries less than its line
//                                   rate while the others' carry more (a degraded or
//                                   oversubscribed hop further on, a link declared above what it
//                                   carries).
//
// Thread-safe: the kinds' best efficiencies sit behind one lock, held only inside Evaluate and
// Learn (the caller may hold its own lock; this one never waits for another).

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "exporters/analysis/names.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

struct PathEvidenceOptions {
  // Low share (above). 0.8: a fifth of the bandwidth lost, twice the straggler floor of 10%; 0.5
  // of line rate without a best: below what NCCL's ring reaches on a healthy link for messages
  // of a few MB and more (nccl-tests busBw of 0.8-0.95 of line rate on InfiniBand and RoCE).
  double low_best_share = 0.8;
  double low_line_share = 0.5;
  // The kind's best: per communicator the median efficiency of its last best_window clean
  // instances, counted once min_best_instances of them were seen and while its last one ended
  // within best_max_age_ns; at most comms_per_kind communicators per kind (the least recently
  // seen replaced) and max_kinds kinds (beyond, a new kind has no best).
  size_t best_window = 16;
  size_t min_best_instances = 5;
  int64_t best_max_age_ns = 24 * 3600 * 1'000'000'000LL;
  size_t comms_per_kind = 16;
  size_t max_kinds = 4096;
  // Shared flow: 1.25, as the agent's contention_ratio (agent/collective_options.h): headers
  // (~5% for TCP over Ethernet at 1,500 bytes, ~4% for RoCEv2 at 4,096) and a control flow fit
  // under it.
  double shared_ratio = 1.25;
  // Fabric loss: 10 x the fabric's median (a port that loses an order of magnitude more than its
  // peers; issue 33), at least 2e-4 (the agent's lossy_min_rate: twice the 0.01% loss that costs
  // ~10% of effective bandwidth, above the ~5e-5 of spurious TCP retransmissions of a clean veth
  // ring), and more events than a port at max(median, min rate / 2) would lose in the window's
  // packets at p <= 1e-3 (the binomial test of the agent's lossy_max_p_value; W. J. Conover,
  // "Practical Nonparametric Statistics", 1999, §3.1): 2 events in 2,000 packets of a job's
  // first window (p 0.02 at 1e-4) are not a rate; 7 in 7,000 (0.1% loss) are (p 1e-5).
  double fabric_loss_ratio = 10;
  double fabric_loss_min_rate = 2e-4;
  double fabric_loss_max_p_value = 1e-3;
  // Slow link: 0.7, below the spread of the ranks' busy transmit rates on a healthy ring (each
  // rank sends the same chunks at the same rate: the lowest over the others' median was 0.98 in
  // 40 clean instances of the cluster in a box, exporters/README.md "Fault matrix"), with room for
  // the coarser samples of a real NIC, and above the 0.5 of a link that carries half.
  double slow_link_ratio = 0.7;
};

// Which evidence named an instance's cause (the "rule" of /api/collectives/slow and
// /api/diagnosis): a rank's own analysis (the agent's rules, agent/collective_analysis.h), the
// ranks' arrival order (compute_straggler, exporters/analysis/diagnosis.h), or one of the rules
// above.
enum class EvidenceRule : uint8_t {
  kNone,
  kRankAnalysis,
  kArrivalOrder,
  kFabricLoss,
  kSharedFlow,
  kSlowLink,
  kLeafUplinks,  // the fabric_oversubscribed rule (collective_cause.h), not PathEvidence's
};
// "", "rank_analysis", "arrival_order", "fabric_loss", "shared_flow", "slow_link",
// "leaf_uplinks".
const char* EvidenceRuleName(EvidenceRule r);

// Another communicator's network bytes on a rank's node while the rank's collective ran
// (CollectiveAnalysis.sharers); comm 0: none.
struct Sharer {
  uint64_t comm = 0;
  uint64_t bytes = 0;
};

// The other communicators on a rank's node while its collective ran: the two that moved the
// most, most first (CollectiveAnalysis.sharers, comm 0: none), and all of theirs together
// (CollectiveAnalysis.sharers_bytes_total, at least the two's).
struct NodeSharers {
  std::array<Sharer, 2> top{};
  uint64_t total = 0;
  // The rank's one port that these bytes (and its own_bytes) were counted on, when its agent
  // knew it from the rank's queue pairs (CollectiveAnalysis.ports_from_qps with one port);
  // empty: node-wide.
  Name port;
};

// What one rank's report carries for the evidence (CrossRankAnalysis::RankEntry), of the
// deciding port of its analysis (CollectiveAnalysis.port_index) unless said otherwise.
struct PortFigures {
  uint64_t line_rate = 0;   // bytes/s; 0 unknown
  uint64_t port_bytes = 0;  // bytes all its candidate ports moved during it, both directions
  uint64_t own_bytes = 0;   // CollectiveAnalysis.own_bytes (0: unknown)
  NodeSharers sharers;      // node-wide unless sharers.port names its port
  float tx_busy = 0;        // PortActivity.transmit_busy_utilization
  // The ranks it sent the most to (Collective.proxy_peers by bytes_sent), -1 none: the far
  // ends of its transfers, whose line rates bound what its path can carry.
  std::array<int32_t, 2> send_peers = {-1, -1};
  uint32_t samples = 0;      // fast samples overlapping it
  uint32_t loss_events = 0;  // during it (common::LossEvents)
  // Its latest window against the fabric (FabricLoss::Of, at the aggregator that received its
  // node's batch).
  uint32_t window_events = 0, fabric_ports = 0;
  float window_rate = 0, fabric_median = 0;
};

struct RankPath : PortFigures {
  Name node, port;  // port: the label of the deciding port
  int32_t rank = -1;
};

// One matched instance, as Evaluate reads it.
struct InstancePath {
  uint64_t comm = 0;
  Name func;
  int size_class = 0;
  int32_t nranks = 0;
  double bus_bytes = 0;     // S x busBw factor; 0 unknown (the function has no convention)
  int64_t transfer_ns = 0;  // last start to last end
  int64_t end_unix_ns = 0;  // its last end (for the best's age)
  absl::Span<const RankPath* const> ranks;  // its ranks in rank order, none null
};

struct PathVerdict {
  EvidenceRule rule = EvidenceRule::kNone;  // kNone or one of the three rules above
  int bottleneck = -1;                      // index into the instance's ranks
  double weight = 0;                        // the bottleneck's blame in [0, 1] (straggler score)
  std::string evidence;
  // The figures (-1 where unknown): busBw in bytes/s, efficiency, the best of its kind, best
  // share; low as judged above.
  double busbw = -1, line_share = -1, best_efficiency = -1, best_share = -1;
  uint64_t slowest_line_rate = 0;  // bytes/s; 0 unknown
  bool low = false;
  // No evidence at all (no loss event on any rank's port, no other flow's bytes, no slow port):
  // a candidate for the kind's best once its final cause is normal (Learn).
  bool evidence_free = true;
};

class PathEvidence {
 public:
  explicit PathEvidence(PathEvidenceOptions options = {}) : options_(options) {}

  // The figures and, for a low instance with evidence, the rule, bottleneck and one line of
  // evidence with its numbers. Names nothing when every rank's port is unknown.
  PathVerdict Evaluate(const InstancePath& in) const ABSL_LOCKS_EXCLUDED(mu_);
  // An instance whose final cause was normal and whose verdict was evidence_free: its
  // efficiency joins its communicator's clean history for the kind's best.
  void Learn(const InstancePath& in, const PathVerdict& v) ABSL_LOCKS_EXCLUDED(mu_);

  size_t kinds() const ABSL_LOCKS_EXCLUDED(mu_);
  uint64_t memory_bytes() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct KindKey {
    Name func;
    int size_class;
    int32_t nranks;
    friend bool operator==(const KindKey& a, const KindKey& b) {
      return a.func == b.func && a.size_class == b.size_class && a.nranks == b.nranks;
    }
    template <typename H>
    friend H AbslHashValue(H h, const KindKey& k) {
      return H::combine(std::move(h), k.func, k.size_class, k.nranks);
    }
  };
  struct CommBest {
    uint64_t comm = 0;
    std::vector<float> recent;  // ring of best_window efficiencies
    size_t next = 0, seen = 0;
    double median = 0;
    int64_t last_unix_ns = 0;
  };
  struct KindBest {
    std::vector<CommBest> comms;
  };
  // The highest median among the kind's communicators that count (enough instances, recent
  // enough); -1 when none does.
  double BestOf(const KindBest& k, int64_t now_unix_ns) const;
  // The rules, in order, on a low instance (or fabric loss on any): fills v's rule, bottleneck,
  // weight and evidence when one holds.
  void FabricLossRule(const InstancePath& in, PathVerdict* v) const;
  void SharedFlowRule(const InstancePath& in, PathVerdict* v) const;
  void SlowLinkRule(const InstancePath& in, PathVerdict* v) const;
  // "achieved 0.21 of the path's line rate (busBw 41.9 Mb/s, slowest port 200 Mb/s) and 0.48 of
  // the best its kind reaches (0.44)".
  static std::string Shares(const InstancePath& in, const PathVerdict& v);

  const PathEvidenceOptions options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<KindKey, KindBest> best_ ABSL_GUARDED_BY(mu_);
};

// "41.9 Mb/s", "200 Gb/s": bits per second of a byte rate, 3 significant digits.
std::string FormatBitRate(double bytes_per_second);

}  // namespace fabricscope::exporters
