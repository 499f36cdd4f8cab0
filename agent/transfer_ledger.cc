#include "agent/transfer_ledger.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

namespace fabricscope::agent {

void TransferLedger::Remember(const v1::Collective& c) {
  if (c.proxy_bytes() == 0 || max_comms_ == 0) return;
  auto it = transfers_.find(c.comm_hash());
  if (it == transfers_.end()) {
    if (transfers_.size() >= max_comms_) {
      auto oldest = transfers_.begin();
      for (auto o = transfers_.begin(); o != transfers_.end(); ++o) {
        if (o->second.back().end_ns < oldest->second.back().end_ns) oldest = o;
      }
      transfers_.erase(oldest);
    }
    it = transfers_.emplace(c.comm_hash(), std::deque<Transfer>{}).first;
  }
  it->second.push_back(Transfer{c.start_ns(), c.end_ns(), c.proxy_bytes()});
  while (it->second.size() > kPerComm) it->second.pop_front();
}

double TransferLedger::OverlapBytes(const std::deque<Transfer>& transfers, int64_t t0, int64_t t1) {
  double bytes = 0;
  // Newest first: kept in arrival order, which is the order of their ends but for the
  // interleaving of a node's ranks (at most 8 a node), so after 8 transfers in a row that
  // ended before t0 every older one did too.
  int ended_before = 0;
  for (auto it = transfers.rbegin(); it != transfers.rend() && ended_before < 8; ++it) {
    const Transfer& o = *it;
    ended_before = o.end_ns < t0 ? ended_before + 1 : 0;
    const int64_t from = std::max(o.start_ns, t0), to = std::min(o.end_ns, t1);
    if (to < from || (to == from && o.end_ns > o.start_ns)) continue;
    const double share = o.end_ns > o.start_ns ? static_cast<double>(to - from) /
                                                     static_cast<double>(o.end_ns - o.start_ns)
                                               : 1.0;
    bytes += share * static_cast<double>(o.bytes);
  }
  return bytes;
}

uint64_t TransferLedger::OwnBytes(const v1::Collective& c) const {
  const auto it = transfers_.find(c.comm_hash());
  if (it == transfers_.end() || c.proxy_bytes() == 0) return 0;
  const double bytes = OverlapBytes(it->second, c.start_ns(), c.end_ns());
  // Its own transfer at least, should it have left the communicator's list.
  return std::max(c.proxy_bytes(), static_cast<uint64_t>(std::llround(bytes)));
}

namespace {

// The latest end among a communicator's last few transfers: kept in arrival order, which
// follows their ends within a few records.
template <typename Transfers>
int64_t NewestEnd(const Transfers& transfers) {
  int64_t newest = INT64_MIN;
  size_t looked = 0;
  for (auto o = transfers.rbegin(); o != transfers.rend() && looked < 8; ++o, ++looked) {
    newest = std::max(newest, o->end_ns);
  }
  return newest;
}

}  // namespace

bool TransferLedger::Settled(const v1::Collective& c) const {
  for (const auto& [comm, transfers] : transfers_) {
    if (comm == c.comm_hash() || transfers.empty()) continue;
    const int64_t newest = NewestEnd(transfers);
    if (newest >= c.start_ns() - kBusyBeforeNs && newest < c.end_ns()) return false;
  }
  return true;
}

void TransferLedger::AddSharers(const v1::Collective& c, v1::CollectiveAnalysis* a) const {
  std::vector<std::pair<uint64_t, uint64_t>> found;  // (bytes, comm)
  for (const auto& [comm, transfers] : transfers_) {
    // One whose latest transfers all ended before c began was silent throughout.
    if (comm == c.comm_hash() || transfers.empty() || NewestEnd(transfers) < c.start_ns()) {
      continue;
    }
    const auto bytes =
        static_cast<uint64_t>(std::llround(OverlapBytes(transfers, c.start_ns(), c.end_ns())));
    if (bytes > 0) found.emplace_back(bytes, comm);
  }
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
