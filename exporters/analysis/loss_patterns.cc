#include "exporters/analysis/loss_patterns.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace fabricscope::exporters {

bool IsLossCounter(const v1::CounterValue& c) {
  return collectors::IsLoss(collectors::MeaningFromWire(c.meaning()));
}

uint64_t LossEventsInWindow(const v1::PortWindow& window) {
  bool has_phy = false;
  for (const v1::CounterValue& c : window.counters()) {
    has_phy |= c.name() == collectors::kPortDiscardsCounter;
  }
  uint64_t n = 0;
  for (const v1::ErrorCounter& e : window.errors()) n += e.delta();
  for (const v1::CounterValue& c : window.counters()) {
    if (c.delta() == 0) continue;
    const collectors::Meaning m = collectors::MeaningFromWire(c.meaning());
    if (collectors::IsLoss(m) && !collectors::IsLossBreakdown(m, has_phy)) n += c.delta();
  }
  return n;
}

double Gini(const std::vector<double>& values) {
  const size_t n = values.size();
  if (n < 2) return 0;
  std::vector<double> v = values;
  std::sort(v.begin(), v.end());
  double sum = 0, weighted = 0;
  for (size_t i = 0; i < n; ++i) {
    sum += v[i];
    weighted += (2.0 * static_cast<double>(i + 1) - static_cast<double>(n) - 1.0) * v[i];
  }
  return sum > 0 ? weighted / (static_cast<double>(n) * sum) : 0;
}

Rayleigh RayleighTest(const std::vector<int64_t>& times_ns, double period_seconds) {
  Rayleigh out;
  const size_t n = times_ns.size();
  if (n < 2 || !(period_seconds > 0)) return out;
  const int64_t period_ns = static_cast<int64_t>(period_seconds * 1e9);
  if (period_ns <= 0) return out;
  double c = 0, s = 0;
  for (int64_t t : times_ns) {
    int64_t phase = t % period_ns;
    if (phase < 0) phase += period_ns;
    const double theta =
        2 * std::numbers::pi * static_cast<double>(phase) / static_cast<double>(period_ns);
    c += std::cos(theta);
    s += std::sin(theta);
  }
  const double dn = static_cast<double>(n);
  const double rn = std::sqrt(c * c + s * s);  // n x R
  out.resultant = rn / dn;
  out.p_value = std::clamp(std::exp(std::sqrt(1 + 4 * dn + 4 * (dn * dn - rn * rn)) - (1 + 2 * dn)),
                           0.0, 1.0);
  return out;
}

int ConcentratedGroup(const std::vector<uint64_t>& counts, const ConcentrationRule& rule) {
  if (counts.size() < 2) return -1;
  uint64_t total = 0;
  size_t top = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    total += counts[i];
    if (counts[i] > counts[top]) top = i;
  }
  if (total < rule.min_events || total == 0) return -1;
  const double share = static_cast<double>(counts[top]) / static_cast<double>(total);
  const double even = 1.0 / static_cast<double>(counts.size());
  if (share >= rule.min_share && share >= rule.even_share_factor * even - 1e-12) {
    return static_cast<int>(top);
  }
  return -1;
}

}  // namespace fabricscope::exporters

namespace fabricscope::exporters {
namespace {

using Link = LossPatternInput::Link;
using PeerPair = std::pair<std::string, std::string>;

std::string LinkName(const Link& l) { return absl::StrCat(l.node, "/", l.device, ":", l.port); }

// The reason a link concentrates the loss, if one does.
void LinkReason(const std::vector<Link>& links, uint64_t total, const ConcentrationRule& rule,
                std::vector<std::string>* reasons) {
  std::vector<uint64_t> counts;
  for (const Link& l : links) counts.push_back(l.events);
  if (int top = ConcentratedGroup(counts, rule); top >= 0) {
    reasons->push_back(absl::StrCat("link ", LinkName(links[top]), " holds ", links[top].events,
                                    " of ", total, " loss events"));
  }
}

// PFC priorities, and the link that holds most of the top priority's loss if one does.
void PriorityReason(const std::vector<Link>& links, const std::vector<uint64_t>& priority_counts,
                    uint64_t priority_total, const ConcentrationRule& rule,
                    std::vector<std::string>* reasons) {
  const int top = ConcentratedGroup(priority_counts, rule);
  if (top < 0) return;
  std::string reason = absl::StrCat("priority ", top, " holds ", priority_counts[top], " of ",
                                    priority_total, " priority-tagged loss events");
  std::vector<uint64_t> on_link;
  for (const Link& l : links) on_link.push_back(l.by_priority[top]);
  if (int link = ConcentratedGroup(on_link, rule); link >= 0) {
    absl::StrAppend(&reason, ", ", on_link[link], " of them on link ", LinkName(links[link]));
  }
  reasons->push_back(std::move(reason));
}

// Each node's captured loss events against its step period (Rayleigh test); a reason for each
// node whose loss recurs at a fixed phase.
std::vector<LossPatterns::NodePhase> NodePhases(const std::vector<LossPatternInput::Node>& nodes,
                                                const ConcentrationRule& rule,
                                                std::vector<std::string>* reasons) {
  std::vector<LossPatterns::NodePhase> out;
  for (const LossPatternInput::Node& n : nodes) {
    LossPatterns::NodePhase& p = out.emplace_back();
    p.node = n.name;
    p.period_seconds = n.period_seconds;
    p.captured_loss_events = n.times_ns.size();
    if (n.period_seconds && n.times_ns.size() >= rule.min_events) {
      p.rayleigh = RayleighTest(n.times_ns, *n.period_seconds);
      if (p.rayleigh->p_value < 0.01) {
        reasons->push_back(absl::StrFormat(
            "node %s: loss recurs at a fixed phase of its %.3g s step period (Rayleigh p=%.2g)",
            n.name, *n.period_seconds, p.rayleigh->p_value));
      }
    }
  }
  return out;
}

// Captured loss events per peer pair, most first (ties in pair order).
std::vector<std::pair<PeerPair, uint64_t>> PeerCounts(
    const std::vector<LossPatternInput::Node>& nodes, uint64_t* total) {
  std::map<PeerPair, uint64_t> peers;
  for (const LossPatternInput::Node& n : nodes) {
    for (const PeerPair& p : n.peers) {
      ++peers[p];
      ++*total;
    }
  }
  std::vector<std::pair<PeerPair, uint64_t>> list(peers.begin(), peers.end());
  std::stable_sort(list.begin(), list.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  return list;
}

}  // namespace

LossPatterns AnalyzeLossPatterns(const LossPatternInput& in) {
  LossPatterns out;
  std::vector<Link> links = in.links;
  std::stable_sort(links.begin(), links.end(),
                   [](const Link& a, const Link& b) { return a.events > b.events; });
  const ConcentrationRule rule;
  uint64_t peer_total = 0;
  std::vector<double> link_values;
  std::vector<uint64_t> priority_counts(kPfcPriorities, 0);
  for (const Link& l : links) {
    link_values.push_back(static_cast<double>(l.events));
    out.total += l.events;
    for (size_t q = 0; q < kPfcPriorities; ++q) {
      priority_counts[q] += l.by_priority[q];
      out.priority_total += l.by_priority[q];
    }
  }
  LinkReason(links, out.total, rule, &out.reasons);
  PriorityReason(links, priority_counts, out.priority_total, rule, &out.reasons);
  out.nodes = NodePhases(in.nodes, rule, &out.reasons);
  const auto peers = PeerCounts(in.nodes, &peer_total);
  std::vector<uint64_t> peer_counts;
  for (const auto& p : peers) peer_counts.push_back(p.second);
  if (int top = ConcentratedGroup(peer_counts, rule); top >= 0) {
    out.reasons.push_back(absl::StrCat("peer pair ", peers[top].first.first, " -> ",
                                       peers[top].first.second, " holds ", peers[top].second,
                                       " of ", peer_total, " captured loss events"));
  }
  out.classification = out.total + peer_total < rule.min_events ? "insufficient_data"
                       : out.reasons.empty()                    ? "random"
                                                                : "systematic";
  out.rule = absl::StrFormat(
      "systematic when, over the last %d windows with at least %d events, one link, one PFC "
      "priority (of the loss counters named {rx,tx}_prio<p>_*) or one captured peer pair "
      "holds >= %.0f%% of the loss events and >= %.0fx an even share, or a node's captured "
      "loss events cluster at one phase of its step period (Rayleigh p < 0.01); random "
      "otherwise",
      in.loss_windows, rule.min_events, rule.min_share * 100, rule.even_share_factor);
  out.gini = Gini(link_values);
  for (size_t i = 0; i < links.size() && i < 20 && links[i].events > 0; ++i) {
    out.links.push_back({links[i].node, links[i].device, links[i].port, links[i].events,
                         static_cast<double>(links[i].events) / static_cast<double>(out.total)});
  }
  std::vector<size_t> order(kPfcPriorities);
  for (size_t q = 0; q < kPfcPriorities; ++q) order[q] = q;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return priority_counts[a] > priority_counts[b]; });
  for (size_t i = 0; i < order.size() && priority_counts[order[i]] > 0; ++i) {
    out.priorities.push_back(
        {static_cast<int>(order[i]), priority_counts[order[i]],
         static_cast<double>(priority_counts[order[i]]) / static_cast<double>(out.priority_total)});
  }
  for (size_t i = 0; i < peers.size() && i < 20; ++i) {
    out.peers.push_back({peers[i].first.first, peers[i].first.second, peers[i].second});
  }
  for (const NodeWideLoss& n : in.node_wide) {
    if (n.events > 0) out.node_wide.push_back(n);
  }
  std::stable_sort(
      out.node_wide.begin(), out.node_wide.end(),
      [](const NodeWideLoss& a, const NodeWideLoss& b) { return a.events > b.events; });
  if (out.node_wide.size() > 20) out.node_wide.resize(20);
  return out;
}

}  // namespace fabricscope::exporters
