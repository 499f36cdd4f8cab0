// The metric catalog (exporters/exposition/metric_catalog.inc) is the one declaration of every
// family: its names follow Prometheus conventions, what ClusterState::Collect renders comes from
// it, and README's Metrics section documents exactly it.
#include "exporters/exposition/metric_catalog.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "exporters/state/cluster_state.h"

namespace fabricscope::exporters {
namespace {

std::string Readme() {
  std::ifstream in(std::string(FABRICSCOPE_SOURCE_DIR) + "/README.md");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// README's "## Metrics" section, up to the next "## ".
std::string MetricsSection() {
  const std::string readme = Readme();
  const size_t from = readme.find("\n## Metrics\n");
  if (from == std::string::npos) return "";
  const size_t to = readme.find("\n## ", from + 1);
  return readme.substr(from, to == std::string::npos ? std::string::npos : to - from);
}

TEST(MetricCatalog, NamesAreUniqueAndFollowPrometheusConventions) {
  std::set<std::string> names;
  const std::regex valid("fabricscope_[a-z0-9_]+");
  for (size_t i = 0; i < kMetricCount; ++i) {
    const MetricInfo& m = kMetricCatalog[i];
    const std::string name = m.name;
    EXPECT_EQ(static_cast<size_t>(m.id), i) << name;
    EXPECT_TRUE(names.insert(name).second) << "declared twice: " << name;
    EXPECT_TRUE(std::regex_match(name, valid)) << name;
    EXPECT_FALSE(std::string(m.help).empty()) << name;
    const bool total = name.size() > 6 && name.substr(name.size() - 6) == "_total";
    EXPECT_EQ(total, m.type == prometheus::MetricType::Counter)
        << name << ": _total is for counters, and every counter has it";
    for (const char* unit : {"_milliseconds", "_microseconds", "_kilobytes", "_megabytes",
                             "_percent", "_bits_per_second"}) {
      EXPECT_EQ(name.find(unit), std::string::npos) << name << ": use base units";
    }
  }
}

// Nothing Collect() renders bypasses the catalog, and each family keeps its catalog type.
TEST(MetricCatalog, EveryRenderedFamilyIsInTheCatalogWithItsType) {
  ClusterState s;
  v1::Hello h;
  h.set_node("n1");
  h.set_instance_id(7);
  h.set_resume_seq(1);
  h.add_ports()->set_device("mlx5_0");
  ASSERT_TRUE(s.OnHello(h).ok());
  v1::Batch b;
  b.set_seq(1);
  b.set_window_end_ns(1'000'000'000);
  v1::PortWindow* w = b.add_ports();
  w->set_port_index(0);
  w->mutable_transmit()->set_has_bytes(true);
  b.mutable_agent()->set_has_spool(true);
  ASSERT_TRUE(s.OnBatch("n1", 7, b).ok());
  size_t families = 0;
  for (const prometheus::MetricFamily& f : s.Collect()) {
    bool found = false;
    for (const MetricInfo& m : kMetricCatalog) {
      if (f.name == m.name) {
        found = true;
        EXPECT_EQ(f.type, m.type) << f.name;
        EXPECT_EQ(f.help, m.help) << f.name;
      }
    }
    EXPECT_TRUE(found) << f.name
                       << " is rendered but not in exporters/exposition/metric_catalog.inc";
    ++families;
  }
  EXPECT_GE(families, 20u);  // a node with one port, an agent and the aggregator itself
}

// The names a README cell writes: "`fabricscope_a_{b,c}_total`" is fabricscope_a_b_total and
// fabricscope_a_c_total; "`fabricscope_a_total{kind}`" is fabricscope_a_total.
std::vector<std::string> Expand(std::string token) {
  // A brace group at the end is the family's labels ("..._total{kind}"), not alternatives.
  // So is one cut short by a label value ("..._ratio{scope=\"rails\"...").
  if (!token.empty() && token.back() == '}') token.resize(token.rfind('{'));
  if (const size_t open = token.find('{');
      open != std::string::npos && token.find('}', open) == std::string::npos) {
    token.resize(open);
  }
  const size_t open = token.find('{');
  const size_t close = token.find('}', open);
  if (open == std::string::npos || close == std::string::npos) return {token};
  std::vector<std::string> out;
  size_t from = open + 1;
  while (from <= close) {
    size_t comma = token.find(',', from);
    if (comma == std::string::npos || comma > close) comma = close;
    for (const std::string& rest : Expand(token.substr(close + 1))) {
      out.push_back(token.substr(0, open) + token.substr(from, comma - from) + rest);
    }
    from = comma + 1;
  }
  return out;
}

// README's metric table documents the catalog: every family there (by its full name, with
// {a,b} alternatives, or as "`..._rest`" / "`_rest`" after its group's first name), and no name
// the catalog lacks.
TEST(MetricCatalog, ReadmeDocumentsExactlyTheCatalog) {
  const std::string section = MetricsSection();
  ASSERT_FALSE(section.empty()) << "README.md has no \"## Metrics\" section";
  std::set<std::string> written;
  const std::regex mentioned("`(fabricscope_[a-z0-9_{},]+)");
  for (auto it = std::sregex_iterator(section.begin(), section.end(), mentioned);
       it != std::sregex_iterator(); ++it) {
    for (const std::string& n : Expand((*it)[1].str())) written.insert(n);
  }
  std::set<std::string> catalog;
  for (const MetricInfo& m : kMetricCatalog) {
    const std::string name = m.name;
    catalog.insert(name);
    const std::string rest = name.substr(name.find('_', std::string("fabricscope_").size()));
    EXPECT_TRUE(written.count(name) || section.find("`..." + rest + "`") != std::string::npos ||
                section.find("`" + rest + "`") != std::string::npos)
        << name << " is not in README's Metrics section";
  }
  for (std::string name : written) {
    for (const std::string sfx : {"_bucket", "_sum", "_count"}) {
      if (!catalog.count(name) && name.size() > sfx.size() &&
          name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0) {
        name.resize(name.size() - sfx.size());
      }
    }
    EXPECT_TRUE(catalog.count(name)) << "README names " << name << ", which is not exported";
  }
}

}  // namespace
}  // namespace fabricscope::exporters
