#include "exporters/exposition/metric_util.h"

#include <gtest/gtest.h>

#include "tests/exporters/test_family.h"

namespace fabricscope::exporters {
namespace {

using prometheus::MetricFamily;
using prometheus::MetricType;

TEST(MergeFamiliesByName, MergesSameNamesIntoTheFirstAndKeepsTheOrder) {
  std::vector<MetricFamily> fs;
  fs.push_back(TestFamily("a_ratio", "first help", MetricType::Gauge));
  AddValue(fs.back(), {{"scope", "rails"}}, 1);
  fs.push_back(TestFamily("b_total", "b", MetricType::Counter));
  AddValue(fs.back(), {}, 7);
  fs.push_back(TestFamily("a_ratio", "second help", MetricType::Gauge));
  AddValue(fs.back(), {{"scope", "ranks"}}, 2);
  AddValue(fs.back(), {{"scope", "ranks"}, {"comm", "x"}}, 3);
  MergeFamiliesByName(&fs);
  ASSERT_EQ(fs.size(), 2u);
  EXPECT_EQ(fs[0].name, "a_ratio");
  EXPECT_EQ(fs[0].help, "first help");
  ASSERT_EQ(fs[0].metric.size(), 3u);
  EXPECT_EQ(fs[0].metric[0].gauge.value, 1);
  EXPECT_EQ(fs[0].metric[1].gauge.value, 2);
  EXPECT_EQ(fs[0].metric[2].label[1].value, "x");
  EXPECT_EQ(fs[1].name, "b_total");
  EXPECT_EQ(fs[1].metric[0].counter.value, 7);
}

TEST(MergeFamiliesByName, TwoTypesForOneNameCrash) {
  std::vector<MetricFamily> fs;
  fs.push_back(TestFamily("a", "", MetricType::Gauge));
  fs.push_back(TestFamily("a", "", MetricType::Counter));
  EXPECT_DEATH(MergeFamiliesByName(&fs), "two types");
}

}  // namespace
}  // namespace fabricscope::exporters
