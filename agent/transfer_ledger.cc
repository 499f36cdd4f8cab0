#include "agent/transfer_ledger.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

namespace fabricscope::agent {

void TransferLedger::Remember(const v1::Collective& c, uint64_t mask) {
  if (c.proxy_bytes() == 0 || max_comms_ == 0 || c.end_ns() < c.start_ns()) return;
  const std::pair<uint64_t, uint64_t> key{c.comm_hash(), mask};
  auto it = transfers_.find(key);
  if (it == transfers_.end()) {
    if (transfers_.size() >= max_comms_) {
      auto oldest = transfers_.begin();
      for (auto o = transfers_.begin(); o != transfers_.end(); ++o) {
        if (o->second.back().end_ns < oldest->second.back().end_ns) oldest = o;
      }
      transfers_.erase(oldest);
    }
    it = transfers_.emplace(key, std::deque<Transfer>{}).first;
  }
  std::deque<Transfer>& d = it->second;
  const Transfer t{c.start_ns(), c.end_ns(), c.proxy_bytes()};
  if (!d.empty()) {
    Transfer& last = d.back();
    const int64_t lo = std::min(last.start_ns, t.start_ns), hi = std::max(last.end_ns, t.end_ns);
    if (t.start_ns <= last.end_ns + kMergeGapNs && t.end_ns + kMergeGapNs >= last.start_ns &&
        hi - lo <= kMergeSpanNs && t.end_ns >= last.end_ns - kMergeGapNs) {
      last = Transfer{lo, hi, last.bytes + t.bytes};
      // A later end may pass the one before it no more than an insertion would.
      return;
    }
  }
  // Sorted by end: records come nearly in that order (a producer flushes every 5 ms, the
  // agent reads every 50 ms), so the walk back is short.
  auto pos = d.end();
  while (pos != d.begin() && std::prev(pos)->end_ns > t.end_ns) --pos;
  d.insert(pos, t);
  const int64_t newest = d.back().end_ns;
  while (d.size() > kPerComm || (!d.empty() && d.front().end_ns < newest - kKeepNs)) d.pop_front();
}

double TransferLedger::OverlapBytes(const std::deque<Transfer>& transfers, int64_t t0, int64_t t1) {
  double bytes = 0;
  for (auto it = transfers.rbegin(); it != transfers.rend() && it->end_ns >= t0; ++it) {
    const Transfer& o = *it;
    const int64_t from = std::max(o.start_ns, t0), to = std::min(o.end_ns, t1);
    if (to < from || (to == from && o.end_ns > o.start_ns)) continue;
    const double share = o.end_ns > o.start_ns ? static_cast<double>(to - from) /
                                                     static_cast<double>(o.end_ns - o.start_ns)
                                               : 1.0;
    bytes += share * static_cast<double>(o.bytes);
  }
  return bytes;
}

double TransferLedger::Weight(uint64_t ports, Scope scope) {
  if (scope.mask == 0) return 1;
  if (ports == 0) return scope.unknown_share;
  return static_cast<double>(std::popcount(ports & scope.mask)) /
         static_cast<double>(std::popcount(ports));
}

uint64_t TransferLedger::OwnBytes(const v1::Collective& c, Scope scope) const {
  if (c.proxy_bytes() == 0) return 0;
  double bytes = 0;
  bool any = false;
  for (auto it = transfers_.lower_bound({c.comm_hash(), 0});
       it != transfers_.end() && it->first.first == c.comm_hash(); ++it) {
    any = true;
    const double w = Weight(it->first.second, scope);
    if (w > 0) bytes += w * OverlapBytes(it->second, c.start_ns(), c.end_ns());
  }
  if (!any) return 0;
  // Its own transfer at least, should it have left the communicator's list.
  return std::max(c.proxy_bytes(), static_cast<uint64_t>(std::llround(bytes)));
}

bool TransferLedger::Settled(const v1::Collective& c) const {
  for (const auto& [key, transfers] : transfers_) {
    if (key.first == c.comm_hash() || transfers.empty()) continue;
    const int64_t newest = transfers.back().end_ns;
    if (newest >= c.start_ns() - kBusyBeforeNs && newest < c.end_ns()) return false;
  }
  return true;
}

void TransferLedger::AddSharers(const v1::Collective& c, v1::CollectiveAnalysis* a,
                                Scope scope) const {
  std::vector<std::pair<uint64_t, uint64_t>> found;  // (bytes, comm)
  // The map is ordered by communicator: its port sets are adjacent, summed into one entry.
  double comm_bytes = 0;
  uint64_t comm = 0;
  auto flush = [&] {
    const auto bytes = static_cast<uint64_t>(std::llround(comm_bytes));
    if (bytes > 0) found.emplace_back(bytes, comm);
    comm_bytes = 0;
  };
  for (const auto& [key, transfers] : transfers_) {
    if (key.first != comm) {
      flush();
      comm = key.first;
    }
    // One whose latest transfers all ended before c began was silent throughout.
    if (key.first == c.comm_hash() || transfers.empty() || transfers.back().end_ns < c.start_ns()) {
      continue;
    }
    const double w = Weight(key.second, scope);
    if (w > 0) comm_bytes += w * OverlapBytes(transfers, c.start_ns(), c.end_ns());
  }
  flush();
  uint64_t total = 0;
  for (const auto& [bytes, comm] : found) total += bytes;
  a->set_sharers_bytes_total(total);
  const size_t n = std::min(found.size(), kMaxSharers);
  std::partial_sort(found.begin(), found.begin() + static_cast<std::ptrdiff_t>(n), found.end(),
                    [](const auto& x, const auto& y) {
                      return x.first != y.first ? x.first > y.first : x.second < y.second;
                    });
  for (size_t i = 0; i < n; ++i) {
    v1::SharerBytes* s = a->add_sharers();
    s->set_comm_hash(found[i].second);
    s->set_bytes(found[i].first);
  }
}

}  // namespace fabricscope::agent
