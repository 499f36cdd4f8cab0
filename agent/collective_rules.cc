// The history-based rules of the collective analysis (agent/collective_analysis.h): network_lossy
// from the slow tail and from a persistently lossy port, network_saturated from a competing flow.
// Each compares the collective with what its kind or its port did before, so a fault that costs
// a few percent is named without a threshold that a healthy collective also crosses.

#include <algorithm>

#include "absl/strings/str_format.h"
#include "agent/collective_analysis.h"
#include "collectors/common/collective_vocabulary.h"

namespace fabricscope::agent {

std::string CollectiveAnalyzer::PortLabel(const collectors::PortDescriptor& p) {
  return p.rdma ? p.Key() : p.device;
}

bool CollectiveAnalyzer::TailLossy(const KindStats& k, int64_t duration_ns,
                                   v1::CollectiveAnalysis* a) const {
  if (options_.lossy_tail_ratio <= 0 || k.clean_median.count() < options_.min_history) {
    return false;
  }
  const double median = k.clean_median.Value();
  const double ratio = median > 0 ? static_cast<double>(duration_ns) / median : 0;
  int worst = -1;
  uint64_t worst_events = 0;
  for (int i = 0; i < a->ports_size(); ++i) {
    const v1::PortActivity& p = a->ports(i);
    const uint64_t events = LossEvents(p);
    if (events >= std::max<uint64_t>(1, options_.lossy_min_events) && events > worst_events &&
        Recur(p.port_index()).recurring) {
      worst = i;
      worst_events = events;
    }
  }
  if (worst < 0) return false;
  if (a->cause() == v1::COLLECTIVE_CAUSE_NETWORK_LOSSY) return true;  // named by the ratio rule
  // Idle links while it waited for a peer: a tail-loss probe there did not slow it.
  if (a->cause() == v1::COLLECTIVE_CAUSE_WAITING_ON_PEERS) return false;
  if (ratio < options_.lossy_tail_ratio) return false;
  const v1::PortActivity& p = a->ports(worst);
  a->set_cause(v1::COLLECTIVE_CAUSE_NETWORK_LOSSY);
  a->set_lossy_by_tail(true);
  a->set_port_index(static_cast<int32_t>(p.port_index()));
  a->set_detail(absl::StrFormat(
      "%s: %d lost, %d retransmitted, %d loss events in the capture within the collective; it "
      "took %.2fx its kind's clean median (%.3g s)",
      PortLabel(ports_[p.port_index()]), p.loss_events(), p.retransmits(), p.captured_loss_events(),
      ratio, median / 1e9));
  return true;
}

void CollectiveAnalyzer::UpdateLossRates(const v1::CollectiveAnalysis& a) {
  if (port_loss_.size() < ports_.size()) port_loss_.resize(ports_.size());
  for (const v1::PortActivity& p : a.ports()) {
    if (p.port_index() >= port_loss_.size()) continue;
    PortLoss& l = port_loss_[p.port_index()];
    const double packets = static_cast<double>(p.transmit_bytes() + p.receive_bytes()) / 1500.0;
    l.recent.emplace_back(LossEvents(p), packets);
    while (l.recent.size() > options_.lossy_rate_window) l.recent.pop_front();
  }
}

CollectiveAnalyzer::Recurrence CollectiveAnalyzer::Recur(uint32_t port) const {
  Recurrence best;
  if (port >= port_loss_.size()) return best;
  const auto& recent = port_loss_[port].recent;
  size_t hits = 0;
  uint64_t events = 0;
  double packets = 0;
  // The suffixes, newest first: the last m collectives for m = 1 .. all.
  for (size_t m = 1; m <= recent.size(); ++m) {
    const auto& [e, pk] = recent[recent.size() - m];
    hits += e > 0;
    events += e;
    packets += pk;
    if (hits < std::max<size_t>(1, options_.lossy_min_hits)) continue;
    const double p = common::BinomialUpperTail(m, hits, options_.lossy_baseline_hit_ratio);
    if (p < best.p_value) best = Recurrence{false, hits, m, p, events, packets};
  }
  best.recurring = best.window > 0 && best.p_value <= options_.lossy_max_p_value;
  return best;
}

bool CollectiveAnalyzer::RateLossy(v1::CollectiveAnalysis* a) const {
  if (a->cause() == v1::COLLECTIVE_CAUSE_NETWORK_LOSSY) return true;
  if (options_.lossy_min_rate <= 0 || a->cause() == v1::COLLECTIVE_CAUSE_WAITING_ON_PEERS) {
    return false;
  }
  int worst = -1;
  double worst_rate = 0;
  Recurrence worst_r;
  for (int i = 0; i < a->ports_size(); ++i) {
    const v1::PortActivity& p = a->ports(i);
    const uint64_t events = LossEvents(p);
    if (events < std::max<uint64_t>(1, options_.lossy_min_events)) continue;
    // A node-level pseudo-port (TCP) moves no bytes of its own: its events count on the
    // interfaces.
    if (p.port_index() >= port_loss_.size() || ports_[p.port_index()].node_level) continue;
    const Recurrence r = Recur(p.port_index());
    if (!r.recurring || r.packets < 1) continue;
    const double rate = static_cast<double>(r.events) / r.packets;
    if (rate >= options_.lossy_min_rate && rate > worst_rate) {
      worst = i;
      worst_rate = rate;
      worst_r = r;
    }
  }
  if (worst < 0) return false;
  const v1::PortActivity& p = a->ports(worst);
  a->set_cause(v1::COLLECTIVE_CAUSE_NETWORK_LOSSY);
  a->set_port_index(static_cast<int32_t>(p.port_index()));
  a->set_detail(absl::StrFormat(
      "%s: %d lost, %d retransmitted, %d loss events in the capture within the collective; the "
      "port lost or retransmitted %.3g%% of its ~%.0f packets over its last %d collectives, %d "
      "of which carried loss (binomial p = %.1e against %.0f%% of a healthy port's)",
      PortLabel(ports_[p.port_index()]), p.loss_events(), p.retransmits(), p.captured_loss_events(),
      100 * worst_rate, worst_r.packets, worst_r.window, worst_r.hits, worst_r.p_value,
      100 * options_.lossy_baseline_hit_ratio));
  return true;
}

double CollectiveAnalyzer::Contended(const KindStats& k, const v1::Collective& c,
                                     v1::CollectiveAnalysis* a) const {
  // This node's bytes of the communicator (every local rank's), not this rank's alone: the
  // candidate ports carry all of them.
  const uint64_t own = a->own_bytes() > 0 ? a->own_bytes() : c.proxy_bytes();
  if (own == 0) return 0;
  uint64_t moved = 0;
  int busiest = -1;
  for (int i = 0; i < a->ports_size(); ++i) {
    const v1::PortActivity& p = a->ports(i);
    moved += p.transmit_bytes() + p.receive_bytes();
    if (busiest < 0 || p.mean_utilization() > a->ports(busiest).mean_utilization()) busiest = i;
  }
  const double share = static_cast<double>(moved) / static_cast<double>(own);
  if (options_.contention_ratio <= 0 || share < options_.contention_ratio || busiest < 0 ||
      k.clean_median.count() < options_.min_history ||
      (a->cause() != v1::COLLECTIVE_CAUSE_NORMAL &&
       a->cause() != v1::COLLECTIVE_CAUSE_WAITING_ON_PEERS)) {
    return share;
  }
  const double slow = static_cast<double>(c.end_ns() - c.start_ns()) / k.clean_median.Value();
  if (slow < options_.lossy_tail_ratio) return share;
  const v1::PortActivity& p = a->ports(busiest);
  a->set_cause(v1::COLLECTIVE_CAUSE_NETWORK_SATURATED);
  a->set_port_index(static_cast<int32_t>(p.port_index()));
  a->set_detail(absl::StrFormat(
      "%s: its ports moved %.2fx the collective's own %d proxy bytes while it ran (another flow "
      "shares the link), at %.2f of line rate; it took %.2fx its kind's clean median (%.3g s)",
      PortLabel(ports_[p.port_index()]), share, own, p.mean_utilization(), slow,
      k.clean_median.Value() / 1e9));
  return share;
}

}  // namespace fabricscope::agent
