// The series budget (issue 17 item 1, exporters/README.md "Series budget"): at the default
// --metrics=basic a standalone agent on each fixture tree exports at most 40 series per port and 80
// per node (the aggregator's own series, which it exports once, and GPU and communicator series,
// bounded separately, are not counted); --metrics=full adds the per-port histograms and raw
// breakdowns. Series are counted as a scraper stores them: one per line of the exposition (every
// histogram bucket, _sum and _count is one).
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tests/common/fake_tree.h"
#include "tests/common/wait.h"
#include "tests/integration/exposition.h"

namespace fabricscope::testing {
namespace {

using namespace std::chrono_literals;

constexpr size_t kPortBudget = 40;
constexpr size_t kNodeBudget = 80;

struct SeriesCount {
  std::map<std::string, size_t> per_port;  // "device:port"
  size_t per_node = 0;                     // node-labelled, no port
  std::map<std::string, size_t> families;  // base name (no _bucket/_sum/_count) -> series
};

bool IsGpuOrCommunicator(const Sample& s) {
  return s.labels.count("comm") || s.labels.count("rank") || s.labels.count("func") ||
         s.name.find("_gpu_") != std::string::npos;
}

std::string BaseName(std::string name) {
  for (const std::string suffix : {"_bucket", "_sum", "_count"}) {
    if (name.size() > suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return name.substr(0, name.size() - suffix.size());
    }
  }
  return name;
}

SeriesCount Count(const std::vector<Sample>& samples) {
  SeriesCount c;
  for (const Sample& s : samples) {
    if (!s.labels.count("node") || IsGpuOrCommunicator(s)) continue;
    ++c.families[BaseName(s.name)];
    auto device = s.labels.find("device");
    auto port = s.labels.find("port");
    if (device != s.labels.end() && port != s.labels.end()) {
      ++c.per_port[device->second + ":" + port->second];
    } else {
      ++c.per_node;
    }
  }
  return c;
}

// Runs a standalone agent on `tree` with --metrics=<profile> and counts its series once a
// window with every port has been rendered and every family in `wait_for` is exported (the
// slow group's counters, hw_counters and TCP among them, come in their own windows, later than
// the fast ports' bytes: under ASan on a loaded machine, seconds later).
SeriesCount Measure(const FakeTree& tree, const std::string& profile,
                    const std::vector<std::string>& wait_for = {}) {
  tree.Write("empty.yaml", "");
  StandaloneAgent agent(tree.Path("empty.yaml"), tree.Path("sys"), tree.Path("proc"),
                        {"--metrics=" + profile});
  EXPECT_TRUE(agent.Start()) << agent.Output();
  std::vector<Sample> samples;
  const bool ready = WaitFor(
      [&] {
        samples = agent.Samples();
        bool bytes = false, node_histogram = false;
        for (const Sample& s : samples) {
          bytes |= s.name == "fabricscope_port_transmit_bytes_total";
          node_histogram |= s.name == "fabricscope_node_sample_utilization_ratio_count";
        }
        const auto families = Count(samples).families;
        for (const std::string& f : wait_for) {
          if (families.count(f) == 0) return false;
        }
        return bytes && node_histogram;
      },
      60s);
  EXPECT_TRUE(ready) << agent.Output();
  EXPECT_EQ(agent.proc().Stop(SIGTERM), 0) << agent.Output();
  return Count(samples);
}

void ExpectWithinBudget(const std::string& tree_name, const SeriesCount& c) {
  ASSERT_FALSE(c.per_port.empty()) << tree_name << ": no port series at all";
  for (const auto& [port, n] : c.per_port) {
    std::printf("series budget: %s %s: %zu series (budget %zu)\n", tree_name.c_str(), port.c_str(),
                n, kPortBudget);
    EXPECT_LE(n, kPortBudget) << tree_name << " " << port;
  }
  std::printf("series budget: %s node: %zu series (budget %zu)\n", tree_name.c_str(), c.per_node,
              kNodeBudget);
  EXPECT_LE(c.per_node, kNodeBudget) << tree_name;
  EXPECT_GT(c.per_node, 0u) << tree_name;
}

TEST(SeriesBudget, RealTreesStayWithinItAtTheDefault) {
  FakeTree tree;
  tree.CopyTestdata("sysfs-real/class", "sys/class");
  tree.CopyTestdata("procfs-real/net", "proc/net");
  // What each profile must export, waited for before counting.
  const std::vector<std::string> at_basic = {
      "fabricscope_node_sample_utilization_ratio", "fabricscope_node_microburst_duration_seconds",
      "fabricscope_port_saturated_samples_total",  "fabricscope_microbursts_total",
      "fabricscope_port_utilization_ratio",        "fabricscope_port_peak_utilization_ratio"};
  const std::vector<std::string> at_full = {
      "fabricscope_port_sample_utilization_ratio", "fabricscope_microburst_duration_seconds",
      "fabricscope_port_hw_events_total", "fabricscope_tcp_events_total"};
  const SeriesCount basic = Measure(tree, "basic", at_basic);
  ExpectWithinBudget("sysfs-real", basic);
  // The per-port histograms and raw breakdowns are full only; the node-level histograms and
  // the per-port saturated-sample counters take their place.
  for (const std::string& family : at_full) {
    EXPECT_EQ(basic.families.count(family), 0u) << family << " is exported at basic";
  }
  for (const std::string& family : at_basic) {
    EXPECT_GT(basic.families.count(family), 0u) << family << " is missing at basic";
  }

  const SeriesCount full = Measure(tree, "full", at_full);
  size_t basic_total = basic.per_node, full_total = full.per_node;
  for (const auto& [port, n] : basic.per_port) basic_total += n;
  for (const auto& [port, n] : full.per_port) full_total += n;
  std::printf("series budget: sysfs-real node total basic %zu, full %zu (basic/full %.2f)\n",
              basic_total, full_total,
              static_cast<double>(basic_total) / static_cast<double>(full_total));
  for (const std::string& family : at_full) {
    EXPECT_GT(full.families.count(family), 0u) << family << " is missing at full";
  }
  EXPECT_GT(full_total, basic_total);
}

TEST(SeriesBudget, GeneratedTreesStayWithinItAtTheDefault) {
  for (const char* name : {"generated/irdma-rocev2", "generated/mlx4-legacy"}) {
    FakeTree tree;
    tree.CopyTestdata(std::string(name) + "/class", "sys/class");
    tree.CopyTestdata("procfs-real/net", "proc/net");
    ExpectWithinBudget(name, Measure(tree, "basic"));
  }
}

}  // namespace
}  // namespace fabricscope::testing
