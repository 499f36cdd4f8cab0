// CrossRankAnalysis::Snapshot and Diagnoses: the counters, scores and diagnoses read from the
// communicator and node shards one lock at a time (exporters/analysis/cross_rank.h).

#include <algorithm>
#include <functional>

#include "exporters/analysis/cross_rank.h"

namespace fabricscope::exporters {

CrossRankSnapshot CrossRankAnalysis::Snapshot() const {
  CrossRankSnapshot s;
  s.skew_buckets.assign(ArrivalSkewBounds().size() + 1, 0);
  for (const auto& sp : shards_) {
    absl::MutexLock lock(&sp->mu);
    for (size_t i = 0; i < s.skew_buckets.size(); ++i) s.skew_buckets[i] += sp->skew_buckets[i];
    s.skew_sum += sp->skew_sum;
    s.instances += sp->instances;
    s.evicted += sp->evicted;
    s.pending += sp->pending.size();
    for (size_t c = 0; c < kCauses; ++c) s.by_cause[c] += sp->by_cause[c];
  }
  for (const auto& ns : node_shards_) {
    absl::MutexLock lock(&ns->mu);
    for (const auto& [node, n] : ns->nodes) {
      for (const auto& [rank, sc] : n.scores) {
        s.scores.push_back(
            {node.str(), rank,
             sc.blame.empty() ? 0.0 : sc.sum / static_cast<double>(sc.blame.size())});
      }
      if (n.have_share) s.network_shares.emplace_back(node.str(), n.share);
      for (size_t pi = 0; pi < n.overlap_sum.size() && pi < n.ports->info.size(); ++pi) {
        const auto [total, burst] = n.overlap_sum[pi];
        if (n.overlap_nonzero[pi] == 0 || total <= 0) continue;
        const v1::PortInfo& p = n.ports->info[pi];
        s.overlaps.push_back(
            {node.str(), p.device(), p.port(), std::clamp(burst / total, 0.0, 1.0)});
      }
    }
  }
  s.dropped_analyses = dropped_analyses_.load(std::memory_order_relaxed);
  s.diagnoses = Diagnoses();
  return s;
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

std::vector<CommDiagnosis> CrossRankAnalysis::Diagnoses() const {
  const absl::flat_hash_set<uint64_t> diagnosed = DiagnosedComms();
  std::vector<CommDiagnosis> all;
  for (const auto& sp : shards_) {
    absl::MutexLock lock(&sp->mu);
    for (CommDiagnosis& d : sp->diagnosis.Snapshot(&diagnosed)) all.push_back(std::move(d));
  }
  return all;
}

}  // namespace fabricscope::exporters
