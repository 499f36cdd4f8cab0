#include "exporters/analysis/collective_cause.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_format.h"

namespace fabricscope::exporters {

int CauseClassifier::Strongest(const std::vector<RankEntry>& ranks, v1::CollectiveCause cause,
                               int straggler) {
  int best = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const RankEntry& r = ranks[i];
    if (r.cause != cause) continue;
    // A rank lossy by the slow tail alone, kept waiting by a persistent straggler: the wait
    // explains its slowness, not the loss (CollectiveAnalysis.lossy_by_tail).
    if (straggler >= 0 && r.lossy_by_tail && static_cast<int>(i) != straggler) continue;
    const RankEntry* b = best < 0 ? nullptr : &ranks[static_cast<size_t>(best)];
    const bool stronger = cause == v1::COLLECTIVE_CAUSE_NETWORK_LOSSY
                              ? b == nullptr || r.events > b->events
                              : b == nullptr || r.saturated_ratio > b->saturated_ratio;
    if (stronger) best = static_cast<int>(i);
  }
  return best;
}

InstancePath CauseClassifier::PathOf(const CollectiveInstance& d, const InstanceTimes& t,
                                     absl::InlinedVector<const RankPath*, 16>* paths) {
  for (const RankEntry& r : d.ranks) paths->push_back(&r);
  InstancePath ip;
  ip.comm = d.key.comm;
  ip.func = d.key.func;
  ip.size_class = CollectiveSizeClass(d.ranks.empty() ? 0 : d.ranks[0].bytes);
  ip.nranks = d.nranks;
  ip.bus_bytes = d.ranks.empty() ? 0 : d.ranks[0].bus_bytes;
  ip.transfer_ns = t.last_end - t.last_start;
  ip.end_unix_ns = t.last_end;
  ip.ranks = *paths;
  return ip;
}

double CauseClassifier::Classify(CollectiveInstance& d, const InstanceTimes& t,
                                 Diagnosis& diagnosis) {
  absl::InlinedVector<RankArrival, 16> arrivals;
  for (const RankEntry& r : d.ranks) {
    arrivals.push_back({r.node, r.rank, r.start_unix_ns, r.end_unix_ns});
  }
  const StragglerVerdict persistent = diagnosis.ObserveArrivals(
      d.key.comm, d.key.func, d.ranks.empty() ? 0 : d.ranks[0].bytes, arrivals);
  const int lossy = Strongest(d.ranks, v1::COLLECTIVE_CAUSE_NETWORK_LOSSY, persistent.index);
  const int saturated = Strongest(d.ranks, v1::COLLECTIVE_CAUSE_NETWORK_SATURATED, -1);
  const int64_t instant_min_skew = std::max<int64_t>(
      options_.straggler_min_skew_ns,
      static_cast<int64_t>(options_.straggler_skew_ratio * static_cast<double>(t.median_duration)));
  // The absolute evidence of the ranks' ports, from the moment the last rank arrived.
  absl::InlinedVector<const RankPath*, 16> paths;
  const InstancePath ip = PathOf(d, t, &paths);
  const PathVerdict pv = path_.Evaluate(ip);
  d.busbw = pv.busbw;
  d.line_share = pv.line_share;
  d.best_share = pv.best_share;
  double w = 0;
  if (lossy >= 0 || saturated >= 0) {
    const int b = lossy >= 0 ? lossy : saturated;
    d.cause =
        lossy >= 0 ? v1::COLLECTIVE_CAUSE_NETWORK_LOSSY : v1::COLLECTIVE_CAUSE_NETWORK_SATURATED;
    d.rule = EvidenceRule::kRankAnalysis;
    d.bottleneck = b;
    d.evidence = std::string(d.ranks[static_cast<size_t>(b)].detail());
    w = lossy >= 0 ? 1 : std::min(1.0, d.ranks[static_cast<size_t>(b)].saturated_ratio);
  } else if (pv.rule != EvidenceRule::kNone && persistent.index < 0) {
    d.cause = pv.rule == EvidenceRule::kFabricLoss ? v1::COLLECTIVE_CAUSE_NETWORK_LOSSY
                                                   : v1::COLLECTIVE_CAUSE_NETWORK_SATURATED;
    d.rule = pv.rule;
    d.bottleneck = pv.bottleneck;
    d.evidence = pv.evidence;
    w = pv.weight;
  } else if (persistent.index >= 0 ||
             // seq 0: the ranks' start-up skew (process launch, communicator init), not a step
             (persistent.latest >= 0 && d.key.seq > 0 &&
              persistent.latest_lateness_ns >= instant_min_skew)) {
    d.cause = v1::COLLECTIVE_CAUSE_COMPUTE_STRAGGLER;
    d.rule = EvidenceRule::kArrivalOrder;
    d.bottleneck = persistent.index >= 0 ? persistent.index : persistent.latest;
    d.evidence = persistent.evidence;
    if (persistent.index < 0) {
      const RankEntry& r = d.ranks[static_cast<size_t>(persistent.latest)];
      d.evidence = absl::StrFormat(
          "rank %d (%s) arrived %.3g ms after the median rank: at least %.0f%% of the median "
          "duration (%.3g ms)",
          r.rank, r.node.str(), static_cast<double>(persistent.latest_lateness_ns) / 1e6,
          100 * options_.straggler_skew_ratio, static_cast<double>(t.median_duration) / 1e6);
    }
    w = d.max_duration_ns > 0
            ? std::min(1.0, static_cast<double>(d.skew_ns) / static_cast<double>(d.max_duration_ns))
            : 1.0;
  } else {
    d.cause = v1::COLLECTIVE_CAUSE_NORMAL;
    path_.Learn(ip, pv);
  }
  Record(d, t.last_end, diagnosis);
  return w;
}

void CauseClassifier::Record(const CollectiveInstance& d, int64_t last_end, Diagnosis& diagnosis) {
  Diagnosis::Outcome o;
  o.func = d.key.func.str();
  o.end_unix_ns = last_end;
  o.duration_ns = d.max_duration_ns;
  o.cause = d.cause;
  o.rule = d.rule;
  o.best_share = d.best_share;
  o.evidence = d.evidence;
  if (d.bottleneck >= 0) {
    const RankEntry& b = d.ranks[static_cast<size_t>(d.bottleneck)];
    o.node = b.node.str();
    o.rank = b.rank;
    o.port = d.cause == v1::COLLECTIVE_CAUSE_COMPUTE_STRAGGLER ? "" : b.port.str();
    o.own_bytes = b.own_bytes;
    o.sharers = b.sharers;
  }
  diagnosis.Record(d.key.comm, std::move(o));
}

}  // namespace fabricscope::exporters
