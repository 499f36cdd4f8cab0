#pragma once
// A metric family outside the catalog (exporters/exposition/metric_catalog.inc), for the exposition
// tests that need families of every type and arbitrary names.

#include <string>
#include <utility>

#include "prometheus/metric_family.h"

namespace fabricscope::exporters {

inline prometheus::MetricFamily TestFamily(std::string name, std::string help,
                                           prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

}  // namespace fabricscope::exporters
