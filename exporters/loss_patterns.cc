#include "exporters/loss_patterns.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace fabricscope::exporters {

bool IsLossCounter(absl::string_view group, absl::string_view name) {
  return collectors::IsLoss(collectors::MeaningOf(group, name).meaning);
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
    const collectors::Meaning m = collectors::MeaningOf(c.group(), c.name()).meaning;
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
