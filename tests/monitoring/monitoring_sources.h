#pragma once

// What the monitoring tests read: the PromQL expressions of the Grafana dashboards
// (dashboards/*.json) and of the Prometheus rules (deploy/prometheus/*.rules.yml), the metric
// names the aggregator can export (exporters/exposition/metric_catalog.inc), and the pending list
// (tests/monitoring/pending_metrics.txt). Used by monitoring_test.cc and by the
// fabricscope-monitoring-exprs tool that feeds the real-Prometheus end-to-end test.
// Not thread-safe; plain functions over files.

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/struct.pb.h"

namespace fabricscope::testing {

// One PromQL expression and where it comes from.
struct PromqlExpression {
  enum class Kind { kPanel, kVariable, kRecord, kAlert };
  Kind kind;
  // "dashboards/fabricscope-links.json#3/A" (panel id, refId), "...json$node" (variable),
  // "fabricscope.rules.yml:fabricscope:port_loss_ratio:rate5m" (record or alert name).
  std::string id;
  std::string name;  // the record or alert name; the panel title; the variable name
  std::string expr;  // as written (dashboard variables not substituted)
};

// A JSON file as a protobuf Struct. Errors: NotFound, InvalidArgument (not a JSON object).
absl::StatusOr<google::protobuf::Struct> LoadJson(const std::string& path);

// Every expression of one dashboard: each panel target's expr (rows' nested panels included)
// and each query variable's query (label_values(METRIC..., label) keeps only its selector).
// Errors: NotFound (no file), InvalidArgument (not JSON, or a target without expr).
absl::StatusOr<std::vector<PromqlExpression>> DashboardExpressions(const std::string& path);

// Every recording and alerting rule of a Prometheus rules file. Errors: NotFound,
// InvalidArgument (not YAML, no groups, a rule without expr).
absl::StatusOr<std::vector<PromqlExpression>> RuleExpressions(const std::string& path);

// Replaces Grafana's variables: $__rate_interval, $__interval, $__range by the given
// durations, and $name / ${name} / [[name]] of the dashboard's variables by `values` (".*"
// for every variable not in `values`, so that node=~"$node" matches everything).
std::string SubstituteGrafanaVariables(absl::string_view expr, absl::string_view rate_interval,
                                       const std::map<std::string, std::string>& values = {});

// The metric names (and recording-rule names) an expression selects, in order of first use.
// Skips string literals, label matchers {...}, ranges [...], grouping label lists (by,
// without, on, ignoring, group_left, group_right), function and aggregation names, keywords,
// numbers and durations.
std::vector<std::string> MetricNames(absl::string_view expr);

// Counter discipline of a dashboard expression: every counter selector (name ending in _total,
// _bucket, _count or _sum) is the direct argument of rate( or increase( with the range
// [$__rate_interval]; nothing else is rated; no fixed range ([5m]) appears. Returns one line
// per violation (empty when the expression is fine).
std::vector<std::string> CounterViolations(absl::string_view expr);

// Metric family names the aggregator can export: every name of the metric catalog
// (`exporters_dir`/metric_catalog.inc, i.e. exporters/exposition); a Histogram also yields
// NAME_bucket, NAME_sum and NAME_count. Errors: NotFound (no catalog, or no entry in it).
absl::StatusOr<std::set<std::string>> ExportedMetricNames(const std::string& exporters_dir);

// The pending list: lines "NAME TYPE" (TYPE counter, gauge or histogram; '#' comments). A
// histogram also yields its _bucket/_sum/_count series names. Errors: NotFound,
// InvalidArgument (a malformed line).
absl::StatusOr<std::map<std::string, std::string>> PendingMetrics(const std::string& path);
std::set<std::string> SeriesNames(const std::map<std::string, std::string>& name_to_type);

// Files under a directory whose names end with `suffix`, sorted.
std::vector<std::string> FilesEndingWith(const std::string& dir, absl::string_view suffix);

}  // namespace fabricscope::testing
