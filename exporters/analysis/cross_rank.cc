#include "exporters/analysis/cross_rank.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "exporters/exposition/metric_util.h"
#include "exporters/heatmap/heatmap_http.h"
#include "exporters/state/gpu_state.h"

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
    : options_(options), diagnosis_(options.diagnosis) {
  skew_buckets_.assign(ArrivalSkewBounds().size() + 1, 0);
}

void CrossRankAnalysis::OnHello(const v1::Hello& hello) {
  absl::MutexLock lock(&mu_);
  NodeInfo& n = nodes_[hello.node()];
  n.ports.assign(hello.ports().begin(), hello.ports().end());
  n.overlap.clear();
}

void CrossRankAnalysis::ForgetNode(const std::string& node) {
  absl::MutexLock lock(&mu_);
  nodes_.erase(node);
  pairs_.erase(node);
  std::erase_if(scores_, [&](const auto& kv) { return kv.first.first == node; });
}

void CrossRankAnalysis::OnBatch(const std::string& node, const v1::Batch& batch) {
  if (batch.collectives_size() == 0 && !batch.has_collective_analysis() && !batch.has_gpu()) {
    return;
  }
  absl::MutexLock lock(&mu_);
  NodeInfo& n = nodes_[node];
  const int64_t offset = batch.unix_offset_ns();
  if (batch.has_collective_analysis() && batch.collective_analysis().share_seconds() > 0) {
    n.share = batch.collective_analysis().network_share_ratio();
    n.have_share = true;
  }
  if (batch.has_gpu()) StorePairs(node, batch.gpu());
  for (const v1::Collective& c : batch.collectives()) {
    if (!c.has_analysis()) continue;
    const v1::CollectiveAnalysis& a = c.analysis();
    // Microburst overlap per port.
    std::vector<std::pair<double, double>> ov(n.ports.size(), {0.0, 0.0});
    const double dur = static_cast<double>(c.end_ns() - c.start_ns()) / 1e9;
    for (const v1::PortActivity& p : a.ports()) {
      if (p.port_index() < ov.size() && p.samples() > 0) {
        ov[p.port_index()] = {dur, std::min(dur, p.microburst_seconds())};
      }
    }
    n.overlap.push_back(std::move(ov));
    while (n.overlap.size() > options_.overlap_window) n.overlap.pop_front();
    // A rank count no communicator has, or a rank outside it: dropped and counted before it can
    // cost anything (issue 13: 200,000 ranks claimed for one instance froze ingest for 20 s).
    if (c.nranks() < 1 || c.nranks() > kMaxRanksPerInstance || c.rank() < 0 ||
        c.rank() >= c.nranks()) {
      ++dropped_analyses_;
      continue;
    }

    RankEntry e;
    e.node = node;
    e.rank = c.rank();
    e.start_unix_ns = c.start_ns() + offset;
    e.end_unix_ns = c.end_ns() + offset;
    e.cause = a.cause();
    e.detail = a.detail();
    e.slow = a.slow();
    e.lossy_by_tail = a.lossy_by_tail();
    e.bytes = c.bytes();
    if (a.port_index() >= 0 && static_cast<size_t>(a.port_index()) < n.ports.size()) {
      const v1::PortInfo& pi = n.ports[static_cast<size_t>(a.port_index())];
      e.port = pi.rdma() ? absl::StrCat(pi.device(), ":", pi.port()) : pi.device();
      for (const v1::PortActivity& p : a.ports()) {
        if (static_cast<int32_t>(p.port_index()) != a.port_index()) continue;
        e.saturated_ratio = SaturatedShare(p, dur);
        e.events = LossEvents(p);
      }
    }
    if (e.slow) {
      for (const v1::FlightRecording& r : batch.flight_recordings()) {
        if (r.reason() == "slow_collective" && r.from_ns() <= c.start_ns() &&
            r.to_ns() >= c.end_ns()) {
          e.recording = r;
          e.recording_offset_ns = offset;
          break;
        }
      }
    }
    newest_unix_ns_ = std::max(newest_unix_ns_, e.end_unix_ns);
    const Key key{c.comm_hash(), c.func(), c.seq()};
    auto it = pending_.find(key);
    if (it == pending_.end()) {
      if (pending_.size() >= options_.max_pending) {
        // Evict the oldest pending instance.
        while (!pending_order_.empty()) {
          auto old = pending_.find(pending_order_.front().second);
          pending_order_.pop_front();
          if (old != pending_.end()) {
            pending_.erase(old);
            ++evicted_;
            break;
          }
        }
      }
      it = pending_.emplace(key, Instance{}).first;
      it->second.nranks = std::max(1, c.nranks());
      it->second.first_seen_unix_ns = e.end_unix_ns;
      pending_order_.emplace_back(e.end_unix_ns, key);
    }
    Instance& inst = it->second;
    // A rank's first report counts; a repeat (a resent batch) is ignored. A set, not a scan:
    // communicators of tens of thousands of ranks made the scan quadratic.
    if (inst.seen.insert(e.rank).second) inst.ranks.push_back(std::move(e));
    if (static_cast<int32_t>(inst.ranks.size()) >= inst.nranks) {
      Instance done = std::move(inst);
      pending_.erase(it);
      Finish(key, std::move(done));
    }
  }
  // Evict instances that waited too long for their other ranks.
  while (!pending_order_.empty() &&
         pending_order_.front().first < newest_unix_ns_ - options_.pending_timeout_ns) {
    auto old = pending_.find(pending_order_.front().second);
    if (old != pending_.end() && old->second.first_seen_unix_ns == pending_order_.front().first) {
      pending_.erase(old);
      ++evicted_;
    }
    pending_order_.pop_front();
  }
}

void CrossRankAnalysis::Blame(const std::string& node, int32_t rank, double w) {
  auto key = std::make_pair(node, rank);
  auto it = scores_.find(key);
  if (it == scores_.end()) {
    if (scores_.size() >= options_.max_ranks) return;
    it = scores_.emplace(key, Score{}).first;
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

void CrossRankAnalysis::Finish(const Key& key, Instance&& inst) {
  Done d;
  d.key = key;
  d.nranks = inst.nranks;
  d.ranks = std::move(inst.ranks);
  std::sort(d.ranks.begin(), d.ranks.end(),
            [](const RankEntry& a, const RankEntry& b) { return a.rank < b.rank; });
  int64_t first = std::numeric_limits<int64_t>::max(), last = std::numeric_limits<int64_t>::min();
  int64_t last_end = 0;
  std::vector<int64_t> durations;
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
  std::vector<RankArrival> arrivals;
  for (const RankEntry& r : d.ranks) {
    arrivals.push_back({r.node, r.rank, r.start_unix_ns, r.end_unix_ns});
  }
  const StragglerVerdict persistent = diagnosis_.ObserveArrivals(
      std::get<0>(key), std::get<1>(key), d.ranks.empty() ? 0 : d.ranks[0].bytes, arrivals);
  const int lossy = Strongest(d.ranks, v1::COLLECTIVE_CAUSE_NETWORK_LOSSY, persistent.index);
  const int saturated = Strongest(d.ranks, v1::COLLECTIVE_CAUSE_NETWORK_SATURATED, -1);
  const int64_t instant_min_skew = std::max<int64_t>(
      options_.straggler_min_skew_ns,
      static_cast<int64_t>(options_.straggler_skew_ratio * static_cast<double>(median)));
  double w = 0;
  if (lossy >= 0) {
    d.cause = "network_lossy";
    d.bottleneck = lossy;
    d.evidence = d.ranks[static_cast<size_t>(lossy)].detail;
    w = 1;
  } else if (saturated >= 0) {
    d.cause = "network_saturated";
    d.bottleneck = saturated;
    d.evidence = d.ranks[static_cast<size_t>(saturated)].detail;
    w = std::min(1.0, d.ranks[static_cast<size_t>(saturated)].saturated_ratio);
  } else if (persistent.index >= 0 ||
             // seq 0: the ranks' start-up skew (process launch, communicator init), not a step
             (persistent.latest >= 0 && std::get<2>(key) > 0 &&
              persistent.latest_lateness_ns >= instant_min_skew)) {
    d.cause = "compute_straggler";
    d.bottleneck = persistent.index >= 0 ? persistent.index : persistent.latest;
    d.evidence = persistent.evidence;
    if (persistent.index < 0) {
      const RankEntry& r = d.ranks[static_cast<size_t>(persistent.latest)];
      d.evidence = absl::StrFormat(
          "rank %d (%s) arrived %.3g ms after the median rank: at least %.0f%% of the median "
          "duration (%.3g ms)",
          r.rank, r.node, static_cast<double>(persistent.latest_lateness_ns) / 1e6,
          100 * options_.straggler_skew_ratio, static_cast<double>(median) / 1e6);
    }
    w = d.max_duration_ns > 0
            ? std::min(1.0, static_cast<double>(d.skew_ns) / static_cast<double>(d.max_duration_ns))
            : 1.0;
  } else {
    d.cause = "normal";
  }
  {
    Diagnosis::Outcome o;
    o.func = std::get<1>(key);
    o.end_unix_ns = last_end;
    o.duration_ns = d.max_duration_ns;
    o.cause = d.cause;
    o.evidence = d.evidence;
    if (d.bottleneck >= 0) {
      const RankEntry& b = d.ranks[static_cast<size_t>(d.bottleneck)];
      o.node = b.node;
      o.rank = b.rank;
      o.port = d.cause == "compute_straggler" ? "" : b.port;
    }
    diagnosis_.Record(std::get<0>(key), std::move(o));
  }
  for (size_t i = 0; i < d.ranks.size(); ++i) {
    Blame(d.ranks[i].node, d.ranks[i].rank, static_cast<int>(i) == d.bottleneck ? w : 0.0);
  }
  ++by_cause_[d.cause];
  ++instances_;
  const double skew_s = static_cast<double>(d.skew_ns) / 1e9;
  const std::vector<double> bounds = ArrivalSkewBounds();
  size_t b = 0;
  while (b < bounds.size() && skew_s > bounds[b]) ++b;
  ++skew_buckets_[b];
  skew_sum_ += skew_s;
  recent_.push_back(std::move(d));
  while (recent_.size() > options_.recent_instances) recent_.pop_front();
}

void CrossRankAnalysis::Collect(std::vector<prometheus::MetricFamily>* out) const {
  absl::MutexLock lock(&mu_);
  using prometheus::MetricType;
  auto skew = MakeFamily(Metric::kCollectiveArrivalSkewSeconds);
  if (instances_ > 0) {
    v1::Histogram h;
    for (double bound : ArrivalSkewBounds()) h.add_upper_bounds(bound);
    for (uint64_t c : skew_buckets_) h.add_bucket_counts(c);
    h.set_sum(skew_sum_);
    h.set_count(instances_);
    AddHistogram(skew, {}, h);
  }
  auto causes = MakeFamily(Metric::kCollectivesByCauseTotal);
  for (const char* c : {"normal", "network_saturated", "network_lossy", "compute_straggler"}) {
    auto it = by_cause_.find(c);
    AddValue(causes, {{"cause", c}}, it == by_cause_.end() ? 0.0 : static_cast<double>(it->second));
  }
  auto score = MakeFamily(Metric::kStragglerScore);
  for (const auto& [key, s] : scores_) {
    AddValue(score, {{"node", key.first}, {"rank", absl::StrCat(key.second)}},
             s.blame.empty() ? 0.0 : s.sum / static_cast<double>(s.blame.size()));
  }
  auto share = MakeFamily(Metric::kCollectiveNetworkShareRatio);
  auto overlap = MakeFamily(Metric::kPortMicroburstOverlapRatio);
  for (const auto& [node, n] : nodes_) {
    if (n.have_share) AddValue(share, {{"node", node}}, n.share);
    for (size_t pi = 0; pi < n.ports.size(); ++pi) {
      double total = 0, burst = 0;
      for (const auto& v : n.overlap) {
        if (pi < v.size()) {
          total += v[pi].first;
          burst += v[pi].second;
        }
      }
      if (total <= 0) continue;
      const v1::PortInfo& p = n.ports[pi];
      AddValue(overlap, {{"node", node}, {"device", p.device()}, {"port", absl::StrCat(p.port())}},
               burst / total);
    }
  }
  auto evicted = MakeFamily(Metric::kCollectiveInstancesEvictedTotal);
  AddValue(evicted, {}, static_cast<double>(evicted_));
  static_assert(kMaxRanksPerInstance == 131072,
                "the help of kCollectiveAnalysesDroppedTotal in metric_catalog.inc names it");
  auto dropped = MakeFamily(Metric::kCollectiveAnalysesDroppedTotal);
  AddValue(dropped, {}, static_cast<double>(dropped_analyses_));
  auto pending = MakeFamily(Metric::kCollectiveInstancesPending);
  AddValue(pending, {}, static_cast<double>(pending_.size()));
  for (auto* f : {&skew, &causes, &score, &share, &overlap, &evicted, &dropped, &pending}) {
    if (!f->metric.empty()) out->push_back(std::move(*f));
  }
  diagnosis_.Collect(out);
}

std::string CrossRankAnalysis::DiagnosisJson() const {
  absl::MutexLock lock(&mu_);
  return diagnosis_.Json();
}

HeatmapModel CrossRankAnalysis::CollectivesHeatmap(const std::string& comm, const std::string& func,
                                                   size_t instances) const {
  absl::MutexLock lock(&mu_);
  HeatmapModel m;
  m.row_axis = "rank (node)";
  m.col_axis = "collective sequence number";
  m.value_label = "duration (s)";
  // Pick the communicator and function: given, else the (comm, func) with most instances
  // (AllReduce preferred).
  std::map<std::pair<uint64_t, std::string>, size_t> counts;
  for (const Done& d : recent_) ++counts[{std::get<0>(d.key), std::get<1>(d.key)}];
  std::pair<uint64_t, std::string> pick{0, ""};
  size_t best = 0;
  for (const auto& [k, c] : counts) {
    if (!comm.empty() && GpuState::CommLabel(k.first) != comm) continue;
    if (!func.empty() && k.second != func) continue;
    const size_t score = c + (func.empty() && k.second == "AllReduce" ? 1'000'000 : 0);
    if (score > best) {
      best = score;
      pick = k;
    }
  }
  m.title = best == 0 ? "Collective duration per rank (no complete instances yet)"
                      : absl::StrCat("Collective duration per rank: ", pick.second, " on comm ",
                                     GpuState::CommLabel(pick.first));
  if (best == 0) return m;
  std::vector<const Done*> v;
  for (const Done& d : recent_) {
    if (std::get<0>(d.key) == pick.first && std::get<1>(d.key) == pick.second) v.push_back(&d);
  }
  std::sort(v.begin(), v.end(),
            [](const Done* a, const Done* b) { return std::get<2>(a->key) < std::get<2>(b->key); });
  if (instances > 0 && v.size() > instances)
    v.erase(v.begin(), v.end() - static_cast<long>(instances));
  std::map<int32_t, std::string> rows;
  for (const Done* d : v) {
    for (const RankEntry& r : d->ranks)
      rows.emplace(r.rank, absl::StrCat(r.rank, " (", r.node, ")"));
  }
  std::map<int32_t, size_t> row_index;
  for (const auto& [rank, label] : rows) {
    row_index[rank] = m.rows.size();
    m.rows.push_back(label);
  }
  m.cols = v.size();
  for (const Done* d : v) m.col_labels.push_back(absl::StrCat(std::get<2>(d->key)));
  m.values.assign(m.rows.size() * m.cols, NAN);
  // Scale from the fastest to the slowest duration shown: the waiting ranks of a straggler's
  // instances glow, the straggler's own short row stays dark.
  double vmax = 0, vmin = std::numeric_limits<double>::infinity();
  for (size_t c = 0; c < v.size(); ++c) {
    for (const RankEntry& r : v[c]->ranks) {
      const double s = static_cast<double>(r.end_unix_ns - r.start_unix_ns) / 1e9;
      m.values[row_index[r.rank] * m.cols + c] = static_cast<float>(s);
      vmax = std::max(vmax, s);
      vmin = std::min(vmin, s);
    }
  }
  m.scale_min = std::isfinite(vmin) && vmin < vmax ? vmin : 0;
  m.scale_max = vmax > 0 ? vmax : 1;
  return m;
}

// The agent sends all its cumulative pairs in every window (agent/gpu_timeline.cc): each
// communicator a window names is replaced by the window's pairs. One the node no longer reports
// (its job ended, the agent restarted) stays for the heat map while the node holds fewer than
// max_rank_pairs_per_node pairs; past that the least recently reported go first. So a node
// cycling through communicators never holds more than the limit (plus one window, itself
// within limits: max_rank_pairs_per_node at ingest).
void CrossRankAnalysis::StorePairs(const std::string& node, const v1::GpuWindow& w) {
  NodePairs& np = pairs_[node];
  const uint64_t tick = ++pair_tick_;
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

HeatmapModel CrossRankAnalysis::RanksHeatmap(const std::string& comm) const {
  absl::MutexLock lock(&mu_);
  std::map<std::tuple<uint64_t, int32_t, int32_t>, uint64_t> all;
  for (const auto& [node, np] : pairs_) {
    for (const auto& [c, pairs] : np.comms) {
      for (const auto& [sd, bytes] : pairs.bytes) {
        auto& v = all[{c, sd.first, sd.second}];
        v = std::max(v, bytes);
      }
    }
  }
  std::map<uint64_t, uint64_t> per_comm;
  for (const auto& [k, bytes] : all) per_comm[std::get<0>(k)] += bytes;
  uint64_t pick = 0, best = 0;
  bool found = false;
  for (const auto& [c, bytes] : per_comm) {
    if (!comm.empty() && GpuState::CommLabel(c) != comm) continue;
    if (!found || bytes > best) {
      pick = c;
      best = bytes;
      found = true;
    }
  }
  HeatmapModel m;
  m.row_axis = "source rank";
  m.col_axis = "destination rank";
  m.value_label = "bytes sent (proxy, cumulative)";
  m.title = found ? absl::StrCat("Rank x rank bytes, comm ", GpuState::CommLabel(pick))
                  : "Rank x rank bytes (no proxy traffic yet)";
  if (!found) return m;
  int32_t n = 0;
  for (const auto& [k, bytes] : all) {
    if (std::get<0>(k) != pick) continue;
    n = std::max({n, std::get<1>(k) + 1, std::get<2>(k) + 1});
  }
  n = std::min<int32_t>(n, 1024);
  for (int32_t r = 0; r < n; ++r) {
    m.rows.push_back(absl::StrCat(r));
    m.col_labels.push_back(absl::StrCat(r));
  }
  m.cols = static_cast<size_t>(n);
  m.values.assign(m.rows.size() * m.cols, 0.0f);
  double vmax = 0;
  for (const auto& [k, bytes] : all) {
    if (std::get<0>(k) != pick || std::get<1>(k) >= n || std::get<2>(k) >= n ||
        std::get<1>(k) < 0 || std::get<2>(k) < 0) {
      continue;
    }
    m.values[static_cast<size_t>(std::get<1>(k)) * m.cols + static_cast<size_t>(std::get<2>(k))] =
        static_cast<float>(bytes);
    vmax = std::max(vmax, static_cast<double>(bytes));
  }
  m.scale_max = vmax > 0 ? vmax : 1;
  return m;
}

uint64_t CrossRankAnalysis::pending() const {
  absl::MutexLock lock(&mu_);
  return pending_.size();
}

uint64_t CrossRankAnalysis::instances_total() const {
  absl::MutexLock lock(&mu_);
  return instances_;
}

uint64_t CrossRankAnalysis::memory_bytes() const {
  absl::MutexLock lock(&mu_);
  uint64_t b = 0;
  for (const auto& [k, inst] : pending_) {
    b += sizeof(k) + sizeof(inst) + 64 + inst.ranks.capacity() * sizeof(RankEntry);
    for (const RankEntry& r : inst.ranks) b += r.detail.capacity() + r.node.capacity();
  }
  for (const Done& d : recent_) {
    b += sizeof(Done) + d.ranks.capacity() * sizeof(RankEntry);
    for (const RankEntry& r : d.ranks) {
      b += r.detail.capacity() + r.node.capacity() + r.recording.SpaceUsedLong();
    }
  }
  for (const auto& [k, s] : scores_) b += 96 + k.first.capacity() + s.blame.size() * sizeof(double);
  for (const auto& [node, n] : nodes_) {
    for (const auto& v : n.overlap) b += v.capacity() * sizeof(v[0]) + 32;
  }
  b += pending_order_.size() * (sizeof(int64_t) + sizeof(Key) + 16);
  return b;
}

}  // namespace fabricscope::exporters
