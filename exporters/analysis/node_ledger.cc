#include "exporters/analysis/node_ledger.h"

#include <algorithm>

namespace fabricscope::exporters {

NodeLedger::NodeLedger(const CrossRankOptions& options) : options_(options) {
  for (size_t i = 0; i < kNodeShards; ++i) shards_.push_back(std::make_unique<NodeShard>());
}

void NodeLedger::SetPorts(Name node, std::shared_ptr<const NodePorts> ports) {
  NodeShard& ns = ShardOf(node);
  absl::MutexLock lock(&ns.mu);
  NodeInfo& n = ns.nodes[node];
  n.ports = std::move(ports);
  n.overlap.clear();
  n.overlap_sum.clear();
  n.overlap_nonzero.clear();
  n.overlap_next = n.overlap_count = 0;
}

void NodeLedger::Forget(Name node) {
  NodeShard& ns = ShardOf(node);
  absl::MutexLock lock(&ns.mu);
  auto it = ns.nodes.find(node);
  if (it == ns.nodes.end()) return;
  scored_ranks_.fetch_sub(it->second.scores.size(), std::memory_order_relaxed);
  ns.nodes.erase(it);
}

std::shared_ptr<const NodePorts> NodeLedger::Ports(Name node) const {
  NodeShard& ns = ShardOf(node);
  absl::MutexLock lock(&ns.mu);
  const auto it = ns.nodes.find(node);
  return it == ns.nodes.end() ? nullptr : it->second.ports;
}

void NodeLedger::AddOverlap(NodeInfo& n, const v1::Collective& c, double dur) const {
  const size_t window = options_.overlap_window;
  const size_t ports = n.ports->info.size();
  if (ports == 0 || window == 0) return;
  if (n.overlap.empty()) {
    n.overlap.assign(window * ports, {0.0f, 0.0f});
    n.overlap_sum.assign(ports, {0.0, 0.0});
    n.overlap_nonzero.assign(ports, 0);
  }
  std::pair<float, float>* slot = &n.overlap[n.overlap_next * ports];
  for (size_t p = 0; p < ports; ++p) {  // the entry leaving the window
    if (slot[p].first == 0 && slot[p].second == 0) continue;
    n.overlap_sum[p].first -= slot[p].first;
    n.overlap_sum[p].second -= slot[p].second;
    // Exactly zero once nothing is left, whatever the rounding of the sums.
    if (--n.overlap_nonzero[p] == 0) n.overlap_sum[p] = {0.0, 0.0};
    slot[p] = {0.0f, 0.0f};
  }
  for (const v1::PortActivity& pa : c.analysis().ports()) {
    if (pa.port_index() >= ports || pa.samples() == 0) continue;
    std::pair<float, float>& e = slot[pa.port_index()];
    const bool was_zero = e.first == 0 && e.second == 0;
    n.overlap_sum[pa.port_index()].first -= e.first;
    n.overlap_sum[pa.port_index()].second -= e.second;
    e = {static_cast<float>(dur), static_cast<float>(std::min(dur, pa.microburst_seconds()))};
    n.overlap_sum[pa.port_index()].first += e.first;
    n.overlap_sum[pa.port_index()].second += e.second;
    const bool is_zero = e.first == 0 && e.second == 0;
    if (was_zero && !is_zero) ++n.overlap_nonzero[pa.port_index()];
    if (!was_zero && is_zero && --n.overlap_nonzero[pa.port_index()] == 0) {
      n.overlap_sum[pa.port_index()] = {0.0, 0.0};
    }
  }
  n.overlap_next = (n.overlap_next + 1) % window;
  n.overlap_count = std::min(n.overlap_count + 1, window);
}

std::shared_ptr<const NodePorts> NodeLedger::Take(Name node, const v1::Batch& batch) {
  NodeShard& ns = ShardOf(node);
  absl::MutexLock lock(&ns.mu);
  NodeInfo& n = ns.nodes[node];
  if (batch.has_collective_analysis() && batch.collective_analysis().share_seconds() > 0) {
    n.share = batch.collective_analysis().network_share_ratio();
    n.have_share = true;
  }
  if (batch.has_gpu()) StorePairs(n.pairs, batch.gpu());
  for (const v1::Collective& c : batch.collectives()) {
    if (!c.has_analysis()) continue;
    AddOverlap(n, c, static_cast<double>(c.end_ns() - c.start_ns()) / 1e9);
  }
  return n.ports;
}

// The agent sends all its cumulative pairs in every window (agent/gpu_timeline.cc): each
// communicator a window names is replaced by the window's pairs. One the node no longer reports
// (its job ended, the agent restarted) stays for the heat map while the node holds fewer than
// max_rank_pairs_per_node pairs; past that the least recently reported go first. So a node
// cycling through communicators never holds more than the limit (plus one window, itself
// within limits: max_rank_pairs_per_node at ingest).
void NodeLedger::StorePairs(NodePairs& np, const v1::GpuWindow& w) const {
  const uint64_t tick = ++np.tick;
  std::map<uint64_t, std::map<std::pair<int32_t, int32_t>, uint64_t>> fresh;
  for (const v1::RankPairBytes& p : w.rank_pairs()) {
    fresh[p.comm_hash()][{p.src_rank(), p.dst_rank()}] = p.bytes_total();
  }
  for (auto& [comm, bytes] : fresh) {
    CommPairs& c = np.comms[comm];
    np.total -= c.bytes.size();
    c.bytes = std::move(bytes);
    c.seen = tick;
    np.total += c.bytes.size();
  }
  while (np.total > options_.max_rank_pairs_per_node) {
    auto oldest = np.comms.end();
    for (auto it = np.comms.begin(); it != np.comms.end(); ++it) {
      if (it->second.seen != tick &&
          (oldest == np.comms.end() || it->second.seen < oldest->second.seen)) {
        oldest = it;
      }
    }
    if (oldest == np.comms.end()) break;  // all from this window
    np.total -= oldest->second.bytes.size();
    np.comms.erase(oldest);
  }
}

void NodeLedger::ApplyBlames(const std::vector<BlameUpdate>& blames) {
  std::vector<uint32_t> order, starts;
  GroupByShard(
      blames.size(), kNodeShards,
      [&](size_t i) { return absl::Hash<Name>{}(blames[i].node) % kNodeShards; }, &order, &starts);
  for (size_t k = 0; k < kNodeShards; ++k) {
    if (starts[k] == starts[k + 1]) continue;
    NodeShard& ns = *shards_[k];
    absl::MutexLock lock(&ns.mu);
    for (uint32_t i = starts[k]; i < starts[k + 1]; ++i) {
      const BlameUpdate& b = blames[order[i]];
      Blame(ns.nodes[b.node], b.rank, b.weight);
    }
  }
}

void NodeLedger::Blame(NodeInfo& n, int32_t rank, double w) {
  auto it = n.scores.find(rank);
  if (it == n.scores.end()) {
    if (scored_ranks_.fetch_add(1, std::memory_order_relaxed) >= options_.max_ranks) {
      scored_ranks_.fetch_sub(1, std::memory_order_relaxed);
      return;
    }
    it = n.scores.emplace(rank, Score{}).first;
  }
  Score& s = it->second;
  s.blame.push_back(w);
  s.sum += w;
  while (s.blame.size() > options_.score_window) {
    s.sum -= s.blame.front();
    s.blame.pop_front();
  }
}

void NodeLedger::AddTo(CrossRankSnapshot* s) const {
  for (const auto& ns : shards_) {
    absl::MutexLock lock(&ns->mu);
    for (const auto& [node, n] : ns->nodes) {
      for (const auto& [rank, sc] : n.scores) {
        s->scores.push_back(
            {node.str(), rank,
             sc.blame.empty() ? 0.0 : sc.sum / static_cast<double>(sc.blame.size())});
      }
      if (n.have_share) s->network_shares.emplace_back(node.str(), n.share);
      for (size_t pi = 0; pi < n.overlap_sum.size() && pi < n.ports->info.size(); ++pi) {
        const auto [total, burst] = n.overlap_sum[pi];
        if (n.overlap_nonzero[pi] == 0 || total <= 0) continue;
        const v1::PortInfo& p = n.ports->info[pi];
        s->overlaps.push_back(
            {node.str(), p.device(), p.port(), std::clamp(burst / total, 0.0, 1.0)});
      }
    }
  }
}

std::map<std::tuple<uint64_t, int32_t, int32_t>, uint64_t> NodeLedger::RankPairs() const {
  std::map<std::tuple<uint64_t, int32_t, int32_t>, uint64_t> all;
  for (const auto& ns : shards_) {
    absl::MutexLock lock(&ns->mu);
    for (const auto& [node, n] : ns->nodes) {
      for (const auto& [c, pairs] : n.pairs.comms) {
        for (const auto& [sd, bytes] : pairs.bytes) {
          auto& v = all[{c, sd.first, sd.second}];
          v = std::max(v, bytes);
        }
      }
    }
  }
  return all;
}

uint64_t NodeLedger::memory_bytes() const {
  uint64_t b = 0;
  for (const auto& ns : shards_) {
    absl::MutexLock lock(&ns->mu);
    for (const auto& [node, n] : ns->nodes) {
      for (const auto& [rank, s] : n.scores) b += 64 + s.blame.size() * sizeof(double);
      b += n.overlap.capacity() * sizeof(n.overlap[0]) + n.overlap_sum.capacity() * 16 +
           n.overlap_nonzero.capacity() * 4;
    }
  }
  return b;
}

void NodeLedger::ProbeLock() const {
  for (const auto& s : shards_) absl::MutexLock lock(&s->mu);
}

}  // namespace fabricscope::exporters
