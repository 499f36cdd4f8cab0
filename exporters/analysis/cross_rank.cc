#include "exporters/analysis/cross_rank.h"

#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "exporters/analysis/cross_rank_heatmaps.h"

namespace fabricscope::exporters {

CrossRankAnalysis::CrossRankAnalysis(CrossRankOptions options)
    : names_(options.max_names),
      fabric_loss_(options.fabric_loss),
      ledger_(options),
      matcher_(options) {}

void CrossRankAnalysis::OnHello(const v1::Hello& hello) {
  // A node the name table has no room for is not tracked: its analyses are dropped and counted
  // (OnBatch).
  const std::optional<Name> node = names_.Intern(hello.node());
  if (!node) return;
  auto ports = std::make_shared<NodePorts>();
  ports->info.assign(hello.ports().begin(), hello.ports().end());
  for (const v1::PortInfo& pi : ports->info) {
    // A label the table has no room for is shown as none.
    ports->labels.push_back(
        names_.Intern(pi.rdma() ? absl::StrCat(pi.device(), ":", pi.port()) : pi.device())
            .value_or(Name()));
  }
  ledger_.SetPorts(*node, std::move(ports));
}

void CrossRankAnalysis::ForgetNode(const std::string& node) {
  const std::optional<Name> name = names_.Find(node);
  if (!name) return;
  fabric_loss_.ForgetNode(*name);
  ledger_.Forget(*name);
}

void CrossRankAnalysis::OnBatch(const std::string& node_name, const v1::Batch& batch,
                                const PeerRing* ring, std::vector<v1::ForwardedAnalysis>* forward) {
  if (batch.collectives_size() == 0 && !batch.has_collective_analysis() && !batch.has_gpu()) {
    // A node without GPU ingest: its ports are part of the fabric all the same.
    if (batch.ports_size() == 0) return;
    const std::optional<Name> known = names_.Find(node_name);
    if (!known) return;
    const std::shared_ptr<const NodePorts> ports = ledger_.Ports(*known);
    if (ports != nullptr) fabric_loss_.OnBatch(*known, ports->info, batch);
    return;
  }
  const std::optional<Name> name = names_.Intern(node_name);
  if (!name) {  // a new node with the name table full: its analyses are dropped and counted
    uint64_t analyses = 0;
    for (const v1::Collective& c : batch.collectives()) analyses += c.has_analysis() ? 1 : 0;
    dropped_analyses_.fetch_add(analyses, std::memory_order_relaxed);
    return;
  }
  const Name node = *name;
  const std::shared_ptr<const NodePorts> ports = ledger_.Take(node, batch);
  fabric_loss_.OnBatch(node, ports->info, batch);
  std::vector<RankReport> reports;
  reports.reserve(static_cast<size_t>(batch.collectives_size()));
  uint64_t dropped = 0;
  reports_.FromBatch(node, batch, *ports, ring, forward, &reports, &dropped);
  MatchReports(std::move(reports), dropped);
}

void CrossRankAnalysis::OnForwarded(const v1::Batch& batch) {
  if (batch.forwarded_size() == 0) return;
  std::vector<RankReport> reports;
  reports.reserve(static_cast<size_t>(batch.forwarded_size()));
  uint64_t dropped = 0;
  reports_.FromForwarded(batch, &reports, &dropped);
  MatchReports(std::move(reports), dropped);
}

void CrossRankAnalysis::MatchReports(std::vector<RankReport>&& reports, uint64_t dropped) {
  const std::vector<BlameUpdate> blames =
      matcher_.Match(std::move(reports), observe_ ? &observe_ : nullptr);
  if (dropped > 0) dropped_analyses_.fetch_add(dropped, std::memory_order_relaxed);
  ledger_.ApplyBlames(blames);
}

CrossRankSnapshot CrossRankAnalysis::Snapshot() const {
  CrossRankSnapshot s;
  matcher_.AddTo(&s);
  ledger_.AddTo(&s);
  s.dropped_analyses = dropped_analyses_.load(std::memory_order_relaxed);
  return s;
}

HeatmapModel CrossRankAnalysis::CollectivesHeatmap(const std::string& comm, const std::string& func,
                                                   size_t instances,
                                                   const std::set<uint64_t>* comms) const {
  std::pair<uint64_t, std::string> pick;
  const auto counts = matcher_.RecentCounts();
  if (!PickCollective(counts, comm, func, &pick, comms)) {
    HeatmapModel m = CollectivesHeatmapOf(nullptr, {});
    m.note = counts.empty() || (comm.empty() && func.empty())
                 ? "an instance is complete when every rank of its communicator has reported it: "
                   "load the NCCL profiler plugin into every rank of the job (collectors/nccl/"
                   "README.md) and point each node's agent at this aggregator"
                 : absl::StrCat("none of comm=\"", comm, "\" func=\"", func, "\" among the ",
                                counts.size(),
                                " communicator and function pairs with complete "
                                "instances (their comm labels: /api/collectives/slow)");
    return m;
  }
  return CollectivesHeatmapOf(&pick, matcher_.Recent(pick.first, pick.second, instances));
}

HeatmapModel CrossRankAnalysis::RanksHeatmap(const std::string& comm,
                                             const std::set<uint64_t>* comms) const {
  return RanksHeatmapOf(ledger_.RankPairs(), comm, comms);
}

}  // namespace fabricscope::exporters
