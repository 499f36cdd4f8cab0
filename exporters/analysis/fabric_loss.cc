#include "exporters/analysis/fabric_loss.h"

#include <algorithm>

#include "exporters/analysis/loss_patterns.h"

namespace fabricscope::exporters {

void FabricLoss::OnBatch(Name node, absl::Span<const v1::PortInfo> ports, const v1::Batch& batch) {
  if (batch.ports_size() == 0) return;
  const int64_t end_unix_ns = batch.window_end_ns() + batch.unix_offset_ns();
  // The node's TCP retransmissions count on each of its interfaces (agent/collective_analysis.h
  // does the same for a collective).
  uint64_t tcp_events = 0;
  for (const v1::PortWindow& w : batch.ports()) {
    if (w.port_index() < ports.size() && ports[w.port_index()].node_level()) {
      tcp_events += LossEventsInWindow(w);
    }
  }
  absl::MutexLock lock(&mu_);
  bool refresh[kPortKinds] = {};
  std::vector<Latest>* node_ports = nullptr;  // found or made at its first port window
  for (const v1::PortWindow& w : batch.ports()) {
    if (w.port_index() >= ports.size()) continue;
    const v1::PortInfo& info = ports[w.port_index()];
    if (info.node_level()) continue;
    if (node_ports == nullptr) node_ports = &nodes_[node];
    if (node_ports->size() <= w.port_index()) node_ports->resize(w.port_index() + 1);
    Latest& l = (*node_ports)[w.port_index()];
    if (!l.known) {
      if (ports_ >= options_.max_ports) continue;
      l.known = true;
      l.kind = KindOf(info);
      ++ports_;
      ++kinds_[static_cast<size_t>(l.kind)].ports;
    } else if (l.kind != KindOf(info)) {  // a new Hello changed what the port is
      --kinds_[static_cast<size_t>(l.kind)].ports;
      l.kind = KindOf(info);
      ++kinds_[static_cast<size_t>(l.kind)].ports;
    }
    l.events = LossEventsInWindow(w) + (l.kind == PortKind::kNetdev ? tcp_events : 0);
    const uint64_t packets = std::max(w.transmit().packets(), w.receive().packets());
    l.has_rate = packets >= std::max<uint64_t>(1, options_.min_packets);
    l.rate = l.has_rate ? static_cast<double>(l.events) / static_cast<double>(packets) : 0;
    l.end_unix_ns = end_unix_ns;
    KindRates& k = kinds_[static_cast<size_t>(l.kind)];
    k.newest_unix_ns = std::max(k.newest_unix_ns, end_unix_ns);
    refresh[static_cast<size_t>(l.kind)] = true;
  }
  for (size_t k = 0; k < kPortKinds; ++k) {
    if (refresh[k]) Refresh(static_cast<PortKind>(k));
  }
}

void FabricLoss::Refresh(PortKind kind) {
  KindRates& k = kinds_[static_cast<size_t>(kind)];
  if (k.ports > options_.always_refresh && k.taken_unix_ns != INT64_MIN &&
      k.newest_unix_ns - k.taken_unix_ns < options_.refresh_ns) {
    return;
  }
  k.sorted.clear();
  for (const auto& [node, latest] : nodes_) {
    for (const Latest& l : latest) {
      if (l.known && l.kind == kind && l.has_rate &&
          l.end_unix_ns >= k.newest_unix_ns - options_.max_age_ns) {
        k.sorted.push_back(l.rate);
      }
    }
  }
  std::sort(k.sorted.begin(), k.sorted.end());
  k.taken_unix_ns = k.newest_unix_ns;
}

void FabricLoss::ForgetNode(Name node) {
  absl::MutexLock lock(&mu_);
  const auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  for (const Latest& l : it->second) {
    if (!l.known) continue;
    --ports_;
    --kinds_[static_cast<size_t>(l.kind)].ports;
  }
  nodes_.erase(it);
}

size_t FabricLoss::ports() const {
  absl::MutexLock lock(&mu_);
  return ports_;
}

v1::FabricLossEvidence FabricLoss::Of(Name node, uint32_t port_index) const {
  v1::FabricLossEvidence e;
  absl::MutexLock lock(&mu_);
  const auto it = nodes_.find(node);
  if (it == nodes_.end() || port_index >= it->second.size()) return e;
  const Latest& l = it->second[port_index];
  if (!l.known) return e;
  e.set_events(l.events);
  e.set_rate(l.rate);
  const KindRates& k = kinds_[static_cast<size_t>(l.kind)];
  if (!l.has_rate || l.end_unix_ns < k.newest_unix_ns - options_.max_age_ns) return e;
  // The others: the sorted rates less one copy of this port's own, when it was taken with them
  // (it was, unless it arrived after the last refresh).
  const std::vector<double>& s = k.sorted;
  const auto own = std::lower_bound(s.begin(), s.end(), l.rate);
  const bool counted = own != s.end() && *own == l.rate && l.end_unix_ns <= k.taken_unix_ns;
  const size_t others = s.size() - (counted ? 1 : 0);
  if (others == 0) return e;
  // The upper median of the others: index others / 2 of the list without the own entry.
  size_t i = others / 2;
  if (counted && static_cast<size_t>(own - s.begin()) <= i) ++i;
  e.set_fabric_median(s[i]);
  e.set_ports(static_cast<uint32_t>(others));
  return e;
}

}  // namespace fabricscope::exporters
