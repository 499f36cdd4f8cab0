// BuildWriteRequest and ClassifyStatus: the remote-write 1.0 payload of a /metrics snapshot and
// the meaning of a receiver's answer (https://prometheus.io/docs/specs/remote_write_spec/).
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "exporters/exposition/exposition.h"
#include "exporters/remote_write/remote_write.h"

namespace fabricscope::exporters {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricType;

// Appends one series: `labels` plus __name__, sorted by name (the spec: "Label names MUST be
// sorted in lexicographical order"), one sample.
void AddSeries(const std::string& name, std::vector<std::pair<std::string, std::string>> labels,
               double value, int64_t timestamp_ms, promrw::WriteRequest* out) {
  labels.emplace_back("__name__", name);
  std::sort(labels.begin(), labels.end());
  promrw::TimeSeries* ts = out->add_timeseries();
  for (auto& [k, v] : labels) {
    promrw::Label* l = ts->add_labels();
    l->set_name(std::move(k));
    l->set_value(std::move(v));
  }
  promrw::Sample* s = ts->add_samples();
  s->set_value(value);
  s->set_timestamp(timestamp_ms);
}

std::vector<std::pair<std::string, std::string>> LabelsOf(const ClientMetric& m) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(m.label.size() + 1);
  for (const ClientMetric::Label& l : m.label) out.emplace_back(l.name, l.value);
  return out;
}

// The metric's labels and one more, `name` = `value` spelled as /metrics spells it (`le` of a
// histogram bucket, `quantile` of a summary).
std::vector<std::pair<std::string, std::string>> LabelsWith(const ClientMetric& m, const char* name,
                                                            double value) {
  auto labels = LabelsOf(m);
  std::string text;
  AppendSampleValue(value, &text);
  labels.emplace_back(name, std::move(text));
  return labels;
}

// The samples of one metric of family `f`; returns how many.
size_t AddMetric(const prometheus::MetricFamily& f, const ClientMetric& m, int64_t t,
                 promrw::WriteRequest* out) {
  switch (f.type) {
    case MetricType::Counter:
      AddSeries(f.name, LabelsOf(m), m.counter.value, t, out);
      return 1;
    case MetricType::Gauge:
      AddSeries(f.name, LabelsOf(m), m.gauge.value, t, out);
      return 1;
    case MetricType::Untyped:
      AddSeries(f.name, LabelsOf(m), m.untyped.value, t, out);
      return 1;
    case MetricType::Histogram: {
      for (const ClientMetric::Bucket& b : m.histogram.bucket) {
        AddSeries(f.name + "_bucket", LabelsWith(m, "le", b.upper_bound),
                  static_cast<double>(b.cumulative_count), t, out);
      }
      AddSeries(f.name + "_sum", LabelsOf(m), m.histogram.sample_sum, t, out);
      AddSeries(f.name + "_count", LabelsOf(m), static_cast<double>(m.histogram.sample_count), t,
                out);
      return m.histogram.bucket.size() + 2;
    }
    case MetricType::Summary: {
      for (const ClientMetric::Quantile& q : m.summary.quantile) {
        AddSeries(f.name, LabelsWith(m, "quantile", q.quantile), q.value, t, out);
      }
      AddSeries(f.name + "_sum", LabelsOf(m), m.summary.sample_sum, t, out);
      AddSeries(f.name + "_count", LabelsOf(m), static_cast<double>(m.summary.sample_count), t,
                out);
      return m.summary.quantile.size() + 2;
    }
  }
  return 0;
}

}  // namespace

size_t BuildWriteRequest(const std::vector<prometheus::MetricFamily>& families,
                         int64_t timestamp_ms, promrw::WriteRequest* out) {
  size_t samples = 0;
  for (const prometheus::MetricFamily& f : families) {
    for (const ClientMetric& m : f.metric) samples += AddMetric(f, m, timestamp_ms, out);
  }
  return samples;
}

WriteOutcome ClassifyStatus(int http_status) {
  // The spec: 2xx is success; 5xx and 429 MUST be retried with backoff; any other 4xx MUST NOT
  // be retried. No answer at all (connection refused, timeout: status 0 here) is retried too.
  if (http_status >= 200 && http_status < 300) return WriteOutcome::kSent;
  if (http_status == 429 || http_status >= 500 || http_status < 100) return WriteOutcome::kRetry;
  if (http_status >= 400) return WriteOutcome::kDrop;
  return WriteOutcome::kRetry;  // 1xx/3xx: not an answer to act on; try again
}

}  // namespace fabricscope::exporters
