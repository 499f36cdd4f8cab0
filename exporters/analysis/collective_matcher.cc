#include "exporters/analysis/collective_matcher.h"

#include <algorithm>
#include <functional>
#include <limits>

#include "absl/container/inlined_vector.h"

namespace fabricscope::exporters {

std::vector<double> ArrivalSkewBounds() {
  std::vector<double> b;
  for (double decade = 1e-5; decade < 10; decade *= 10) {
    for (double m : {1.0, 2.5, 5.0}) b.push_back(decade * m);
  }
  b.push_back(10);
  return b;
}

CollectiveMatcher::CollectiveMatcher(const CrossRankOptions& options)
    : options_(options), classifier_(options) {
  DiagnosisOptions d = options.diagnosis;
  d.max_kinds = std::max<size_t>(1, (d.max_kinds + kCommShards - 1) / kCommShards);
  for (size_t i = 0; i < kCommShards; ++i) {
    auto shard = std::make_unique<CommShard>(d, &diag_clock_);
    absl::MutexLock lock(&shard->mu);
    shard->skew_buckets.assign(ArrivalSkewBounds().size() + 1, 0);
    shards_.push_back(std::move(shard));
  }
}

std::vector<BlameUpdate> CollectiveMatcher::Match(std::vector<RankReport>&& reports,
                                                  const InstanceObserver* observe) {
  // Shard by shard, each shard's lock taken once per batch. Batches of the ranks of one
  // communicator arrive together and name the same shards: a shard another thread holds is
  // skipped (TryLock) and come back to, so two ingest threads do not queue on one shard after
  // another in the same order; only when every shard left is busy does a thread wait.
  // The reports' indexes grouped by shard (the reports stay where they are).
  auto shard_of = [&](size_t i) { return reports[i].key.comm % shards_.size(); };
  std::vector<uint32_t> order, starts;
  GroupByShard(reports.size(), shards_.size(), shard_of, &order, &starts);
  std::vector<std::pair<size_t, size_t>> runs;  // [begin, end) in `order` of each shard's
  for (size_t k = 0; k < shards_.size(); ++k) {
    if (starts[k] < starts[k + 1]) runs.emplace_back(starts[k], starts[k + 1]);
  }
  std::vector<BlameUpdate> blames;
  Retired retired;
  while (!runs.empty()) {
    size_t pick = runs.size();
    for (size_t k = 0; k < runs.size() && pick == runs.size(); ++k) {
      if (shards_[shard_of(order[runs[k].first])]->mu.TryLock()) pick = k;
    }
    if (pick == runs.size()) {
      pick = 0;
      shards_[shard_of(order[runs[0].first])]->mu.Lock();
    }
    CommShard& s = *shards_[shard_of(order[runs[pick].first])];
    for (size_t i = runs[pick].first; i < runs[pick].second; ++i) {
      MatchOne(s, std::move(reports[order[i]]), Outputs{&blames, &retired, observe});
    }
    EvictExpired(s);
    s.mu.Unlock();
    runs.erase(runs.begin() + static_cast<long>(pick));
  }
  return blames;
}

bool CollectiveMatcher::PopOldest(CommShard& s) {
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

void CollectiveMatcher::EvictExpired(CommShard& s) {
  while (!s.pending_order.empty() &&
         s.pending_order.front().first < s.newest_unix_ns - options_.pending_timeout_ns) {
    PopOldest(s);
  }
}

void CollectiveMatcher::MatchOne(CommShard& s, RankReport&& r, const Outputs& out) {
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
    Finish(s, r.key, std::move(done), out);
  }
}

void CollectiveMatcher::Finish(CommShard& s, const InstanceKey& key, Instance&& inst,
                               const Outputs& out) {
  CollectiveInstance d;
  d.key = key;
  d.nranks = inst.nranks;
  d.ranks = std::move(inst.ranks);
  std::sort(d.ranks.begin(), d.ranks.end(),
            [](const RankEntry& a, const RankEntry& b) { return a.rank < b.rank; });
  int64_t first = std::numeric_limits<int64_t>::max();
  InstanceTimes t;
  t.last_start = std::numeric_limits<int64_t>::min();
  absl::InlinedVector<int64_t, 16> durations;
  for (const RankEntry& r : d.ranks) {
    first = std::min(first, r.start_unix_ns);
    t.last_start = std::max(t.last_start, r.start_unix_ns);
    durations.push_back(r.end_unix_ns - r.start_unix_ns);
    t.last_end = std::max(t.last_end, r.end_unix_ns);
    d.max_duration_ns = std::max(d.max_duration_ns, r.end_unix_ns - r.start_unix_ns);
  }
  d.skew_ns = t.last_start - first;
  std::sort(durations.begin(), durations.end());
  t.median_duration = durations[durations.size() / 2];
  const double w = classifier_.Classify(d, t, s.diagnosis);
  for (size_t i = 0; i < d.ranks.size(); ++i) {
    out.blames->push_back(
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
  if (out.observe != nullptr && d.cause != v1::COLLECTIVE_CAUSE_NORMAL) (*out.observe)(d);
  s.recent.push_back(std::move(d));
  while (s.recent.size() > options_.recent_instances) {
    out.retired->push_back(std::move(s.recent.front()));
    s.recent.pop_front();
  }
}

void CollectiveMatcher::AddTo(CrossRankSnapshot* s) const {
  s->skew_buckets.assign(ArrivalSkewBounds().size() + 1, 0);
  for (const auto& sp : shards_) {
    absl::MutexLock lock(&sp->mu);
    for (size_t i = 0; i < s->skew_buckets.size(); ++i) s->skew_buckets[i] += sp->skew_buckets[i];
    s->skew_sum += sp->skew_sum;
    s->instances += sp->instances;
    s->evicted += sp->evicted;
    s->pending += sp->pending.size();
    for (size_t c = 0; c < kCauses; ++c) s->by_cause[c] += sp->by_cause[c];
  }
  s->diagnoses = Diagnoses();
}

absl::flat_hash_set<uint64_t> CollectiveMatcher::DiagnosedComms() const {
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

std::vector<CommDiagnosis> CollectiveMatcher::Diagnoses() const {
  const absl::flat_hash_set<uint64_t> diagnosed = DiagnosedComms();
  std::vector<CommDiagnosis> all;
  for (const auto& sp : shards_) {
    absl::MutexLock lock(&sp->mu);
    for (CommDiagnosis& d : sp->diagnosis.Snapshot(&diagnosed)) all.push_back(std::move(d));
  }
  return all;
}

std::vector<CollectiveInstance> CollectiveMatcher::Slowest(size_t limit, const std::string& comm,
                                                           const std::set<uint64_t>* comms) const {
  auto longer = [](const CollectiveInstance& a, const CollectiveInstance& b) {
    return a.max_duration_ns > b.max_duration_ns;
  };
  std::vector<CollectiveInstance> v;
  for (const auto& sp : shards_) {
    // Each shard's `limit` longest (copied under its lock), then the longest of those.
    std::vector<const CollectiveInstance*> mine;
    absl::MutexLock lock(&sp->mu);
    for (const CollectiveInstance& d : sp->recent) {
      if (!comm.empty() && common::CommLabel(d.key.comm) != comm) continue;
      if (comms != nullptr && !comms->contains(d.key.comm)) continue;
      mine.push_back(&d);
    }
    std::stable_sort(
        mine.begin(), mine.end(),
        [&](const CollectiveInstance* a, const CollectiveInstance* b) { return longer(*a, *b); });
    if (limit > 0 && mine.size() > limit) mine.resize(limit);
    for (const CollectiveInstance* d : mine) v.push_back(*d);
  }
  std::stable_sort(v.begin(), v.end(), longer);
  if (limit > 0 && v.size() > limit) v.resize(limit);
  return v;
}

std::map<std::pair<uint64_t, std::string>, size_t> CollectiveMatcher::RecentCounts() const {
  std::map<std::pair<uint64_t, std::string>, size_t> counts;
  for (const auto& sp : shards_) {
    absl::MutexLock lock(&sp->mu);
    for (const CollectiveInstance& d : sp->recent) ++counts[{d.key.comm, d.key.func.str()}];
  }
  return counts;
}

std::vector<CollectiveInstance> CollectiveMatcher::Recent(uint64_t comm, const std::string& func,
                                                          size_t limit) const {
  std::vector<CollectiveInstance> v;
  {
    // The communicator's instances are all in its shard.
    CommShard& shard = ShardOf(comm);
    absl::MutexLock lock(&shard.mu);
    for (const CollectiveInstance& d : shard.recent) {
      if (d.key.comm == comm && d.key.func.str() == func) v.push_back(d);
    }
  }
  std::sort(v.begin(), v.end(), [](const CollectiveInstance& a, const CollectiveInstance& b) {
    return a.key.seq < b.key.seq;
  });
  if (limit > 0 && v.size() > limit) v.erase(v.begin(), v.end() - static_cast<long>(limit));
  return v;
}

uint64_t CollectiveMatcher::pending() const {
  return SumShards([](const CommShard& s) -> uint64_t { return s.pending.size(); });
}

uint64_t CollectiveMatcher::instances_total() const {
  return SumShards([](const CommShard& s) -> uint64_t { return s.instances; });
}

uint64_t CollectiveMatcher::evicted_total() const {
  return SumShards([](const CommShard& s) -> uint64_t { return s.evicted; });
}

uint64_t CollectiveMatcher::memory_bytes() const {
  auto entry_bytes = [](const RankEntry& r) -> uint64_t {
    // A batch's detail buffer is shared by its entries: each counts its own part.
    return r.detail_size + (r.recording ? r.recording->SpaceUsedLong() : 0);
  };
  uint64_t b = 0;
  for (const auto& sp : shards_) {
    absl::MutexLock lock(&sp->mu);
    for (const auto& [k, inst] : sp->pending) {
      b += sizeof(k) + sizeof(inst) + 64 + inst.ranks.capacity() * sizeof(RankEntry);
      for (const RankEntry& r : inst.ranks) b += entry_bytes(r);
    }
    for (const CollectiveInstance& d : sp->recent) {
      b += sizeof(CollectiveInstance) + d.ranks.capacity() * sizeof(RankEntry);
      for (const RankEntry& r : d.ranks) b += entry_bytes(r);
    }
    b += sp->pending_order.size() * (sizeof(int64_t) + sizeof(InstanceKey) + 16);
  }
  return b;
}

void CollectiveMatcher::ProbeLock() const {
  for (const auto& s : shards_) absl::MutexLock lock(&s->mu);
}

}  // namespace fabricscope::exporters
