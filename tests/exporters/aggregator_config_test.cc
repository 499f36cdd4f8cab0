#include "exporters/aggregator_config.h"

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/fake_tree.h"
#include "tests/common/readme.h"

namespace fabricscope::exporters {
namespace {

using ::testing::HasSubstr;

std::string Write(const testing::FakeTree& t, const std::string& text) {
  const std::string path = t.root() + "/aggregator.yaml";
  std::ofstream(path) << text;
  return path;
}

TEST(AggregatorConfig, CollectivesSetTheCrossRankRules) {
  testing::FakeTree t;
  AggregatorOptions o;
  ASSERT_TRUE(LoadAggregatorConfig(Write(t,
                                         "collectives:\n"
                                         "  straggler_skew_ratio: 0.4\n"
                                         "  straggler_min_skew_seconds: 0.002\n"
                                         "  straggler_history: 32\n"
                                         "  straggler_min_instances: 6\n"
                                         "  straggler_max_p_value: 0.0001\n"
                                         "  straggler_min_lateness_ratio: 0.08\n"
                                         "  diagnosis_window: 20\n"
                                         "  diagnosis_min_share: 0.6\n"
                                         "  diagnosis_gap: 5\n"),
                                   &o)
                  .ok());
  EXPECT_DOUBLE_EQ(o.collectives.straggler_skew_ratio, 0.4);
  EXPECT_EQ(o.collectives.straggler_min_skew_ns, 2'000'000);
  EXPECT_EQ(o.collectives.diagnosis.history, 32u);
  EXPECT_EQ(o.collectives.diagnosis.min_instances, 6u);
  EXPECT_DOUBLE_EQ(o.collectives.diagnosis.max_p_value, 0.0001);
  EXPECT_DOUBLE_EQ(o.collectives.diagnosis.min_lateness_ratio, 0.08);
  EXPECT_EQ(o.collectives.diagnosis.window, 20u);
  EXPECT_DOUBLE_EQ(o.collectives.diagnosis.min_share, 0.6);
  EXPECT_EQ(o.collectives.diagnosis.gap, 5u);
  EXPECT_EQ(o.grpc_listen, "0.0.0.0:9471");  // untouched
}

TEST(AggregatorConfig, TlsFilesAreReadAndChecked) {
  testing::FakeTree t;
  t.Write("a.pem", "x");
  t.Write("a.key", "x");
  AggregatorOptions o;
  ASSERT_TRUE(LoadAggregatorConfig(
                  Write(t, "tls:\n  cert: " + t.Path("a.pem") + "\n  key: " + t.Path("a.key") +
                               "\n  client_ca: " + t.Path("a.pem") + "\n"),
                  &o)
                  .ok());
  EXPECT_EQ(o.tls.cert, t.Path("a.pem"));
  EXPECT_EQ(o.tls.key, t.Path("a.key"));
  EXPECT_EQ(o.tls.client_ca, t.Path("a.pem"));
  absl::Status s = LoadAggregatorConfig(Write(t, "tls:\n  certificate: x\n"), &o);
  EXPECT_THAT(s.message(), HasSubstr("tls.certificate: unknown key"));
  s = LoadAggregatorConfig(Write(t, "tls:\n  cert: /nonexistent.pem\n  key: /nonexistent.key\n"),
                           &o);
  ASSERT_TRUE(s.ok()) << s;  // files are checked once the flags apply
  EXPECT_THAT(CheckAggregatorSecurity(o).message(),
              HasSubstr("--tls-cert: cannot read /nonexistent.pem"));
}

TEST(AggregatorConfig, BadCollectivesValuesNameTheKey) {
  testing::FakeTree t;
  AggregatorOptions o;
  absl::Status s = LoadAggregatorConfig(Write(t, "collectives:\n  straggler_max_p_value: 2\n"), &o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("collectives.straggler_max_p_value"));
  s = LoadAggregatorConfig(Write(t, "collectives:\n  straggler_history: -3\n"), &o);
  EXPECT_THAT(s.message(), HasSubstr("collectives.straggler_history: -3 is outside 2 .. 1024"));
  s = LoadAggregatorConfig(Write(t, "collectives:\n  no_such_rule: 1\n"), &o);
  EXPECT_THAT(s.message(), HasSubstr("collectives.no_such_rule: unknown key"));
  s = LoadAggregatorConfig(Write(t, "collectives: [1, 2]\n"), &o);
  EXPECT_THAT(s.message(), HasSubstr("collectives: must be a map"));
  s = LoadAggregatorConfig(Write(t, "collectives:\n  diagnosis_gap: lots\n"), &o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(o.collectives.diagnosis.gap, 8u);  // nothing applied from a bad file
}

TEST(AggregatorConfig, NodeExpiryIsADuration) {
  testing::FakeTree t;
  AggregatorOptions o;
  EXPECT_EQ(o.node_expiry, absl::Minutes(10));  // the default
  ASSERT_TRUE(LoadAggregatorConfig(Write(t, "node_expiry: 1h30m\n"), &o).ok());
  EXPECT_EQ(o.node_expiry, absl::Minutes(90));
  ASSERT_TRUE(LoadAggregatorConfig(Write(t, "node_expiry: 0\n"), &o).ok());
  EXPECT_EQ(o.node_expiry, absl::ZeroDuration());  // never
  for (const char* bad : {"node_expiry: ten\n", "node_expiry: -5m\n", "node_expiry: 9000h\n"}) {
    absl::Status s = LoadAggregatorConfig(Write(t, bad), &o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(s.message(), HasSubstr("node_expiry")) << bad;
  }
}

}  // namespace
}  // namespace fabricscope::exporters

namespace fabricscope::exporters {
namespace {

TEST(AggregatorOptionTable, ReadmeTableIsTheGeneratedOneAndDefaultsObeyTheirBounds) {
  EXPECT_EQ(testing::ReadmeGeneratedBlock("aggregator"),
            common::OptionMarkdown(AggregatorOptionTable(), AggregatorOptions{}))
      << "exporters/README.md's option table differs from the option table; regenerate it with "
         "fabricscope-aggregator --help-markdown";
  EXPECT_TRUE(ValidateAggregatorOptions(AggregatorOptions{}).ok());
  AggregatorOptions o;
  o.max_nodes = 0;
  EXPECT_THAT(ValidateAggregatorOptions(o).message(), HasSubstr("limits.max_nodes"));
}

}  // namespace
}  // namespace fabricscope::exporters
