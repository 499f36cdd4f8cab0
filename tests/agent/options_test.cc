#include "agent/options.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <set>

#include "tests/common/fake_tree.h"
#include "tests/common/readme.h"

namespace fabricscope::agent {
namespace {

using ::testing::HasSubstr;

TEST(ParseLineRateList, SeveralEntries) {
  auto r = ParseLineRateList("eth0=10gbit, mlx5_0:1=200G");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->at("eth0"), 1'250'000'000u);
  EXPECT_EQ(r->at("mlx5_0:1"), 25'000'000'000u);
}

TEST(ParseLineRateList, BadEntriesNameThemselves) {
  EXPECT_THAT(ParseLineRateList("eth0").status().message(), HasSubstr("NAME=RATE"));
  EXPECT_THAT(ParseLineRateList("eth0=fast").status().message(), HasSubstr("fast"));
}

TEST(ParsePmaTargets, LocalAndSwitchPorts) {
  auto t = ParsePmaTargets("local, 12:3,49151:0");
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 3u);
  EXPECT_EQ((*t)[0].lid, 0);
  EXPECT_EQ((*t)[1].lid, 12);
  EXPECT_EQ((*t)[1].port, 3);
  EXPECT_EQ((*t)[2].lid, 49151);
  for (const char* bad : {"0:1", "49152:1", "12", "12:255", "x:1", "remote"}) {
    EXPECT_THAT(ParsePmaTargets(bad).status().message(), HasSubstr("LID:PORT")) << bad;
  }
}

TEST(ParseDurationNs, UnitsAndBounds) {
  EXPECT_EQ(*ParseDurationNs("100us", "p", 10'000, 1'000'000'000), 100'000);
  EXPECT_EQ(*ParseDurationNs("1ms", "p", 10'000, 1'000'000'000), 1'000'000);
  EXPECT_EQ(*ParseDurationNs("1.5s", "p", 10'000, 2'000'000'000), 1'500'000'000);
  EXPECT_FALSE(ParseDurationNs("1", "p", 10'000, 1'000'000'000).ok());  // unit required
  EXPECT_THAT(ParseDurationNs("1us", "--sample-period", 10'000, 1'000'000'000).status().message(),
              HasSubstr("--sample-period"));
}

TEST(LoadYamlConfig, EveryKey) {
  testing::FakeTree t;
  t.Write("agent.yaml", R"(
node: gpu-17
sysfs_root: /host/sys
sample_period: 100us
window: 2s
slow_sample_period: 5ms
aggregator: agg.example:9471
http_listen: 127.0.0.1:9999
ring_slots: 1024
max_queued_batches: 60
interfaces: [mlx5_0, eth0]
line_rates:
  eth0: 25gbit
microburst:
  enter: 0.85
  exit: 0.6
  ports:
    mlx5_0:1: {enter: 0.95, exit: 0.8}
)");
  AgentOptions o;
  ASSERT_TRUE(LoadYamlConfig(t.Path("agent.yaml"), &o).ok());
  EXPECT_EQ(o.node, "gpu-17");
  EXPECT_EQ(o.sysfs_root, "/host/sys");
  EXPECT_EQ(o.sample_period_ns, 100'000);
  EXPECT_EQ(o.window_ns, 2'000'000'000);
  EXPECT_EQ(o.slow_sample_period_ns, 5'000'000);
  EXPECT_EQ(o.aggregator, "agg.example:9471");
  EXPECT_EQ(o.http_listen, "127.0.0.1:9999");
  EXPECT_EQ(o.ring_slots, 1024u);
  EXPECT_EQ(o.max_queued_batches, 60u);
  EXPECT_EQ(o.interfaces, (std::vector<std::string>{"mlx5_0", "eth0"}));
  EXPECT_EQ(o.line_rates.at("eth0"), 3'125'000'000u);
  EXPECT_DOUBLE_EQ(o.thresholds.enter, 0.85);
  EXPECT_DOUBLE_EQ(o.thresholds.exit, 0.6);
  EXPECT_DOUBLE_EQ(o.port_thresholds.at("mlx5_0:1").enter, 0.95);
  EXPECT_DOUBLE_EQ(o.port_thresholds.at("mlx5_0:1").exit, 0.8);
  EXPECT_TRUE(ValidateOptions(o).ok());
}

TEST(LoadYamlConfig, ErrorsAreClear) {
  testing::FakeTree t;
  AgentOptions o;
  EXPECT_EQ(LoadYamlConfig(t.Path("missing.yaml"), &o).code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(LoadYamlConfig(t.root(), &o).message(), HasSubstr("is not a regular file"));
  t.Write("bad.yaml", "sample_period: [1\n");
  EXPECT_EQ(LoadYamlConfig(t.Path("bad.yaml"), &o).code(), absl::StatusCode::kInvalidArgument);
  t.Write("unknown.yaml", "sampel_period: 1ms\n");
  EXPECT_THAT(LoadYamlConfig(t.Path("unknown.yaml"), &o).message(), HasSubstr("sampel_period"));
  t.Write("range.yaml", "sample_period: 1us\n");
  EXPECT_THAT(LoadYamlConfig(t.Path("range.yaml"), &o).message(), HasSubstr("sample_period"));
  t.Write("type.yaml", "ring_slots: many\n");
  EXPECT_EQ(LoadYamlConfig(t.Path("type.yaml"), &o).code(), absl::StatusCode::kInvalidArgument);
  t.Write("empty.yaml", "");
  EXPECT_TRUE(LoadYamlConfig(t.Path("empty.yaml"), &o).ok());
  // One file, rewritten for each case.
  auto load = [&](const std::string& text) {
    t.Write("case.yaml", text);
    return LoadYamlConfig(t.Path("case.yaml"), &o);
  };
  EXPECT_TRUE(load("# nothing set yet\n").ok());
  // A key written twice, or a second document, would be ignored or win silently.
  EXPECT_THAT(load("sample_period: 100us\nsample_period: 1ms\n").message(),
              HasSubstr("sample_period: given twice"));
  EXPECT_THAT(load("collectives:\n  rails: [mlx5_0]\n  rails: [mlx5_1]\n").message(),
              HasSubstr("collectives.rails: given twice"));
  EXPECT_THAT(load("---\nnode: a\n---\nnode: b\n").message(),
              HasSubstr("2 YAML documents (---); one is expected"));
  EXPECT_THAT(load("collectives.rails: [mlx5_0]\ncollectives:\n  rails: [mlx5_1]\n").message(),
              HasSubstr("collectives.rails: given twice"));
  // Inside a map value too: one of the two rates would win silently.
  EXPECT_THAT(load("line_rates:\n  eth0: 25gbit\n  eth0: 100gbit\n").message(),
              HasSubstr("line_rates.eth0: given twice"));
  EXPECT_TRUE(load("node: b\n---\n").ok());  // joined by a template tool
  EXPECT_TRUE(load("---\nnode: a\n").ok());
  EXPECT_EQ(o.node, "a");
}

TEST(ValidateOptions, ThresholdsAndWindow) {
  AgentOptions o;
  EXPECT_TRUE(ValidateOptions(o).ok());
  o.thresholds = {0.5, 0.7};
  EXPECT_THAT(ValidateOptions(o).message(), HasSubstr("exit <= enter"));
  o = AgentOptions();
  o.window_ns = 5 * o.sample_period_ns;
  EXPECT_FALSE(ValidateOptions(o).ok());
}

// Each value within its own bounds, but together too big for memory or a batch.
TEST(ValidateOptions, ProductsThatSizeMemoryAreBounded) {
  AgentOptions o;
  o.window_ns = 3'600'000'000'000;  // 1 h windows at 10 us buckets: 360 M buckets a batch
  o.series_bucket_ns = 10'000;
  EXPECT_THAT(ValidateOptions(o).message(),
              HasSubstr("360000000 utilization buckets per port and direction"));
  o.series_bucket_ns = 3'600'000;  // exactly 1,000,000 buckets
  EXPECT_TRUE(ValidateOptions(o).ok());
  o.series_bucket_ns = 3'599'999;
  EXPECT_THAT(ValidateOptions(o).message(), HasSubstr("(e.g. --series-bucket=3600us or more)"));
  o = AgentOptions();
  o.window_ns = 120'000'000'000;  // 2 minutes at the default 1 ms: 120,000 buckets
  EXPECT_TRUE(ValidateOptions(o).ok());
  o = AgentOptions();
  o.flight_recorder_seconds = 600;
  o.sample_period_ns = 100'000;  // 6 M samples per port: the bound
  EXPECT_TRUE(ValidateOptions(o).ok());
  o.sample_period_ns = 10'000;
  EXPECT_THAT(ValidateOptions(o).message(), HasSubstr("keeps 60000000 samples per port"));
}

TEST(ValidateOptions, ANodeNameMustBeALabel) {
  AgentOptions o;
  o.node = "gpu-17.cluster.example";
  EXPECT_TRUE(ValidateOptions(o).ok());
  o.node = "gpu\n17";
  EXPECT_THAT(ValidateOptions(o).message(), HasSubstr("--node: control character 0xa at byte 3"));
  o.node = std::string(254, 'a');
  EXPECT_THAT(ValidateOptions(o).message(), HasSubstr("--node: 254 bytes, at most 253"));
}

}  // namespace
}  // namespace fabricscope::agent

namespace fabricscope::agent {
namespace {

// Options declared once (agent/options.inc): each flag and key once, every default within its
// own bounds, and README's table is the one the table renders.
TEST(AgentOptionTable, NamesAreUniqueAndDefaultsObeyTheirBounds) {
  std::set<std::string> flags, keys;
  for (const auto& spec : AgentOptionTable()) {
    if (!spec.flag.empty()) {
      EXPECT_TRUE(flags.insert(spec.flag).second) << spec.flag;
    }
    if (!spec.key.empty()) {
      EXPECT_TRUE(keys.insert(spec.key).second) << spec.key;
    }
    EXPECT_FALSE(spec.help.empty()) << spec.flag << spec.key;
  }
  // One flag per FABRICSCOPE_OPTION of the declaration file and the fragments it includes
  // (collectors/common/remote_write_options.inc).
  std::function<size_t(const std::string&)> count = [&](const std::string& path) {
    std::ifstream inc(std::string(FABRICSCOPE_SOURCE_DIR) + "/" + path);
    EXPECT_TRUE(inc) << path;
    size_t n = 0;
    for (std::string line; std::getline(inc, line);) {
      n += line.rfind("FABRICSCOPE_OPTION(", 0) == 0;
      if (line.rfind("#include \"", 0) == 0 && line.size() > 11) {
        n += count(line.substr(10, line.size() - 11));
      }
    }
    return n;
  };
  const size_t declared = count("agent/options.inc");
  EXPECT_EQ(flags.size(), declared);
  EXPECT_GT(declared, 40u);
  EXPECT_TRUE(common::CheckOptionBounds(AgentOptionTable(), AgentOptions{}).ok());
  AgentOptions o;
  o.ring_slots = 8;  // below the table's 16
  EXPECT_THAT(ValidateOptions(o).message(), HasSubstr("--ring-slots"));
}

TEST(AgentOptionTable, ReadmeTableIsTheGeneratedOne) {
  const std::string expected = common::OptionMarkdown(AgentOptionTable(), AgentOptions{});
  EXPECT_EQ(testing::ReadmeGeneratedBlock("agent"), expected)
      << "agent/README.md's option table differs from the option table; regenerate it with "
         "fabricscope-agent --help-markdown";
}

TEST(AgentOptionTable, ConfigKeysNestAndMatchTheFlags) {
  testing::FakeTree t;
  t.Write("agent.yaml", R"(
spool: {dir: /var/spool/x, max_bytes: 1GiB}
tls: {ca: /ca.pem, server_name: agg}
collectives: {rails: [mlx5_0, mlx5_1], delay: 50ms, contention_ratio: 2}
hw_lifespan: 5
gpu_socket_mode: "0600"
pma: [local, "12:3"]
)");
  AgentOptions o;
  ASSERT_TRUE(LoadYamlConfig(t.Path("agent.yaml"), &o).ok());
  EXPECT_EQ(o.spool_dir, "/var/spool/x");
  EXPECT_EQ(o.spool_max_bytes, uint64_t{1} << 30);
  EXPECT_EQ(o.tls.ca, "/ca.pem");
  EXPECT_EQ(o.tls.server_name, "agg");
  EXPECT_EQ(o.collectives.rails, (std::vector<std::string>{"mlx5_0", "mlx5_1"}));
  EXPECT_EQ(o.collectives.delay_ns, 50'000'000);
  EXPECT_DOUBLE_EQ(o.collectives.contention_ratio, 2);
  EXPECT_EQ(o.hw_lifespan_ms, 5u);
  EXPECT_EQ(o.gpu_socket_mode, 0600u);
  ASSERT_EQ(o.pma_targets.size(), 2u);
  EXPECT_EQ(o.pma_targets[1].lid, 12);
  // The same through the flags' names.
  AgentOptions f;
  for (auto [flag, text] :
       std::vector<std::pair<std::string, std::string>>{{"spool-dir", "/var/spool/x"},
                                                        {"spool-max-bytes", "1GiB"},
                                                        {"hw-lifespan", "5ms"},
                                                        {"collective-rails", "mlx5_0,mlx5_1"},
                                                        {"gpu-socket-mode", "0600"},
                                                        {"pma", "local,12:3"}}) {
    ASSERT_TRUE(common::SetFromFlag(AgentOptionTable(), flag, text, &f).ok()) << flag;
  }
  EXPECT_EQ(f.spool_dir, o.spool_dir);
  EXPECT_EQ(f.spool_max_bytes, o.spool_max_bytes);
  EXPECT_EQ(f.hw_lifespan_ms, o.hw_lifespan_ms);
  EXPECT_EQ(f.collectives.rails, o.collectives.rails);
  EXPECT_EQ(f.gpu_socket_mode, o.gpu_socket_mode);
  EXPECT_EQ(f.pma_targets.size(), o.pma_targets.size());
  t.Write("bad.yaml", "spool: {max_bytes: 1KiB}\n");
  EXPECT_THAT(LoadYamlConfig(t.Path("bad.yaml"), &o).message(), HasSubstr("spool.max_bytes"));
}

}  // namespace
}  // namespace fabricscope::agent
