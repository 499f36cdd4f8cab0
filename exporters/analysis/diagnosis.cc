#include "exporters/analysis/diagnosis.h"

#include <algorithm>
#include <cmath>
#include <ctime>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fabricscope::exporters {
namespace {

// The element at n/2 of the sorted values (the upper median for an even count).
template <typename C>
typename C::value_type Median(C v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Per-rank scratch of one instance: held inline for communicators up to 16 ranks.
template <typename T>
using RankVector = absl::InlinedVector<T, 16>;

// The nearest-rank 90th percentile.
double P90(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t i = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(v.size()))) - 1;
  return v[std::min(i, v.size() - 1)];
}

std::string UtcClock(int64_t unix_ns) {
  const time_t t = static_cast<time_t>(unix_ns / 1'000'000'000);
  tm parts{};
  gmtime_r(&t, &parts);
  return absl::StrFormat("%02d:%02d:%02d UTC", parts.tm_hour, parts.tm_min, parts.tm_sec);
}

}  // namespace

StragglerVerdict Diagnosis::ObserveArrivals(uint64_t comm, Name func, uint64_t bytes,
                                            absl::Span<const RankArrival> ranks) {
  StragglerVerdict v;
  if (ranks.size() < 2) return v;
  size_t last = 0;
  RankVector<int64_t> durations;
  // A rank's arrival is measured from its own previous collective on the communicator when
  // every rank has one: the time it spent between them (compute). A rank whose previous
  // collective ended late because a link slowed it starts late but computes no longer: it is
  // not a compute straggler. Without that history, the start time itself.
  RankVector<int64_t> arrival(ranks.size()), previous(ranks.size(), 0);
  // One lookup a rank: its previous end is read and replaced in place (the ranks' keys are
  // distinct); ranks seen for the first time are added after, while there is room.
  RankVector<size_t> unseen;
  bool gaps = true;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const auto prev = previous_end_.find(RankKey{comm, ranks[i].node, ranks[i].rank});
    if (prev == previous_end_.end()) {
      gaps = false;
      unseen.push_back(i);
      continue;
    }
    gaps = gaps && prev->second < ranks[i].start_unix_ns;
    previous[i] = prev->second;
    prev->second = ranks[i].end_unix_ns;
  }
  for (const size_t i : unseen) {
    if (previous_end_.size() >= options_.max_kinds * 16) break;
    previous_end_.emplace(RankKey{comm, ranks[i].node, ranks[i].rank}, ranks[i].end_unix_ns);
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    arrival[i] = gaps ? ranks[i].start_unix_ns - previous[i] : ranks[i].start_unix_ns;
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (arrival[i] > arrival[last]) last = i;
    durations.push_back(ranks[i].end_unix_ns - ranks[i].start_unix_ns);
  }
  RankVector<int64_t> others;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i != last) others.push_back(arrival[i]);
  }
  const int64_t median_duration = std::max<int64_t>(1, Median(durations));
  const int64_t lateness = arrival[last] - Median(others);
  const double ratio = static_cast<double>(lateness) / static_cast<double>(median_duration);
  v.latest = static_cast<int>(last);
  v.latest_lateness_ns = lateness;

  const Kind kind{comm, func, CollectiveSizeClass(bytes)};
  auto it = arrivals_.find(kind);
  if (it == arrivals_.end()) {
    if (arrivals_.size() >= options_.max_kinds) return v;
    it = arrivals_.emplace(kind, std::deque<Arrival>{}).first;
  }
  std::deque<Arrival>& h = it->second;
  h.push_back({ranks[last].node, ranks[last].rank, ratio});
  while (h.size() > options_.history) h.pop_front();
  if (h.size() < options_.min_instances) return v;

  // Is this instance's last rank last far more often than chance in the recent instances? The
  // suffixes of the history (the last m instances, m = min_instances .. all) are scanned, so a
  // straggler that began a few instances ago is named as soon as its own run is significant,
  // not once it dominates the whole window (a scan for the change point in the arrival order).
  if (ratio < options_.min_lateness_ratio) return v;
  size_t k = 0, best_m = 0, best_k = 0;
  double p = 2;
  std::vector<double> lateness_seen, best_lateness;
  for (size_t m = 1; m <= h.size(); ++m) {
    const Arrival& a = h[h.size() - m];
    if (a.last_node == ranks[last].node && a.last_rank == ranks[last].rank) {
      ++k;
      lateness_seen.push_back(a.lateness_ratio);
    }
    if (m < options_.min_instances) continue;
    const double pm = BinomialUpperTail(m, k, 1.0 / static_cast<double>(ranks.size()));
    if (pm < p) {
      p = pm;
      best_m = m;
      best_k = k;
      best_lateness = lateness_seen;
    }
  }
  if (p > options_.max_p_value || Median(best_lateness) < options_.min_lateness_ratio) return v;
  v.index = static_cast<int>(last);
  v.last_count = best_k;
  v.window = best_m;
  v.p_value = p;
  v.lateness_ns = lateness;
  v.lateness_ratio = ratio;
  v.evidence = absl::StrFormat(
      "rank %d (%s) arrived last in %d of the last %d instances (binomial p = %.1e against "
      "1/%d each); this time %.3g ms (%.0f%% of the median duration) after the median rank%s",
      ranks[last].rank, ranks[last].node.str(), best_k, best_m, p, ranks.size(),
      static_cast<double>(lateness) / 1e6, 100 * ratio,
      gaps ? ", measured from each rank's previous collective" : "");
  return v;
}

void Diagnosis::Record(uint64_t comm, Outcome outcome) {
  auto it = comms_.find(comm);
  if (it == comms_.end()) {
    if (comms_.size() >= options_.max_comms) {
      auto oldest = comms_.begin();
      for (auto c = comms_.begin(); c != comms_.end(); ++c) {
        if (c->second.touched < oldest->second.touched) oldest = c;
      }
      const uint64_t gone = oldest->first;
      absl::erase_if(arrivals_, [gone](const auto& k) { return std::get<0>(k.first) == gone; });
      absl::erase_if(previous_end_, [gone](const auto& k) { return std::get<0>(k.first) == gone; });
      comms_.erase(oldest);
    }
    it = comms_.emplace(comm, Comm{}).first;
  }
  Comm& c = it->second;
  c.touched = clock_->fetch_add(1, std::memory_order_relaxed) + 1;
  c.recent.push_back(std::move(outcome));
  while (c.recent.size() > options_.instances_per_comm) c.recent.pop_front();
}

CommDiagnosis Diagnosis::Diagnose(uint64_t comm, const Comm& c) const {
  CommDiagnosis d;
  d.comm = comm;
  const size_t n = c.recent.size();
  const size_t from = n > options_.window ? n - options_.window : 0;
  d.instances = n - from;
  using Label = std::tuple<v1::CollectiveCause, std::string, int32_t, std::string>;
  auto label = [](const Outcome& o) { return Label{o.cause, o.node, o.rank, o.port}; };
  std::map<Label, size_t> counts;
  for (size_t i = from; i < n; ++i) {
    if (c.recent[i].cause != v1::COLLECTIVE_CAUSE_NORMAL) ++counts[label(c.recent[i])];
  }
  auto best = counts.end();
  for (auto it = counts.begin(); it != counts.end(); ++it) {
    if (best == counts.end() || it->second > best->second) best = it;
  }
  if (best == counts.end() ||
      static_cast<double>(best->second) < options_.min_share * static_cast<double>(d.instances)) {
    d.sentence = Sentence(d);
    return d;
  }
  std::tie(d.cause, d.node, d.rank, d.port) = best->first;
  d.affected = best->second;
  // Walk back over the run: it ends at a gap of `gap` instances without the label.
  size_t first = n, clean_run = 0;
  std::vector<double> affected, shares;
  for (size_t i = n; i-- > 0;) {
    if (label(c.recent[i]) == best->first) {
      first = i;
      clean_run = 0;
      affected.push_back(static_cast<double>(c.recent[i].duration_ns) / 1e9);
      if (c.recent[i].best_share >= 0) shares.push_back(c.recent[i].best_share);
      if (d.evidence.empty()) {
        d.evidence = c.recent[i].evidence;
        d.func = c.recent[i].func;
        d.rule = c.recent[i].rule;
        d.own_bytes = c.recent[i].own_bytes;
        d.sharers = c.recent[i].sharers;
      }
    } else if (++clean_run >= options_.gap) {
      break;
    }
  }
  d.since_unix_ns = c.recent[first].end_unix_ns;
  d.p90_s = P90(affected);
  if (!shares.empty()) d.best_share = Median(shares);
  std::vector<double> baseline;
  for (size_t i = 0; i < first; ++i) {
    if (c.recent[i].cause == v1::COLLECTIVE_CAUSE_NORMAL) {
      baseline.push_back(static_cast<double>(c.recent[i].duration_ns) / 1e9);
    }
  }
  if (!baseline.empty()) d.baseline_p90_s = P90(baseline);
  d.sentence = Sentence(d);
  return d;
}

std::string Diagnosis::Sentence(const CommDiagnosis& d) {
  const std::string label = common::CommLabel(d.comm);
  if (d.cause == v1::COLLECTIVE_CAUSE_NORMAL) {
    return absl::StrFormat("communicator %s: nothing holds it back (%d recent instances)", label,
                           d.instances);
  }
  std::string what;
  if (d.cause == v1::COLLECTIVE_CAUSE_COMPUTE_STRAGGLER) {
    what = absl::StrFormat("rank %d on %s arrives late", d.rank, d.node);
  } else if (d.cause == v1::COLLECTIVE_CAUSE_NETWORK_LOSSY) {
    what = absl::StrFormat("%s's port %s loses, retransmits or is paused by PFC", d.node, d.port);
  } else if (d.cause == v1::COLLECTIVE_CAUSE_NETWORK_SATURATED &&
             d.rule == EvidenceRule::kSharedFlow) {
    what = absl::StrFormat("%s's port %s is shared with another flow", d.node, d.port);
  } else if (d.cause == v1::COLLECTIVE_CAUSE_NETWORK_SATURATED &&
             d.rule == EvidenceRule::kSlowLink) {
    what = absl::StrFormat("the path from %s's port %s carries less than its line rate", d.node,
                           d.port);
  } else if (d.cause == v1::COLLECTIVE_CAUSE_NETWORK_SATURATED) {
    what = absl::StrFormat("%s's port %s is saturated", d.node, d.port);
  } else {
    what =
        absl::StrFormat("%s (rank %d on %s)", common::CollectiveCauseName(d.cause), d.rank, d.node);
  }
  std::string cost = "no clean baseline before it to measure the cost against";
  if (d.baseline_p90_s <= 0 && d.best_share >= 0) {
    // A fault present from the start: its cost against the best its kind reaches elsewhere.
    cost = absl::StrFormat(
        "no clean instance before it; they reach %.2f of the busBw its kind "
        "reaches at best on the fabric",
        d.best_share);
  } else if (d.baseline_p90_s > 0 && d.p90_s >= 1.005 * d.baseline_p90_s) {
    cost = absl::StrFormat("its collectives take %.0f%% longer at p90 (%.3g s against %.3g s)",
                           100 * (d.p90_s / d.baseline_p90_s - 1), d.p90_s, d.baseline_p90_s);
  } else if (d.baseline_p90_s > 0) {
    // A few percent of compute late hides in the collectives' own jitter.
    cost = absl::StrFormat("its collectives take no longer at p90 (%.3g s against %.3g s)", d.p90_s,
                           d.baseline_p90_s);
  }
  return absl::StrFormat("communicator %s: %s in %d of the last %d instances; %s, since %s", label,
                         what, d.affected, d.instances, cost, UtcClock(d.since_unix_ns));
}

std::vector<std::pair<uint64_t, uint64_t>> Diagnosis::LastSeen() const {
  std::vector<std::pair<uint64_t, uint64_t>> v;
  for (const auto& [comm, c] : comms_) v.emplace_back(comm, c.touched);
  return v;
}

std::vector<CommDiagnosis> Diagnosis::Snapshot(const absl::flat_hash_set<uint64_t>* only) const {
  std::vector<CommDiagnosis> v;
  for (const auto& [comm, c] : comms_) {
    if (only == nullptr || only->contains(comm)) v.push_back(Diagnose(comm, c));
  }
  return v;
}

}  // namespace fabricscope::exporters
