#include "exporters/analysis/cross_rank.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "absl/container/inlined_vector.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fabricscope::exporters {

using common::LossEvents;
using common::SaturatedShare;

std::vector<double> ArrivalSkewBounds() {
  std::vector<double> b;
  for (double decade = 1e-5; decade < 10; decade *= 10) {
    for (double m : {1.0, 2.5, 5.0}) b.push_back(decade * m);
  }
  b.push_back(10);
  return b;
}

CrossRankAnalysis::CrossRankAnalysis(CrossRankOptions options)
    : options_(options),
      names_(options.max_names),
      path_(options.path),
      fabric_loss_(options.fabric_loss) {
  DiagnosisOptions d = options.diagnosis;
  d.max_kinds = std::max<size_t>(1, (d.max_kinds + kCommShards - 1) / kCommShards);
  for (size_t i = 0; i < kNodeShards; ++i) node_shards_.push_back(std::make_unique<NodeShard>());
  for (size_t i = 0; i < kCommShards; ++i) {
    auto shard = std::make_unique<CommShard>(d, &diag_clock_);
    absl::MutexLock lock(&shard->mu);
    shard->skew_buckets.assign(ArrivalSkewBounds().size() + 1, 0);
    shards_.push_back(std::move(shard));
  }
}

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
  NodeShard& ns = NodeShardOf(*node);
  absl::MutexLock lock(&ns.mu);
  NodeInfo& n = ns.nodes[*node];
  n.ports = std::move(ports);
  n.overlap.clear();
  n.overlap_sum.clear();
  n.overlap_nonzero.clear();
  n.overlap_next = n.overlap_count = 0;
}

void CrossRankAnalysis::ForgetNode(const std::string& node) {
  const std::optional<Name> name = names_.Find(node);
  if (!name) return;
  NodeShard& ns = NodeShardOf(*name);
  absl::MutexLock lock(&ns.mu);
  fabric_loss_.ForgetNode(*name);
  auto it = ns.nodes.find(*name);
  if (it == ns.nodes.end()) return;
  scored_ranks_.fetch_sub(it->second.scores.size(), std::memory_order_relaxed);
  ns.nodes.erase(it);
}

namespace {

// One analysis's (collective seconds, microburst overlap seconds) into a node's overlap ring of
// `window` x ports.size() entries.
template <typename NodeInfoT>
void AddOverlap(NodeInfoT& n, size_t window, const v1::Collective& c, double dur) {
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

// The indexes 0..n-1 grouped by shard_of(i) (< shards), in order within each shard (a counting
// sort): shard k's are (*order)[(*starts)[k] .. (*starts)[k + 1]).
template <typename ShardOf>
void GroupByShard(size_t n, size_t shards, ShardOf shard_of, std::vector<uint32_t>* order,
                  std::vector<uint32_t>* starts) {
  std::vector<uint32_t> shard(n);
  starts->assign(shards + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    shard[i] = static_cast<uint32_t>(shard_of(i));
    ++(*starts)[shard[i] + 1];
  }
  for (size_t k = 1; k <= shards; ++k) (*starts)[k] += (*starts)[k - 1];
  std::vector<uint32_t> next(starts->begin(), starts->end() - 1);
  order->resize(n);
  for (size_t i = 0; i < n; ++i) (*order)[next[shard[i]]++] = static_cast<uint32_t>(i);
}

}  // namespace

std::shared_ptr<const CrossRankAnalysis::NodePorts> CrossRankAnalysis::TakeNodeParts(
    Name node, const v1::Batch& batch) {
  NodeShard& ns = NodeShardOf(node);
  absl::MutexLock lock(&ns.mu);
  NodeInfo& n = ns.nodes[node];
  if (batch.has_collective_analysis() && batch.collective_analysis().share_seconds() > 0) {
    n.share = batch.collective_analysis().network_share_ratio();
    n.have_share = true;
  }
  if (batch.has_gpu()) StorePairs(n.pairs, batch.gpu());
  for (const v1::Collective& c : batch.collectives()) {
    if (!c.has_analysis()) continue;
    AddOverlap(n, options_.overlap_window, c, static_cast<double>(c.end_ns() - c.start_ns()) / 1e9);
  }
  return n.ports;
}

void CrossRankAnalysis::OnBatch(const std::string& node_name, const v1::Batch& batch,
                                const PeerRing* ring, std::vector<v1::ForwardedAnalysis>* forward) {
  if (batch.collectives_size() == 0 && !batch.has_collective_analysis() && !batch.has_gpu()) {
    // A node without GPU ingest: its ports are part of the fabric all the same.
    if (batch.ports_size() == 0) return;
    const std::optional<Name> known = names_.Find(node_name);
    if (!known) return;
    NodeShard& ns = NodeShardOf(*known);
    std::shared_ptr<const NodePorts> ports;
    {
      absl::MutexLock lock(&ns.mu);
      const auto it = ns.nodes.find(*known);
      if (it != ns.nodes.end()) ports = it->second.ports;
    }
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
  const std::shared_ptr<const NodePorts> ports = TakeNodeParts(node, batch);
  fabric_loss_.OnBatch(node, ports->info, batch);
  std::vector<Report> reports;
  reports.reserve(static_cast<size_t>(batch.collectives_size()));
  uint64_t dropped = 0;
  MakeReports(node, batch, *ports, ring, forward, &reports, &dropped);
  MatchReports(std::move(reports), dropped);
}

void CrossRankAnalysis::MatchReports(std::vector<Report>&& reports, uint64_t dropped) {
  // Shard by shard, each shard's lock taken once per batch. Batches of the ranks of one
  // communicator arrive together and name the same shards: a shard another thread holds is
  // skipped (TryLock) and come back to, so two ingest threads do not queue on one shard after
  // another in the same order; only when every shard left is busy does a thread wait.
  // The reports' indexes grouped by shard (the reports stay where they are).
  std::vector<uint32_t> order, starts;
  GroupByShard(
      reports.size(), shards_.size(), [&](size_t i) { return reports[i].shard; }, &order, &starts);
  std::vector<std::pair<size_t, size_t>> runs;  // [begin, end) in `order` of each shard's
  for (size_t k = 0; k < shards_.size(); ++k) {
    if (starts[k] < starts[k + 1]) runs.emplace_back(starts[k], starts[k + 1]);
  }
  std::vector<BlameUpdate> blames;
  Retired retired;
  while (!runs.empty()) {
    size_t pick = runs.size();
    for (size_t k = 0; k < runs.size() && pick == runs.size(); ++k) {
      if (shards_[reports[order[runs[k].first]].shard]->mu.TryLock()) pick = k;
    }
    if (pick == runs.size()) {
      pick = 0;
      shards_[reports[order[runs[0].first]].shard]->mu.Lock();
    }
    CommShard& s = *shards_[reports[order[runs[pick].first]].shard];
    for (size_t i = runs[pick].first; i < runs[pick].second; ++i) {
      Match(s, std::move(reports[order[i]]), &blames, &retired);
    }
    EvictExpired(s);
    s.mu.Unlock();
    runs.erase(runs.begin() + static_cast<long>(pick));
  }
  ApplyBlames(std::move(blames), dropped);
}

void CrossRankAnalysis::ApplyBlames(std::vector<BlameUpdate>&& blames, uint64_t dropped) {
  if (dropped > 0) dropped_analyses_.fetch_add(dropped, std::memory_order_relaxed);
  // Grouped by node shard, each shard's lock taken once.
  std::vector<uint32_t> order, starts;
  GroupByShard(
      blames.size(), kNodeShards,
      [&](size_t i) { return absl::Hash<Name>{}(blames[i].node) % kNodeShards; }, &order, &starts);
  for (size_t k = 0; k < kNodeShards; ++k) {
    if (starts[k] == starts[k + 1]) continue;
    NodeShard& ns = *node_shards_[k];
    absl::MutexLock lock(&ns.mu);
    for (uint32_t i = starts[k]; i < starts[k + 1]; ++i) {
      const BlameUpdate& b = blames[order[i]];
      Blame(ns.nodes[b.node], b.rank, b.weight);
    }
  }
}

bool CrossRankAnalysis::PopOldest(CommShard& s) {
  auto old = s.pending.find(s.pending_order.front().second);
  // An entry whose instance completed (or was replaced by a later one of the same key) is stale.
  const bool live =
      old != s.pending.end() && old->second.first_seen_unix_ns == s.pending_order.front().first;
  s.pending_order.pop_front();
  if (!live) return false;
  s.pending.erase(old);
  pending_total_.fetch_sub(1, std::memory_order_relaxed);
  ++s.evicted;
  return true;
}

void CrossRankAnalysis::EvictExpired(CommShard& s) {
  while (!s.pending_order.empty() &&
         s.pending_order.front().first < s.newest_unix_ns - options_.pending_timeout_ns) {
    PopOldest(s);
  }
}

void CrossRankAnalysis::Match(CommShard& s, Report&& r, std::vector<BlameUpdate>* blames,
                              Retired* retired) {
  s.newest_unix_ns = std::max(s.newest_unix_ns, r.entry.end_unix_ns);
  auto it = s.pending.find(r.key);
  if (it == s.pending.end()) {
    if (pending_total_.load(std::memory_order_relaxed) >= options_.max_pending) {
      // Evict the oldest pending instance of this shard.
      while (!s.pending_order.empty() && !PopOldest(s)) {
      }
    }
    it = s.pending.emplace(r.key, Instance{}).first;
    pending_total_.fetch_add(1, std::memory_order_relaxed);
    it->second.nranks = std::max(1, r.nranks);
    it->second.ranks.reserve(static_cast<size_t>(std::min(it->second.nranks, kReserveRanks)));
    it->second.first_seen_unix_ns = r.entry.end_unix_ns;
    s.pending_order.emplace_back(r.entry.end_unix_ns, r.key);
  }
  Instance& inst = it->second;
  // A rank's first report counts; a repeat (a resent batch) is ignored.
  bool first = true;
  if (inst.nranks <= kScanRanks) {
    for (const RankEntry& e : inst.ranks) first = first && e.rank != r.entry.rank;
  } else {
    first = inst.seen.insert(r.entry.rank).second;
  }
  if (first) inst.ranks.push_back(std::move(r.entry));
  if (static_cast<int32_t>(inst.ranks.size()) >= inst.nranks) {
    Instance done = std::move(inst);
    s.pending.erase(it);
    pending_total_.fetch_sub(1, std::memory_order_relaxed);
    Finish(s, r.key, std::move(done), blames, retired);
  }
}

void CrossRankAnalysis::Blame(NodeInfo& n, int32_t rank, double w) {
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

int CrossRankAnalysis::Strongest(const std::vector<RankEntry>& ranks, v1::CollectiveCause cause,
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

InstancePath CrossRankAnalysis::PathOf(const Key& key, const Done& d, int64_t last_start,
                                       int64_t last_end,
                                       absl::InlinedVector<const RankPath*, 16>* paths) {
  for (const RankEntry& r : d.ranks) paths->push_back(&r);
  InstancePath ip;
  ip.comm = key.comm;
  ip.func = key.func;
  ip.size_class = CollectiveSizeClass(d.ranks.empty() ? 0 : d.ranks[0].bytes);
  ip.nranks = d.nranks;
  ip.bus_bytes = d.ranks.empty() ? 0 : d.ranks[0].bus_bytes;
  ip.transfer_ns = last_end - last_start;
  ip.end_unix_ns = last_end;
  ip.ranks = *paths;
  return ip;
}

void CrossRankAnalysis::Finish(CommShard& s, const Key& key, Instance&& inst,
                               std::vector<BlameUpdate>* blames, Retired* retired) {
  Done d;
  d.key = key;
  d.nranks = inst.nranks;
  d.ranks = std::move(inst.ranks);
  std::sort(d.ranks.begin(), d.ranks.end(),
            [](const RankEntry& a, const RankEntry& b) { return a.rank < b.rank; });
  int64_t first = std::numeric_limits<int64_t>::max(), last = std::numeric_limits<int64_t>::min();
  int64_t last_end = 0;
  absl::InlinedVector<int64_t, 16> durations;
  d.max_duration_ns = 0;
  for (size_t i = 0; i < d.ranks.size(); ++i) {
    const RankEntry& r = d.ranks[i];
    first = std::min(first, r.start_unix_ns);
    last = std::max(last, r.start_unix_ns);
    durations.push_back(r.end_unix_ns - r.start_unix_ns);
    last_end = std::max(last_end, r.end_unix_ns);
    d.max_duration_ns = std::max(d.max_duration_ns, r.end_unix_ns - r.start_unix_ns);
  }
  d.skew_ns = last - first;
  std::sort(durations.begin(), durations.end());
  const int64_t median = durations[durations.size() / 2];
  absl::InlinedVector<RankArrival, 16> arrivals;
  for (const RankEntry& r : d.ranks) {
    arrivals.push_back({r.node, r.rank, r.start_unix_ns, r.end_unix_ns});
  }
  const StragglerVerdict persistent = s.diagnosis.ObserveArrivals(
      key.comm, key.func, d.ranks.empty() ? 0 : d.ranks[0].bytes, arrivals);
  const int lossy = Strongest(d.ranks, v1::COLLECTIVE_CAUSE_NETWORK_LOSSY, persistent.index);
  const int saturated = Strongest(d.ranks, v1::COLLECTIVE_CAUSE_NETWORK_SATURATED, -1);
  const int64_t instant_min_skew = std::max<int64_t>(
      options_.straggler_min_skew_ns,
      static_cast<int64_t>(options_.straggler_skew_ratio * static_cast<double>(median)));
  // The absolute evidence of the ranks' ports, from the moment the last rank arrived.
  absl::InlinedVector<const RankPath*, 16> paths;
  const InstancePath ip = PathOf(key, d, last, last_end, &paths);
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
             (persistent.latest >= 0 && key.seq > 0 &&
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
          100 * options_.straggler_skew_ratio, static_cast<double>(median) / 1e6);
    }
    w = d.max_duration_ns > 0
            ? std::min(1.0, static_cast<double>(d.skew_ns) / static_cast<double>(d.max_duration_ns))
            : 1.0;
  } else {
    d.cause = v1::COLLECTIVE_CAUSE_NORMAL;
    path_.Learn(ip, pv);
  }
  {
    Diagnosis::Outcome o;
    o.func = key.func.str();
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
    }
    s.diagnosis.Record(key.comm, std::move(o));
  }
  for (size_t i = 0; i < d.ranks.size(); ++i) {
    blames->push_back(
        {d.ranks[i].node, d.ranks[i].rank, static_cast<int>(i) == d.bottleneck ? w : 0.0});
  }
  ++s.by_cause[static_cast<size_t>(d.cause)];
  ++s.instances;
  const double skew_s = static_cast<double>(d.skew_ns) / 1e9;
  static const std::vector<double> bounds = ArrivalSkewBounds();
  size_t b = 0;
  while (b < bounds.size() && skew_s > bounds[b]) ++b;
  ++s.skew_buckets[b];
  s.skew_sum += skew_s;
  s.recent.push_back(std::move(d));
  while (s.recent.size() > options_.recent_instances) {
    retired->push_back(std::move(s.recent.front()));
    s.recent.pop_front();
  }
}

uint64_t CrossRankAnalysis::pending() const {
  return SumShards([](const CommShard& s) -> uint64_t { return s.pending.size(); });
}

uint64_t CrossRankAnalysis::instances_total() const {
  return SumShards([](const CommShard& s) -> uint64_t { return s.instances; });
}

uint64_t CrossRankAnalysis::evicted_total() const {
  return SumShards([](const CommShard& s) -> uint64_t { return s.evicted; });
}

uint64_t CrossRankAnalysis::memory_bytes() const {
  uint64_t b = 0;
  auto entry_bytes = [](const RankEntry& r) -> uint64_t {
    // A batch's detail buffer is shared by its entries: each counts its own part.
    return r.detail_size + (r.recording ? r.recording->SpaceUsedLong() : 0);
  };
  b += names_.memory_bytes();
  for (const auto& sp : shards_) {
    absl::MutexLock lock(&sp->mu);
    for (const auto& [k, inst] : sp->pending) {
      b += sizeof(k) + sizeof(inst) + 64 + inst.ranks.capacity() * sizeof(RankEntry);
      for (const RankEntry& r : inst.ranks) b += entry_bytes(r);
    }
    for (const Done& d : sp->recent) {
      b += sizeof(Done) + d.ranks.capacity() * sizeof(RankEntry);
      for (const RankEntry& r : d.ranks) b += entry_bytes(r);
    }
    b += sp->pending_order.size() * (sizeof(int64_t) + sizeof(Key) + 16);
  }
  for (const auto& ns : node_shards_) {
    absl::MutexLock lock(&ns->mu);
    for (const auto& [node, n] : ns->nodes) {
      for (const auto& [rank, s] : n.scores) b += 64 + s.blame.size() * sizeof(double);
      b += n.overlap.capacity() * sizeof(n.overlap[0]) + n.overlap_sum.capacity() * 16 +
           n.overlap_nonzero.capacity() * 4;
    }
  }
  return b;
}

}  // namespace fabricscope::exporters
