// fabricscope_bench_agent: does the real agent::Agent keep its 1 ms fast tick on a node with 8
// RDMA ports and their netdevs, and does its slow sampler group (error counters, hw_counters at
// their lifespan, link state, TCP, ethtool) leave the fast one alone?
//
// Node: a fake sysfs tree under /dev/shm (or $TMPDIR) with mlx5_0..mlx5_7 (copies of the real
// mlx5_0 fixture port: 16 counters/ + 24 hw_counters/ files each, RoCE, gid_attrs/ndevs/0 naming
// its netdev) and 8 netdevs fsb0..fsb7 with the 13 statistics/ files; procfs net/snmp and
// net/netstat from tests/testdata/procfs-real. As root, fsb0..fsb7 also exist as veth pairs in a
// throw-away network namespace (removed at exit), and the agent is created inside it so that its
// slow group's EthtoolCollector finds real interfaces (it selects only mlx5 RoCE/PHY stat names,
// which veth does not have: the run says how many ethtool counters the agent took); not root: no
// namespace, with a message.
//
// Runs, each --seconds long, per round (--rounds, interleaved so that load drift hits all alike):
//   baseline          a bare clock_nanosleep(TIMER_ABSTIME) loop at 1 ms: the sampler's loop,
//                     timer slack and deadline logic without reads, nothing else running
//   agent/slow=10ms   Agent::Create + Start with the defaults (fast 1 ms, slow 10 ms)
//   agent/slow=1ms    the same with --slow-sample-period=1ms: the slow thread reads every error
//                     counter, link state and TCP file of 16 ports every millisecond
//                     (hw_counters still at their lifespan: every 10th slow tick)
//   agent/slow=1ms+nice10  the same with the slow sampler thread reniced to 10 by this program
//                     0.2 s after Start: what a lower CPU priority for the slow group would buy
//                     (the agent sets no scheduling priority itself)
// During each agent run the same bare loop also runs alongside (a third sleeping thread), so
// every agent figure also has a baseline taken under the same machine load.
//
// How it measures, without any agent code change:
// - This executable defines clock_nanosleep() and pread()/pread64(). The agent library is linked
//   statically into it, so the sampler threads' calls land here; the wrappers make the system
//   call and, for threads named fs-sampler (and the baseline thread), record per tick the
//   deadline asked for, the wake-up time, when the tick's work ended (the next sleep) and how
//   many preads the tick made. That gives exact interval percentiles and overruns per sampler
//   thread. The fast thread is told from the slow one by its reads per tick (it reads only the
//   byte/packet counters: 4 per port).
// - The agent's own view: /metrics scraped over HTTP (httplib) just before Stop:
//   fabricscope_agent_sample_interval_seconds (fast sampler; p50/p99 as bucket upper bounds),
//   fabricscope_agent_sampler_overruns_total (fast + slow together), the groups' effective
//   resolution and read costs.
//
// Flags: --seconds=S per run (default 5), --rounds=N (default 1), --configs=10ms,1ms,1ms+nice
// (the slow periods to run; "+nice": renice the slow sampler thread to 10).

//
// Files: bench_agent_interpose.cc (the wrappers), bench_agent_stats.cc (recorded ticks to
// figures), bench_agent_metrics.cc (the /metrics scrape), bench_agent_runs.cc (the runs), this
// file (flags, the node and the report).

#include "tests/bench/bench_agent.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "agent/options.h"
#include "glog/logging.h"
#include "tests/bench/bench_common.h"
#include "tests/bench/bench_node.h"

namespace fabricscope::bench {
namespace {

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

// The command line (see the flags above).
struct Flags {
  double seconds = 5;
  int rounds = 1;
  // Slow sample periods, each optionally with "+nice": the slow sampler thread reniced to 10.
  std::vector<std::pair<int64_t, int>> slow_periods = {
      {10'000'000, 0}, {1'000'000, 0}, {1'000'000, 10}};
};

// False, after a message on stderr, on a flag it does not know or a bad --configs period.
bool ParseFlags(int argc, char** argv, Flags* f) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--seconds=", 0) == 0) {
      f->seconds = std::atof(a.c_str() + 10);
    } else if (a.rfind("--rounds=", 0) == 0) {
      f->rounds = std::max(1, std::atoi(a.c_str() + 9));
    } else if (a.rfind("--configs=", 0) == 0) {
      f->slow_periods.clear();
      std::stringstream ss(a.substr(10));
      std::string item;
      while (std::getline(ss, item, ',')) {
        int nice = 0;
        if (item.size() > 5 && item.compare(item.size() - 5, 5, "+nice") == 0) {
          nice = 10;
          item.resize(item.size() - 5);
        }
        auto ns = fabricscope::agent::ParseDurationNs(item, "--configs", 1'000'000, 60'000'000'000);
        if (!ns.ok()) {
          std::fprintf(stderr, "%s\n", ns.status().ToString().c_str());
          return false;
        }
        f->slow_periods.emplace_back(*ns, nice);
      }
    } else {
      std::fprintf(stderr, "usage: %s [--seconds=5] [--rounds=1] [--configs=10ms,1ms,1ms+nice]\n",
                   argv[0]);
      return false;
    }
  }
  if (f->seconds <= 0) f->seconds = 5;
  return true;
}

void PrintLoadavg() {
  std::ifstream la("/proc/loadavg");
  std::string l;
  std::getline(la, l);
  std::printf("loadavg at start: %s\n", l.c_str());
}

// The node, the ethtool namespace (or why there is none) and the runs ahead.
void PrintSetup(const FakeNode& node, const BenchNetns* ns, const std::string& why,
                const Flags& f) {
  std::printf(
      "node: %d RoCE ports mlx5_0..mlx5_%d (copies of the mlx5_0 fixture: 16 counters/ + "
      "24 hw_counters/, lifespan 10 ms) + netdevs fsb0..fsb%d (13 statistics/ each), "
      "sysfs at %s (fs=%s), procfs net/snmp+netstat at %s\n",
      kPorts, kPorts - 1, kPorts - 1, node.sysfs_root.c_str(), FsType(node.sysfs_root).c_str(),
      node.procfs_root.c_str());
  if (ns) {
    std::printf(
        "ethtool: fsb0..fsb%d are veth pairs in network namespace %s (the agent is "
        "created there; removed at exit)\n",
        kPorts - 1, ns->name().c_str());
  } else {
    std::printf("ethtool: SKIPPED (%s)\n", why.c_str());
  }
  std::printf(
      "%.1f s per run, %d round(s) of: baseline alone, then the agent at each slow "
      "period (with a baseline loop running alongside); fast period 1 ms\n",
      f.seconds, f.rounds);
  std::fflush(stdout);
}

// One configuration per slow period, with its label.
std::vector<Config> MakeConfigs(const std::vector<std::pair<int64_t, int>>& slow_periods) {
  std::vector<Config> configs;
  for (const auto& [slow, nice] : slow_periods) {
    Config c;
    c.slow_ns = slow;
    c.slow_nice = nice;
    char label[64];
    std::snprintf(label, sizeof(label), "agent/slow=%gms%s", static_cast<double>(slow) / 1e6,
                  nice != 0 ? "+nice10" : "");
    c.label = label;
    configs.push_back(std::move(c));
  }
  return configs;
}

// All rounds, each the baseline alone then every configuration; digests the configurations and
// returns the baseline's digest.
ThreadResult RunRounds(const FakeNode& node, BenchNetns* ns, const Flags& f,
                       std::vector<Config>* configs) {
  std::vector<Recorded> baselines;
  for (int round = 0; round < f.rounds; ++round) {
    std::printf("--- round %d/%d: baseline", round + 1, f.rounds);
    std::fflush(stdout);
    Recorded b;
    if (RunBaseline(f.seconds, &b)) baselines.push_back(std::move(b));
    for (Config& c : *configs) {
      std::printf(", %s", c.label.c_str());
      std::fflush(stdout);
      c.runs.push_back(RunAgent(node, ns, c.slow_ns, c.slow_nice, f.seconds));
    }
    std::printf("\n");
  }
  std::vector<const Recorded*> bp;
  for (const Recorded& b : baselines) bp.push_back(&b);
  const ThreadResult base = Digest(bp);
  for (Config& c : *configs) DigestConfig(c);
  return base;
}

// The agent's own /metrics in each round of `c`; the groups' resolution and read costs from the
// last round.
void PrintAgentMetrics(const Config& c) {
  for (size_t i = 0; i < c.runs.size(); ++i) {
    const Scrape& m = c.runs[i].metrics;
    if (!c.runs[i].ok) continue;
    if (!m.ok) {
      std::printf("  round %zu agent /metrics: %s\n", i + 1, m.error.c_str());
      continue;
    }
    std::printf(
        "  round %zu agent /metrics: sample_interval count=%llu mean=%s us, p50 %s, p99 %s, "
        ">1.25 ms: %llu | sampler_overruns_total (fast+slow) %.0f | ring drops %.0f\n",
        i + 1, static_cast<unsigned long long>(m.count),
        Us(m.sum / static_cast<double>(m.count) * 1e9).c_str(), BucketQuantile(m, 0.50).c_str(),
        BucketQuantile(m, 0.99).c_str(), static_cast<unsigned long long>(CountAbove(m, 1.25e-3)),
        m.overruns, m.ring_drops);
    if (i + 1 == c.runs.size()) {
      std::string res;
      for (const auto& [g, s] : m.resolution) {
        res += (res.empty() ? "" : ", ") + g + " " + Us(s * 1e9) + " us";
      }
      std::printf("  agent /metrics: group effective resolution: %s\n", res.c_str());
      double rdma = 0, net = 0;
      int nr = 0, nn = 0;
      for (const auto& [dev, s] : m.read_cost) {
        if (dev.rfind("mlx5_", 0) == 0) {
          rdma += s;
          ++nr;
        } else if (dev.rfind("fsb", 0) == 0) {
          net += s;
          ++nn;
        }
      }
      std::printf(
          "  agent /metrics: read_cost per file (mean over ports): RDMA %s us (%d "
          "ports), netdevs %s us (%d)\n",
          Us(nr ? rdma / nr * 1e9 : 0).c_str(), nr, Us(nn ? net / nn * 1e9 : 0).c_str(), nn);
    }
  }
}

// One configuration: its counters, its sampler threads and the baseline loop alongside (exact,
// from the interposed clock_nanosleep), then the agent's own view. `netns`: the ports' netdevs
// are veth pairs in a namespace.
void PrintConfig(const Config& c, bool netns) {
  const AgentRun* first = nullptr;
  for (const AgentRun& r : c.runs) {
    if (r.ok && first == nullptr) first = &r;
  }
  std::printf("%s:", c.label.c_str());
  if (first == nullptr) {
    std::printf(" failed, see above\n");
    return;
  }
  std::printf(
      " %zu ports, %zu fast counters (byte/packet), %zu slow-group counters "
      "(%zu ethtool)%s\n",
      first->ports, first->fast_counters, first->slow_counters, first->ethtool_counters,
      first->ethtool_counters == 0 && netns
          ? "; no ethtool stat: the agent selects only mlx5 RoCE/PHY names "
            "(IsDefaultRoceStat) and veth has none"
          : "");
  PrintThread("fast sampler", c.fast);
  std::printf(
      "  %-24s preads per tick: %s (expected %zu)%s\n", "", PreadsSummary(c.fast).c_str(),
      first->fast_counters,
      c.fast.preads_hist.size() == 1 && c.fast.preads_hist.begin()->first == first->fast_counters
          ? ""
          : "  <- WARNING: the fast thread read other files than expected");
  PrintThread("slow sampler", c.slow);
  std::printf("  %-24s preads per tick: %s\n", "", PreadsSummary(c.slow).c_str());
  PrintThread("baseline loop alongside", c.base);
  PrintAgentMetrics(c);
}

// One row of the summary table: `t` against its nominal period, the baseline alone (`base`) and
// the baseline alongside (`along`, if any).
void SummaryRow(const std::string& label, const ThreadResult& t, const ThreadResult* along,
                const ThreadResult& base) {
  if (t.empty()) return;
  std::printf("%-42s %9s %9s %9s %9llu %8llu %8.3f %9.3f %9s\n", label.c_str(),
              Us(t.interval.p50).c_str(), Us(t.interval.p99).c_str(), Us(t.interval.max).c_str(),
              static_cast<unsigned long long>(t.overruns),
              static_cast<unsigned long long>(t.over_1_2),
              P99Ratio(t, static_cast<double>(t.period)),
              P99Ratio(t, static_cast<double>(base.interval.p99)),
              along && !along->empty()
                  ? std::to_string(P99Ratio(t, static_cast<double>(along->interval.p99)))
                        .substr(0, 5)
                        .c_str()
                  : "-");
}

// Each configuration against the first (the defaults): does the slow group's load reach the
// fast tick?
void PrintComparisons(const std::vector<Config>& configs) {
  for (size_t i = 1; i < configs.size(); ++i) {
    const Config& a = configs[0];
    const Config& b = configs[i];
    if (a.fast.empty() || b.fast.empty()) continue;
    auto along = [](const Config& c) {
      return c.base.empty() ? 0.0
                            : Ratio(static_cast<double>(c.fast.interval.p99),
                                    static_cast<double>(c.base.interval.p99));
    };
    std::printf(
        "%s vs %s: fast p99 x%.3f, fast p99/baseline-alongside %.3f vs %.3f, fast tick "
        "work p99 x%.3f, fast overruns %llu vs %llu; slow thread busy %.1f%% vs %.1f%% "
        "of a core\n",
        b.label.c_str(), a.label.c_str(),
        Ratio(static_cast<double>(b.fast.interval.p99), static_cast<double>(a.fast.interval.p99)),
        along(b), along(a),
        Ratio(static_cast<double>(b.fast.work.p99), static_cast<double>(a.fast.work.p99)),
        static_cast<unsigned long long>(b.fast.overruns),
        static_cast<unsigned long long>(a.fast.overruns), b.slow.cpu_pct, a.slow.cpu_pct);
  }
}

// The summary table of all configurations, the comparisons with the defaults and how to read them.
void PrintSummary(const ThreadResult& base, const std::vector<Config>& configs) {
  std::printf(
      "\n=== summary: 1 ms tick, p99 interval; target fast p99 <= 1.2 x nominal "
      "(1200 us) ===\n");
  std::printf("%-42s %9s %9s %9s %9s %8s %8s %9s %9s\n", "thread", "p50 us", "p99 us", "max us",
              "overruns", ">1.2x", "p99/nom", "p99/base", "p99/base");
  std::printf("%-42s %9s %9s %9s %9s %8s %8s %9s %9s\n", "", "", "", "", "", "", "", "alone",
              "alongside");
  SummaryRow("baseline loop, alone", base, nullptr, base);
  for (const Config& c : configs) {
    SummaryRow(c.label + " fast", c.fast, &c.base, base);
    SummaryRow(c.label + " baseline alongside", c.base, nullptr, base);
  }
  for (const Config& c : configs) {
    if (c.slow.empty()) continue;
    std::printf("%-42s %9s %9s %9s %9llu %8llu %8.3f   (nominal %s us)\n",
                (c.label + " slow").c_str(), Us(c.slow.interval.p50).c_str(),
                Us(c.slow.interval.p99).c_str(), Us(c.slow.interval.max).c_str(),
                static_cast<unsigned long long>(c.slow.overruns),
                static_cast<unsigned long long>(c.slow.over_1_2),
                P99Ratio(c.slow, static_cast<double>(c.slow.period)), Us(c.slow.period).c_str());
  }
  PrintComparisons(configs);
  std::printf(
      "overruns = ticks that woke more than one period after their deadline (the "
      "sampler's own rule); >1.2x = intervals longer than 1.2 periods; base alone = the "
      "bare loop with nothing else running, alongside = the same loop running during "
      "that agent run (same machine load). The agent's /metrics histogram cannot resolve "
      "1.2 ms (buckets 1, 1.25, 1.5 ms) and its overrun counter adds both groups.\n");
  std::fflush(stdout);
}

}  // namespace
}  // namespace fabricscope::bench

int main(int argc, char** argv) {
  using namespace fabricscope::bench;
  Flags flags;
  if (!ParseFlags(argc, argv, &flags)) return 2;
  // The agent's INFO lines (e.g. "no ethtool RoCE/PHY statistics on ...") would interleave with
  // the report; what matters of them is printed below. Warnings and errors still show.
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;
  google::InitGoogleLogging(argv[0]);

  PrintMachine();
  PrintLoadavg();
  std::vector<std::string> netdevs;
  for (int i = 0; i < kPorts; ++i) netdevs.push_back("fsb" + std::to_string(i));
  FakeNode node;
  std::string why;
  if (!BuildFakeNode(FakeTreeBase(), netdevs, &node, &why)) {
    std::fprintf(stderr, "fake node: %s\n", why.c_str());
    return 1;
  }
  std::unique_ptr<BenchNetns> ns = BenchNetns::Create(netdevs, &why);
  PrintSetup(node, ns.get(), why, flags);

  std::vector<Config> configs = MakeConfigs(flags.slow_periods);
  const ThreadResult base = RunRounds(node, ns.get(), flags, &configs);

  std::printf(
      "\n=== sampler threads at 1 ms (exact, from the interposed clock_nanosleep; all "
      "rounds) ===\n");
  PrintThread("baseline loop, alone", base);
  for (const Config& c : configs) PrintConfig(c, ns != nullptr);
  PrintSummary(base, configs);
  return 0;
}
