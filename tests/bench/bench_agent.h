#pragma once

// fabricscope_bench_agent: what its files share (the recorded wake-ups, the digests, the /metrics
// scrape and the runs); the benchmark is described in bench_agent.cc.

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tests/bench/bench_node.h"

// ---- interposed system call wrappers (bench_agent_interpose.cc) ----------------------------

namespace fabricscope::bench::rec {

struct Wake {
  int64_t deadline;  // requested absolute CLOCK_MONOTONIC time
  int64_t enter;     // when the thread asked to sleep (end of the previous tick's work)
  int64_t wake;      // when clock_nanosleep returned
  uint32_t preads;   // preads made since the previous wake-up (by the previous tick)
};

struct ThreadLog {
  std::atomic<pid_t> tid{0};
  char name[16] = {};
  Wake* wakes = nullptr;
  size_t cap = 0;
  std::atomic<size_t> n{0};
};

constexpr int kMaxThreads = 4;
extern ThreadLog g_logs[kMaxThreads];
extern std::atomic<int> g_claimed;

void Arm(size_t cap);
void Disarm();

}  // namespace fabricscope::bench::rec

// ---- the benchmark -------------------------------------------------------------------------

namespace fabricscope::bench {

constexpr int kPorts = 8;
constexpr int64_t kPeriodNs = 1'000'000;

std::string Us(double ns);
std::string Us(int64_t ns);

struct Dist {
  size_t n = 0;
  int64_t p50 = 0, p99 = 0, p999 = 0, max = 0;
};

// What one recorded thread did in one run.
struct Recorded {
  std::string name;
  pid_t tid = 0;
  std::vector<rec::Wake> wakes;
  int64_t cpu_ns = -1;
  int64_t wall_ns = 0;
  int64_t period = 0;        // median deadline step
  double preads_median = 0;  // per tick
};

// One sampler thread's figures over all rounds of a configuration.
struct ThreadResult {
  size_t runs = 0;
  size_t ticks = 0;
  int64_t period = 0;
  Dist interval;                           // wake-to-wake, within each run
  Dist late;                               // wake - deadline
  Dist work;                               // wake to the next sleep: the tick's reads and ring push
  uint64_t overruns = 0;                   // as the sampler counts them: wake - deadline > period
  uint64_t over_1_2 = 0;                   // intervals > 1.2 x period
  std::map<uint32_t, size_t> preads_hist;  // preads per tick -> ticks
  double cpu_pct = -1;
  bool empty() const { return runs == 0; }
};

// Recorded wake-ups to figures (bench_agent_stats.cc).
std::vector<Recorded> TakeLogs(const std::vector<int64_t>& cpu, int64_t wall);
ThreadResult Digest(const std::vector<const Recorded*>& runs);
double P99Ratio(const ThreadResult& t, double denom_ns);
void PrintThread(const char* label, const ThreadResult& t);
std::string PreadsSummary(const ThreadResult& t);

// ---- /metrics (bench_agent_metrics.cc) -----------------------------------------------------

struct Scrape {
  bool ok = false;
  std::string error;
  std::vector<std::pair<double, uint64_t>> buckets;  // le -> cumulative count (+Inf: 1e300)
  uint64_t count = 0;
  double sum = 0;
  double overruns = -1;
  double ring_drops = -1;
  std::map<std::string, double> resolution;  // group -> seconds
  std::map<std::string, double> read_cost;   // device -> seconds
};

Scrape ScrapeMetrics(int port);
std::string BucketQuantile(const Scrape& s, double q);
uint64_t CountAbove(const Scrape& s, double bound);

// ---- runs (bench_agent_runs.cc) ------------------------------------------------------------

struct AgentRun {
  bool ok = false;
  Recorded fast, slow, base;  // base: the baseline loop running alongside the agent
  bool have_slow = false, have_base = false;
  Scrape metrics;
  size_t ports = 0, fast_counters = 0, slow_counters = 0, ethtool_counters = 0;
  std::vector<std::string> notes;
};

// All rounds of one agent configuration.
struct Config {
  int64_t slow_ns = 0;
  int slow_nice = 0;
  std::string label;
  std::vector<AgentRun> runs;
  ThreadResult fast, slow, base;
};

bool RunBaseline(double seconds, Recorded* out);
AgentRun RunAgent(const FakeNode& node, BenchNetns* ns, int64_t slow_ns, int slow_nice,
                  double seconds);
void DigestConfig(Config& c);

}  // namespace fabricscope::bench
