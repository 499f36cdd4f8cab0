#pragma once

#include <string_view>
#include <vector>

#include "prometheus/metric_family.h"

namespace fabricscope::testing {

// The family named `name` among what a Collect() returned, or nullptr.
inline const prometheus::MetricFamily* FindFamily(
    const std::vector<prometheus::MetricFamily>& families, std::string_view name) {
  for (const prometheus::MetricFamily& f : families) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

}  // namespace fabricscope::testing
