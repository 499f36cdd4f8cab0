// fabricscope_bench_sampler: cost of one counter read by SysfsCounterCollector::Sample() on 16
// counter files, against a bare pread(fd, buf, 64, 0) + parse loop over the same 16 files opened
// once, measured in the same run. Trees: this machine's /sys/class/net/*/statistics (read only),
// and copies of tests/testdata's mlx5_0 RDMA counters on tmpfs (/dev/shm) and on a regular file
// system ($TMPDIR or /tmp).
//
// Google Benchmark flags work as usual. Defaults added unless given:
//   --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
//   --benchmark_min_time=0.1
// After the runs it prints, per tree, the median ns per counter read and the ratio
// collector / bare (real time and CPU time).

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "collectors/counter.h"
#include "collectors/sysfs_collector.h"
#include "tests/bench/bench_common.h"

namespace fabricscope::bench {
namespace {

using collectors::ReadStatus;
using collectors::SysfsCounterCollector;

struct OpenFiles {
  std::vector<int> fds;
  explicit OpenFiles(const std::vector<std::string>& paths) {
    for (const std::string& p : paths) {
      const int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) fds.push_back(fd);
    }
  }
  ~OpenFiles() {
    for (int fd : fds) close(fd);
  }
};

void SetPerRead(benchmark::State& state, size_t n) {
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
  state.counters["ns_per_read"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(n),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  // kIsRate|kInvert gives seconds per read; the summary below prints ns.
}

// Baseline: the least a sampler can do per counter.
void BareReadParse(benchmark::State& state, const CounterTree* tree) {
  OpenFiles files(tree->paths());
  if (files.fds.size() != kCounters) {
    state.SkipWithError("could not open every counter file");
    return;
  }
  char buf[64];
  uint64_t values[kCounters] = {};
  for (auto _ : state) {
    for (size_t i = 0; i < files.fds.size(); ++i) {
      const ssize_t n = pread(files.fds[i], buf, sizeof(buf), 0);
      if (n > 0) std::from_chars(buf, buf + n, values[i]);
    }
    benchmark::DoNotOptimize(values);
    benchmark::ClobberMemory();
  }
  SetPerRead(state, files.fds.size());
}

// The floor under any read: 16 null system calls (getppid), so that the per-read figures can be
// read against this machine's syscall cost (VMs and mitigations make it vary by 10x).
void NullSyscalls(benchmark::State& state) {
  for (auto _ : state) {
    for (size_t i = 0; i < kCounters; ++i) benchmark::DoNotOptimize(syscall(SYS_getppid));
  }
  SetPerRead(state, kCounters);
}

// Same loop with the project's parser, to split collector overhead from parser cost.
void BareReadProjectParse(benchmark::State& state, const CounterTree* tree) {
  OpenFiles files(tree->paths());
  if (files.fds.size() != kCounters) {
    state.SkipWithError("could not open every counter file");
    return;
  }
  char buf[64];
  uint64_t values[kCounters] = {};
  ReadStatus status[kCounters] = {};
  for (auto _ : state) {
    for (size_t i = 0; i < files.fds.size(); ++i) {
      const ssize_t n = pread(files.fds[i], buf, sizeof(buf), 0);
      status[i] = n > 0 ? collectors::ParseCounterText(
                              absl::string_view(buf, static_cast<size_t>(n)), &values[i])
                        : ReadStatus::kError;
    }
    benchmark::DoNotOptimize(values);
    benchmark::DoNotOptimize(status);
    benchmark::ClobberMemory();
  }
  SetPerRead(state, files.fds.size());
}

// Self-reported read cost (Collector::ReadCostNs, mean over counters) of the last collector
// run on each tree, to compare with the measured figure.
std::map<std::string, double> g_self_reported_ns;

void CollectorSample(benchmark::State& state, const CounterTree* tree) {
  auto c = SysfsCounterCollector::Open(tree->ports);
  if (!c.ok() || (*c)->counter_count() != kCounters) {
    state.SkipWithError("SysfsCounterCollector::Open did not open 16 counters");
    return;
  }
  SysfsCounterCollector& col = **c;
  uint64_t values[kCounters] = {};
  ReadStatus status[kCounters] = {};
  uint64_t tick = 1;  // as the sampler: every kCostTickStride-th tick also times its reads
  for (auto _ : state) {
    col.Sample(tick++, values, status);
    benchmark::DoNotOptimize(values);
    benchmark::DoNotOptimize(status);
    benchmark::ClobberMemory();
  }
  for (size_t i = 0; i < kCounters; ++i) {
    if (status[i] != ReadStatus::kOk) {
      state.SkipWithError("a counter did not read kOk");
      return;
    }
  }
  double sum = 0;
  for (size_t i = 0; i < kCounters; ++i) sum += col.ReadCostNs(i);
  g_self_reported_ns[tree->label] = sum / kCounters;
  SetPerRead(state, kCounters);
}

}  // namespace
}  // namespace fabricscope::bench

int main(int argc, char** argv) {
  using namespace fabricscope::bench;
  std::vector<std::string> storage;
  std::vector<char*> args =
      WithDefaultFlags(argc, argv,
                       {"--benchmark_repetitions=5", "--benchmark_enable_random_interleaving=true",
                        "--benchmark_min_time=0.1"},
                       storage);
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;

  PrintMachine();
  std::vector<CounterTree> trees = AllTrees();
  for (const CounterTree& t : trees) {
    std::printf("tree %-12s %zu counters, fs=%s: %s\n", t.label.c_str(), t.counters(), t.fs.c_str(),
                t.where.c_str());
  }
  benchmark::RegisterBenchmark("null_syscall", NullSyscalls);
  for (const CounterTree& t : trees) {
    const CounterTree* tp = &t;
    benchmark::RegisterBenchmark(("bare_pread_parse/" + t.label).c_str(),
                                 [tp](benchmark::State& s) { BareReadParse(s, tp); });
    benchmark::RegisterBenchmark(("bare_pread_ParseCounterText/" + t.label).c_str(),
                                 [tp](benchmark::State& s) { BareReadProjectParse(s, tp); });
    benchmark::RegisterBenchmark(("collector_sample/" + t.label).c_str(),
                                 [tp](benchmark::State& s) { CollectorSample(s, tp); });
  }

  RecordingReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);

  std::printf("\n=== sampler read cost summary (median of repetitions, per counter read) ===\n");
  std::printf("%-13s %10s %10s %10s | %12s %12s | %10s\n", "tree", "bare ns", "bare+PCT",
              "collector", "coll/bare", "coll/bare", "self-rep.");
  std::printf("%-13s %10s %10s %10s | %12s %12s | %10s\n", "", "(real)", "ns (real)", "ns (real)",
              "(real)", "(cpu)", "ns");
  for (const CounterTree& t : trees) {
    const std::string b = "bare_pread_parse/" + t.label;
    const std::string p = "bare_pread_ParseCounterText/" + t.label;
    const std::string c = "collector_sample/" + t.label;
    if (!reporter.has(b) || !reporter.has(c)) continue;
    const double k = static_cast<double>(kCounters);
    const double bare = reporter.MedianNs(b) / k, coll = reporter.MedianNs(c) / k;
    const double pct = reporter.has(p) ? reporter.MedianNs(p) / k : 0;
    const double bare_cpu = reporter.MedianNs(b, true) / k,
                 coll_cpu = reporter.MedianNs(c, true) / k;
    const double self = g_self_reported_ns.count(t.label) ? g_self_reported_ns[t.label] : 0;
    std::printf("%-13s %10.1f %10.1f %10.1f | %12.3f %12.3f | %10.1f\n", t.label.c_str(), bare, pct,
                coll, bare > 0 ? coll / bare : 0, bare_cpu > 0 ? coll_cpu / bare_cpu : 0, self);
  }
  const double null_ns = reporter.MedianNs("null_syscall") / static_cast<double>(kCounters);
  if (null_ns > 0) {
    std::printf("%-13s %10.1f ns per null syscall (getppid): collector read / null syscall =",
                "floor", null_ns);
    for (const CounterTree& t : trees) {
      const double c = reporter.MedianNs("collector_sample/" + t.label) / kCounters;
      std::printf(" %s %.1fx", t.label.c_str(), c / null_ns);
    }
    std::printf("\n");
  }
  std::printf(
      "bare = pread(fd, buf, 64, 0) + std::from_chars over the same 16 open files; bare+PCT = same "
      "with collectors::ParseCounterText; collector = SysfsCounterCollector::Sample(); self-rep. = "
      "mean Collector::ReadCostNs() after the last collector run.\n");
  benchmark::Shutdown();
  return 0;
}
