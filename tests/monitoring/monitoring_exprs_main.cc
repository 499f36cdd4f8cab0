// fabricscope-monitoring-exprs: prints every PromQL expression of the dashboards and the rules,
// one per line, for tests/e2e/prometheus_alerts_test.sh to query against a real Prometheus:
//   KIND <TAB> ID <TAB> METRICS <TAB> EXPR
// KIND is panel, variable, record or alert; METRICS the comma-separated metric names the
// expression selects; EXPR the expression on one line, Grafana variables substituted
// ($__rate_interval by --rate-interval, every other variable by ".*").
// Usage: fabricscope-monitoring-exprs SOURCE_DIR [--rate-interval=4s]
// Exit status 2 on bad usage or unreadable files.

#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "tests/monitoring/monitoring_sources.h"

int main(int argc, char** argv) {
  using fabricscope::testing::PromqlExpression;
  std::string root;
  std::string rate_interval = "4s";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (absl::StartsWith(a, "--rate-interval=")) {
      rate_interval = a.substr(16);
    } else if (root.empty() && !absl::StartsWith(a, "-")) {
      root = a;
    } else {
      std::fprintf(stderr, "usage: %s SOURCE_DIR [--rate-interval=4s]\n", argv[0]);
      return 2;
    }
  }
  if (root.empty()) {
    std::fprintf(stderr, "usage: %s SOURCE_DIR [--rate-interval=4s]\n", argv[0]);
    return 2;
  }
  std::vector<PromqlExpression> all;
  for (const std::string& d :
       fabricscope::testing::FilesEndingWith(root + "/dashboards", ".json")) {
    auto e = fabricscope::testing::DashboardExpressions(d);
    if (!e.ok()) {
      std::fprintf(stderr, "%s\n", e.status().ToString().c_str());
      return 2;
    }
    all.insert(all.end(), e->begin(), e->end());
  }
  for (const std::string& r :
       fabricscope::testing::FilesEndingWith(root + "/deploy/prometheus", ".rules.yml")) {
    auto e = fabricscope::testing::RuleExpressions(r);
    if (!e.ok()) {
      std::fprintf(stderr, "%s\n", e.status().ToString().c_str());
      return 2;
    }
    all.insert(all.end(), e->begin(), e->end());
  }
  const std::string prefix = root + "/";
  for (const PromqlExpression& e : all) {
    const char* kind = e.kind == PromqlExpression::Kind::kPanel      ? "panel"
                       : e.kind == PromqlExpression::Kind::kVariable ? "variable"
                       : e.kind == PromqlExpression::Kind::kRecord   ? "record"
                                                                     : "alert";
    std::string id = e.id;
    if (absl::StartsWith(id, prefix)) id = id.substr(prefix.size());
    const std::string expr =
        absl::StrReplaceAll(fabricscope::testing::SubstituteGrafanaVariables(e.expr, rate_interval),
                            {{"\n", " "}, {"\t", " "}});
    std::printf("%s\t%s\t%s\t%s\n", kind, id.c_str(),
                absl::StrJoin(fabricscope::testing::MetricNames(e.expr), ",").c_str(),
                expr.c_str());
  }
  return 0;
}
