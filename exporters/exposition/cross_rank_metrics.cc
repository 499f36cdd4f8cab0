// The cross-rank analysis's metrics (CrossRankAnalysis::Collect) and its diagnosis JSON, read
// from the communicator and node shards one lock at a time (exporters/analysis/cross_rank.h).

#include <algorithm>
#include <functional>

#include "absl/strings/str_cat.h"
#include "exporters/analysis/cross_rank.h"
#include "exporters/exposition/metric_util.h"

namespace fabricscope::exporters {

void CrossRankAnalysis::Collect(std::vector<prometheus::MetricFamily>* out) const {
  // The shards' counters, one shard lock at a time, then the node-level series likewise.
  std::vector<uint64_t> skew_buckets(ArrivalSkewBounds().size() + 1, 0);
  double skew_sum = 0;
  uint64_t instances = 0, evicted = 0, pending = 0;
  std::array<uint64_t, kCauses> by_cause = {};
  std::vector<prometheus::MetricFamily> diagnosis;
  for (const auto& sp : shards_) {
    absl::MutexLock lock(&sp->mu);
    for (size_t i = 0; i < skew_buckets.size(); ++i) skew_buckets[i] += sp->skew_buckets[i];
    skew_sum += sp->skew_sum;
    instances += sp->instances;
    evicted += sp->evicted;
    pending += sp->pending.size();
    for (size_t c = 0; c < kCauses; ++c) by_cause[c] += sp->by_cause[c];
  }
  const absl::flat_hash_set<uint64_t> diagnosed = DiagnosedComms();
  for (const auto& sp : shards_) {
    absl::MutexLock lock(&sp->mu);
    sp->diagnosis.Collect(&diagnosis, &diagnosed);
  }
  auto skew = MakeFamily(Metric::kCollectiveArrivalSkewSeconds);
  if (instances > 0) {
    v1::Histogram h;
    for (double bound : ArrivalSkewBounds()) h.add_upper_bounds(bound);
    for (uint64_t c : skew_buckets) h.add_bucket_counts(c);
    h.set_sum(skew_sum);
    h.set_count(instances);
    AddHistogram(skew, {}, h);
  }
  auto causes = MakeFamily(Metric::kCollectivesByCauseTotal);
  for (size_t c = 0; c < kCauses; ++c) {
    AddValue(causes, {{"cause", CauseName(static_cast<Cause>(c))}},
             static_cast<double>(by_cause[c]));
  }
  auto score = MakeFamily(Metric::kStragglerScore);
  auto share = MakeFamily(Metric::kCollectiveNetworkShareRatio);
  auto overlap = MakeFamily(Metric::kPortMicroburstOverlapRatio);
  auto dropped = MakeFamily(Metric::kCollectiveAnalysesDroppedTotal);
  for (const auto& ns : node_shards_) {
    absl::MutexLock lock(&ns->mu);
    for (const auto& [node, n] : ns->nodes) {
      for (const auto& [rank, s] : n.scores) {
        AddValue(score, {{"node", node.str()}, {"rank", absl::StrCat(rank)}},
                 s.blame.empty() ? 0.0 : s.sum / static_cast<double>(s.blame.size()));
      }
      if (n.have_share) AddValue(share, {{"node", node.str()}}, n.share);
      for (size_t pi = 0; pi < n.overlap_sum.size() && pi < n.ports->info.size(); ++pi) {
        const auto [total, burst] = n.overlap_sum[pi];
        if (n.overlap_nonzero[pi] == 0 || total <= 0) continue;
        const v1::PortInfo& p = n.ports->info[pi];
        AddValue(overlap,
                 {{"node", node.str()}, {"device", p.device()}, {"port", absl::StrCat(p.port())}},
                 std::clamp(burst / total, 0.0, 1.0));
      }
    }
  }
  static_assert(kMaxRanksPerInstance == 131072,
                "the help of kCollectiveAnalysesDroppedTotal in metric_catalog.inc names it");
  AddValue(dropped, {}, static_cast<double>(dropped_analyses_.load(std::memory_order_relaxed)));
  auto evicted_f = MakeFamily(Metric::kCollectiveInstancesEvictedTotal);
  AddValue(evicted_f, {}, static_cast<double>(evicted));
  auto pending_f = MakeFamily(Metric::kCollectiveInstancesPending);
  AddValue(pending_f, {}, static_cast<double>(pending));
  for (auto* f : {&skew, &causes, &score, &share, &overlap, &evicted_f, &dropped, &pending_f}) {
    if (!f->metric.empty()) out->push_back(std::move(*f));
  }
  MergeFamiliesByName(&diagnosis);
  for (prometheus::MetricFamily& f : diagnosis) out->push_back(std::move(f));
}

absl::flat_hash_set<uint64_t> CrossRankAnalysis::DiagnosedComms() const {
  std::vector<std::pair<uint64_t, uint64_t>> seen;  // (last seen, comm)
  for (const auto& sp : shards_) {
    absl::MutexLock lock(&sp->mu);
    for (const auto& [comm, at] : sp->diagnosis.LastSeen()) seen.emplace_back(at, comm);
  }
  const size_t keep = std::min(seen.size(), options_.diagnosis.max_comms);
  std::partial_sort(seen.begin(), seen.begin() + static_cast<long>(keep), seen.end(),
                    std::greater<>());
  absl::flat_hash_set<uint64_t> comms;
  for (size_t i = 0; i < keep; ++i) comms.insert(seen[i].second);
  return comms;
}

std::string CrossRankAnalysis::DiagnosisJson() const {
  const absl::flat_hash_set<uint64_t> diagnosed = DiagnosedComms();
  std::vector<Diagnosis::JsonEntry> entries;
  for (const auto& sp : shards_) {
    absl::MutexLock lock(&sp->mu);
    for (Diagnosis::JsonEntry& e : sp->diagnosis.JsonEntries(&diagnosed)) {
      entries.push_back(std::move(e));
    }
  }
  return Diagnosis::JoinJson(std::move(entries));
}

}  // namespace fabricscope::exporters
