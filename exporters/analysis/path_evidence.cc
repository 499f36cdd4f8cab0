#include "exporters/analysis/path_evidence.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "collectors/common/collective_vocabulary.h"

namespace fabricscope::exporters {
namespace {

// The upper median of v (not empty); v is reordered.
template <typename T>
T UpperMedian(std::vector<T>& v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

// Functions whose every rank transmits over the network (the ring and tree algorithms of
// AllReduce, AllGather and ReduceScatter, and AlltoAll): a rank whose port sends slower than the
// others' is then the odd one out, not a receiver by design (Broadcast, Reduce, Send/Recv).
bool EveryRankSends(const std::string& func) {
  return func == "AllReduce" || func == "AllGather" || func == "ReduceScatter" ||
         func == "AlltoAll";
}

// Fast samples a busy transmit rate is judged over at least: a collective of a sample or two
// has it at the mercy of where its edges fall.
constexpr uint32_t kMinPeakSamples = 10;

}  // namespace

const char* EvidenceRuleName(EvidenceRule r) {
  switch (r) {
    case EvidenceRule::kRankAnalysis:
      return "rank_analysis";
    case EvidenceRule::kArrivalOrder:
      return "arrival_order";
    case EvidenceRule::kFabricLoss:
      return "fabric_loss";
    case EvidenceRule::kSharedFlow:
      return "shared_flow";
    case EvidenceRule::kSlowLink:
      return "slow_link";
    case EvidenceRule::kLeafUplinks:
      return "leaf_uplinks";
    case EvidenceRule::kNone:
      break;
  }
  return "";
}

std::string FormatBitRate(double bytes_per_second) {
  double bits = 8 * bytes_per_second;
  const char* unit = "b/s";
  for (const char* u : {"kb/s", "Mb/s", "Gb/s", "Tb/s"}) {
    if (bits < 1000) break;
    bits /= 1000;
    unit = u;
  }
  return absl::StrFormat("%.3g %s", bits, unit);
}

double PathEvidence::BestOf(const KindBest& k, int64_t now_unix_ns) const {
  double best = -1;
  for (const CommBest& c : k.comms) {
    if (c.seen < std::max<size_t>(1, options_.min_best_instances)) continue;
    if (now_unix_ns - c.last_unix_ns > options_.best_max_age_ns) continue;
    best = std::max(best, c.median);
  }
  return best;
}

std::string PathEvidence::Shares(const InstancePath& in, const PathVerdict& v) {
  if (v.line_share < 0) return "busBw unknown";
  std::string s = absl::StrFormat(
      "achieved %.2f of the path's line rate (busBw %s, slowest port %s)", v.line_share,
      FormatBitRate(v.busbw), FormatBitRate(static_cast<double>(v.slowest_line_rate)));
  if (v.best_share >= 0) {
    s += absl::StrFormat(" and %.2f of the best %s of its size on %d ranks reaches (%.2f)",
                         v.best_share, in.func.str(), in.nranks, v.best_efficiency);
  }
  return s;
}

PathVerdict PathEvidence::Evaluate(const InstancePath& in) const {
  PathVerdict v;
  uint64_t& slowest = v.slowest_line_rate;
  for (const RankPath* rp : in.ranks) {
    const RankPath& r = *rp;
    if (r.line_rate > 0 && (slowest == 0 || r.line_rate < slowest)) slowest = r.line_rate;
    v.evidence_free =
        v.evidence_free && r.loss_events == 0 &&
        !(r.own_bytes > 0 && static_cast<double>(r.port_bytes) >=
                                 options_.shared_ratio * static_cast<double>(r.own_bytes));
  }
  if (in.bus_bytes > 0 && in.transfer_ns > 0) {
    v.busbw = in.bus_bytes / (static_cast<double>(in.transfer_ns) / 1e9);
    if (slowest > 0) v.line_share = v.busbw / static_cast<double>(slowest);
  }
  if (v.line_share >= 0) {
    double best = -1;
    {
      absl::MutexLock lock(&mu_);
      const auto it = best_.find(KindKey{in.func, in.size_class, in.nranks});
      if (it != best_.end()) best = BestOf(it->second, in.end_unix_ns);
    }
    if (best > 0) {
      v.best_efficiency = best;
      v.best_share = v.line_share / best;
      v.low = v.best_share <= options_.low_best_share;
    } else {
      v.low = v.line_share <= options_.low_line_share;
    }
  }
  FabricLossRule(in, &v);
  // The slow-link test also decides evidence_free, low or not.
  PathVerdict slow = v;
  SlowLinkRule(in, &slow);
  if (slow.rule != EvidenceRule::kNone) v.evidence_free = false;
  if (v.rule == EvidenceRule::kNone && v.low) SharedFlowRule(in, &v);
  if (v.rule == EvidenceRule::kNone && v.low && slow.rule != EvidenceRule::kNone) {
    slow.evidence_free = false;
    v = std::move(slow);
  }
  return v;
}

void PathEvidence::FabricLossRule(const InstancePath& in, PathVerdict* v) const {
  int worst = -1;
  double worst_ratio = 0;
  for (size_t i = 0; i < in.ranks.size(); ++i) {
    const RankPath& r = *in.ranks[i];
    if (r.fabric_ports == 0 || r.loss_events == 0 || r.window_events == 0 || r.window_rate <= 0) {
      continue;
    }
    const double median = r.fabric_median;
    if (r.window_rate < options_.fabric_loss_min_rate ||
        r.window_rate < options_.fabric_loss_ratio * median) {
      continue;
    }
    // Enough events to be a rate: the window's packets (events / rate) at the healthy rate.
    const double packets = static_cast<double>(r.window_events) / r.window_rate;
    const double healthy = std::max<double>(median, options_.fabric_loss_min_rate / 2);
    if (common::BinomialUpperTail(static_cast<size_t>(std::llround(packets)), r.window_events,
                                  std::min(1.0, healthy)) > options_.fabric_loss_max_p_value) {
      continue;
    }
    // Against a median of 0, the rate over the floor is the ratio's stand-in.
    const double ratio = median > 0 ? r.window_rate / median : r.window_rate / 1e-12;
    if (worst < 0 || ratio > worst_ratio) {
      worst = static_cast<int>(i);
      worst_ratio = ratio;
    }
  }
  if (worst < 0) return;
  const RankPath& r = *in.ranks[static_cast<size_t>(worst)];
  v->rule = EvidenceRule::kFabricLoss;
  v->bottleneck = worst;
  v->weight = 1;
  const std::string times =
      r.fabric_median > 0 ? absl::StrFormat("%.0fx", r.window_rate / r.fabric_median) : "above";
  v->evidence = absl::StrFormat(
      "%s %s lost or retransmitted %.2g of its packets in its latest window (%d events), %s the "
      "median of the fabric's %d other ports of its kind (%.2g), and %d loss events during this "
      "collective",
      r.node.str(), r.port.str(), r.window_rate, r.window_events, times, r.fabric_ports,
      static_cast<double>(r.fabric_median), r.loss_events);
  if (v->line_share >= 0) v->evidence += "; " + Shares(in, *v);
}

void PathEvidence::SharedFlowRule(const InstancePath& in, PathVerdict* v) const {
  int worst = -1;
  double worst_ratio = 0;
  for (size_t i = 0; i < in.ranks.size(); ++i) {
    const RankPath& r = *in.ranks[i];
    if (r.own_bytes == 0) continue;
    const double ratio = static_cast<double>(r.port_bytes) / static_cast<double>(r.own_bytes);
    if (ratio >= options_.shared_ratio && ratio > worst_ratio) {
      worst = static_cast<int>(i);
      worst_ratio = ratio;
    }
  }
  if (worst < 0) return;
  const RankPath& r = *in.ranks[static_cast<size_t>(worst)];
  v->rule = EvidenceRule::kSharedFlow;
  v->bottleneck = worst;
  v->weight = std::clamp(1 - 1 / worst_ratio, 0.0, 1.0);
  v->evidence = absl::StrFormat(
      "%s; %s %s carried %.2fx the collective's own bytes while it ran (%d of %d): another flow "
      "shared the link",
      Shares(in, *v), r.node.str(), r.port.str(), worst_ratio, r.port_bytes, r.own_bytes);
}

void PathEvidence::SlowLinkRule(const InstancePath& in, PathVerdict* v) const {
  if (!EveryRankSends(in.func.str()) || in.ranks.size() < 2) return;
  // Each rank's busy transmit rate as a share of what its path can carry: its own line rate or
  // a slower one at the far end (a 200 Gb/s port sending to a 100 Gb/s one is not slow).
  std::vector<double> shares, path_rate;
  for (const RankPath* rp : in.ranks) {
    const RankPath& r = *rp;
    // Every rank's port must be known and have sent: an unknown one could be the slow one.
    if (r.line_rate == 0 || r.tx_busy <= 0 || r.samples < kMinPeakSamples) return;
    uint64_t carry = r.line_rate;
    for (const int32_t peer : r.send_peers) {
      for (const RankPath* pp : in.ranks) {
        const RankPath& p = *pp;
        if (peer >= 0 && p.rank == peer && p.line_rate > 0) carry = std::min(carry, p.line_rate);
      }
    }
    path_rate.push_back(static_cast<double>(carry));
    shares.push_back(static_cast<double>(r.tx_busy) * static_cast<double>(r.line_rate) /
                     static_cast<double>(carry));
  }
  int worst = -1;
  double worst_ratio = 0, worst_median = 0;
  std::vector<double> others;
  for (size_t i = 0; i < shares.size(); ++i) {
    others.clear();
    for (size_t j = 0; j < shares.size(); ++j) {
      if (j != i) others.push_back(shares[j]);
    }
    const double median = UpperMedian(others);
    const double ratio = median > 0 ? shares[i] / median : 1;
    if (ratio <= options_.slow_link_ratio && (worst < 0 || ratio < worst_ratio)) {
      worst = static_cast<int>(i);
      worst_ratio = ratio;
      worst_median = median;
    }
  }
  if (worst < 0) return;
  const size_t w = static_cast<size_t>(worst);
  const RankPath& r = *in.ranks[w];
  v->rule = EvidenceRule::kSlowLink;
  v->bottleneck = worst;
  v->weight = std::clamp(1 - worst_ratio, 0.0, 1.0);
  v->evidence = absl::StrFormat(
      "%s; %s %s sent at %.2f of what its path can carry (%s of %s) when it had data, the other "
      "ranks' ports at %.2f of theirs (median): the path from it carries less than its line rate",
      Shares(in, *v), r.node.str(), r.port.str(), shares[w],
      FormatBitRate(shares[w] * path_rate[w]), FormatBitRate(path_rate[w]), worst_median);
}

void PathEvidence::Learn(const InstancePath& in, const PathVerdict& v) {
  if (!v.evidence_free || v.line_share <= 0 || !std::isfinite(v.line_share)) return;
  absl::MutexLock lock(&mu_);
  const KindKey key{in.func, in.size_class, in.nranks};
  auto it = best_.find(key);
  if (it == best_.end()) {
    if (best_.size() >= options_.max_kinds) return;
    it = best_.emplace(key, KindBest{}).first;
  }
  std::vector<CommBest>& comms = it->second.comms;
  auto c = std::find_if(comms.begin(), comms.end(),
                        [&](const CommBest& b) { return b.comm == in.comm; });
  if (c == comms.end()) {
    if (comms.size() < std::max<size_t>(1, options_.comms_per_kind)) {
      c = comms.insert(comms.end(), CommBest{});
    } else {
      c = std::min_element(comms.begin(), comms.end(), [](const CommBest& a, const CommBest& b) {
        return a.last_unix_ns < b.last_unix_ns;
      });
      *c = CommBest{};
    }
    c->comm = in.comm;
  }
  const size_t window = std::max<size_t>(1, options_.best_window);
  if (c->recent.size() < window) {
    c->recent.push_back(static_cast<float>(v.line_share));
  } else {
    c->recent[c->next] = static_cast<float>(v.line_share);
  }
  c->next = (c->next + 1) % window;
  ++c->seen;
  c->last_unix_ns = std::max(c->last_unix_ns, in.end_unix_ns);
  std::vector<float> copy = c->recent;
  c->median = UpperMedian(copy);
}

size_t PathEvidence::kinds() const {
  absl::MutexLock lock(&mu_);
  return best_.size();
}

uint64_t PathEvidence::memory_bytes() const {
  absl::MutexLock lock(&mu_);
  uint64_t b = 0;
  for (const auto& [k, kb] : best_) {
    b += sizeof(k) + sizeof(kb) + kb.comms.capacity() * sizeof(CommBest);
    for (const CommBest& c : kb.comms) b += c.recent.capacity() * sizeof(float);
  }
  return b;
}

}  // namespace fabricscope::exporters
