#include "exporters/analysis/collective_cause.h"

#include <algorithm>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
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
  } else if (FabricVerdict fv;
             persistent.index < 0 && (fv = LeafUplinks(d, ip.transfer_ns)).bottleneck >= 0) {
    d.cause = v1::COLLECTIVE_CAUSE_FABRIC_OVERSUBSCRIBED;
    d.rule = EvidenceRule::kLeafUplinks;
    d.bottleneck = fv.bottleneck;
    d.evidence = fv.evidence;
    w = std::min(1.0, fv.ratio);
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

CauseClassifier::FabricVerdict CauseClassifier::LeafUplinks(const CollectiveInstance& d,
                                                            int64_t transfer_ns) const {
  FabricVerdict v;
  if (!options_.fabric || transfer_ns <= 0 || d.ranks.empty()) return v;
  const std::shared_ptr<const FabricPlacement> p = options_.fabric();
  if (!p || p->leaves.empty()) return v;
  // Each rank's index in d.ranks, and the leaf of each index (-1 unknown).
  absl::flat_hash_map<int32_t, size_t> index_of_rank;
  std::vector<int> leaf_of(d.ranks.size());
  for (size_t i = 0; i < d.ranks.size(); ++i) {
    index_of_rank[d.ranks[i].rank] = i;
    leaf_of[i] = p->LeafOfRank(d.key.comm, d.ranks[i].rank, d.ranks[i].node.str());
  }
  const size_t nl = p->leaves.size();
  // Per rank, the bytes it sent or received across leaves.
  std::vector<double> out(nl, 0), in(nl, 0), rank_across(d.ranks.size(), 0);
  for (size_t i = 0; i < d.ranks.size(); ++i) {
    const RankEntry& r = d.ranks[i];
    const int src = leaf_of[i];
    const int known = (r.send_peers[0] >= 0) + (r.send_peers[1] >= 0);
    if (src < 0 || known == 0 || !(r.bus_bytes > 0)) continue;
    for (int32_t peer : r.send_peers) {
      const auto it = peer >= 0 ? index_of_rank.find(peer) : index_of_rank.end();
      if (it == index_of_rank.end()) continue;
      const int dst = leaf_of[it->second];
      if (dst < 0 || dst == src) continue;
      const double b = r.bus_bytes / known;
      out[static_cast<size_t>(src)] += b;
      in[static_cast<size_t>(dst)] += b;
      rank_across[i] += b;
      rank_across[it->second] += b;
    }
  }
  const double seconds = static_cast<double>(transfer_ns) / 1e9;
  int leaf = -1;
  for (size_t l = 0; l < nl; ++l) {
    const double cap = p->leaves[l].uplink_bytes_per_second;
    if (!(cap > 0)) continue;
    const double ratio = std::max(out[l], in[l]) / seconds / cap;
    if (ratio >= options_.fabric_oversubscribed_ratio && ratio > v.ratio) {
      v.ratio = ratio;
      leaf = static_cast<int>(l);
    }
  }
  if (leaf < 0) return v;
  for (size_t i = 0; i < d.ranks.size(); ++i) {
    if (leaf_of[i] != leaf) continue;
    if (v.bottleneck < 0 || rank_across[i] > rank_across[static_cast<size_t>(v.bottleneck)]) {
      v.bottleneck = static_cast<int>(i);
    }
  }
  const FabricPlacement::Leaf& l = p->leaves[static_cast<size_t>(leaf)];
  const double rate =
      std::max(out[static_cast<size_t>(leaf)], in[static_cast<size_t>(leaf)]) / seconds;
  v.evidence = absl::StrFormat(
      "leaf %s's uplinks carried %.3g Gb/s of its cross-leaf traffic over %.3g ms, %.0f%% of "
      "their %.3g Gb/s, while no rank's host port was saturated",
      l.name, rate * 8 / 1e9, seconds * 1e3, 100 * v.ratio, l.uplink_bytes_per_second * 8 / 1e9);
  return v;
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
