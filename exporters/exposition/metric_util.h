#pragma once

#include <algorithm>
#include <array>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "exporters/exposition/metric_catalog.h"
#include "fabricscope/v1/telemetry.pb.h"
#include "glog/logging.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"

namespace fabricscope::exporters {

// Helpers for building prometheus-cpp MetricFamily snapshots at scrape time.

// The `direction` label value of a direction: "transmit", "receive", "" for unspecified.
inline const char* DirectionName(v1::Direction d) {
  return d == v1::DIRECTION_TRANSMIT ? "transmit" : d == v1::DIRECTION_RECEIVE ? "receive" : "";
}

inline prometheus::ClientMetric WithLabels(std::vector<prometheus::ClientMetric::Label> labels) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  return m;
}

// One sample: the counter or gauge value, per the family's type.
inline void AddValue(prometheus::MetricFamily& f,
                     std::vector<prometheus::ClientMetric::Label> labels, double v) {
  prometheus::ClientMetric m = WithLabels(std::move(labels));
  if (f.type == prometheus::MetricType::Counter) {
    m.counter.value = v;
  } else {
    m.gauge.value = v;
  }
  f.metric.push_back(std::move(m));
}

// A v1::Histogram (per-bucket counts, the last one +Inf) as a cumulative Prometheus histogram.
inline void AddHistogram(prometheus::MetricFamily& f,
                         std::vector<prometheus::ClientMetric::Label> labels,
                         const v1::Histogram& h) {
  prometheus::ClientMetric m = WithLabels(std::move(labels));
  uint64_t cumulative = 0;
  for (int i = 0; i < h.bucket_counts_size(); ++i) {
    cumulative += h.bucket_counts(i);
    prometheus::ClientMetric::Bucket b;
    b.cumulative_count = cumulative;
    b.upper_bound =
        i < h.upper_bounds_size() ? h.upper_bounds(i) : std::numeric_limits<double>::infinity();
    m.histogram.bucket.push_back(b);
  }
  m.histogram.sample_count = h.count();
  m.histogram.sample_sum = h.sum();
  f.metric.push_back(std::move(m));
}

// The families of one scrape, by catalog id: each made (MakeFamily) on first use. DrainInto
// appends the ones that got samples, in catalog order (exporters/exposition/metric_catalog.inc), so
// a collector names a family where it adds to it and never lists its families again.
class FamilySet {
 public:
  // profile: the --metrics profile; a family it does not export (the catalog's profile column)
  // is dropped by DrainInto, and collectors skip building it where that costs (on()).
  explicit FamilySet(common::MetricProfile profile = common::MetricProfile::kFull)
      : profile_(profile) {}
  bool on(Metric m) const { return Exported(m, profile_); }
  prometheus::MetricFamily& operator[](Metric m) {
    std::optional<prometheus::MetricFamily>& f = families_[static_cast<size_t>(m)];
    if (!f) f = MakeFamily(m);
    return *f;
  }
  void DrainInto(std::vector<prometheus::MetricFamily>* out) {
    for (size_t i = 0; i < families_.size(); ++i) {
      std::optional<prometheus::MetricFamily>& f = families_[i];
      if (f && !f->metric.empty() && on(static_cast<Metric>(i))) out->push_back(std::move(*f));
      f.reset();
    }
  }

 private:
  common::MetricProfile profile_;
  std::array<std::optional<prometheus::MetricFamily>, kMetricCount> families_;
};

// Merges families that share a name into the first of them (its help and position; the later
// ones' samples appended in order), so that each name is serialized once: the text format allows
// one `# TYPE` line per name and Prometheus rejects a scrape with two. Modules that feed one
// family (fabricscope_traffic_imbalance_ratio) each append their part; the caller merges.
// Families of one name must share a type: anything else is a programming error and crashes.
inline void MergeFamiliesByName(std::vector<prometheus::MetricFamily>* families) {
  std::unordered_map<std::string, size_t> index;
  std::vector<prometheus::MetricFamily> out;
  out.reserve(families->size());
  for (prometheus::MetricFamily& f : *families) {
    auto [it, inserted] = index.try_emplace(f.name, out.size());
    if (inserted) {
      out.push_back(std::move(f));
      continue;
    }
    prometheus::MetricFamily& into = out[it->second];
    CHECK(into.type == f.type) << "metric family " << f.name << " built with two types";
    for (prometheus::ClientMetric& m : f.metric) into.metric.push_back(std::move(m));
  }
  *families = std::move(out);
}

}  // namespace fabricscope::exporters
