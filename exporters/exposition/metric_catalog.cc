// UndeclaredLabels: a snapshot checked against the metric catalog's names and label names.
#include "exporters/exposition/metric_catalog.h"

#include <algorithm>
#include <array>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace fabricscope::exporters {
namespace {

// The catalog by family name, each entry with its declared label names split once.
struct CatalogIndex {
  absl::flat_hash_map<absl::string_view, size_t> by_name;
  std::array<std::vector<absl::string_view>, kMetricCount> labels;
};

const CatalogIndex& Index() {
  static const CatalogIndex* const index = [] {
    auto* x = new CatalogIndex;
    for (size_t i = 0; i < kMetricCount; ++i) {
      x->by_name.emplace(kMetricCatalog[i].name, i);
      std::vector<absl::string_view> names =
          absl::StrSplit(kMetricCatalog[i].labels, ' ', absl::SkipEmpty());
      x->labels[i] = std::move(names);
    }
    return x;
  }();
  return *index;
}

bool Contains(const std::vector<absl::string_view>& names, absl::string_view name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

}  // namespace

const char* UnitName(MetricUnit u) {
  switch (u) {
    case MetricUnit::kSeconds:
      return "seconds";
    case MetricUnit::kBytes:
      return "bytes";
    case MetricUnit::kRatio:
      return "ratio";
    case MetricUnit::kBytesPerSecond:
      return "bytes_per_second";
    case MetricUnit::kPerSecond:
      return "per_second";
    case MetricUnit::kNone:
      break;
  }
  return "";
}

std::vector<std::string> UndeclaredLabels(const std::vector<prometheus::MetricFamily>& families) {
  const CatalogIndex& index = Index();
  std::vector<std::string> out;
  for (const prometheus::MetricFamily& f : families) {
    const auto it = index.by_name.find(f.name);
    if (it == index.by_name.end()) {
      out.push_back(absl::StrCat(
          f.name, ": not in the metric catalog (exporters/exposition/metric_catalog.inc)"));
      continue;
    }
    const std::vector<absl::string_view>& declared = index.labels[it->second];
    std::vector<absl::string_view> reported;  // of this family: one message per label name
    for (const prometheus::ClientMetric& m : f.metric) {
      for (const prometheus::ClientMetric::Label& l : m.label) {
        if (Contains(declared, l.name) || Contains(reported, l.name)) continue;
        reported.push_back(l.name);
        out.push_back(absl::StrCat(f.name, ": label \"", l.name,
                                   "\" is not declared in the metric catalog (its labels: \"",
                                   kMetricCatalog[it->second].labels, "\")"));
      }
    }
  }
  return out;
}

}  // namespace fabricscope::exporters
