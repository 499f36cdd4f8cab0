// fabricscope_bench_interval: runs agent::Sampler on 16 counters with a SpscSlotRing and a
// consumer thread draining it (as the agent's pipeline thread does: drain, else sleep 1 ms), at
// 1 ms and at 100 us, and prints the achieved interval p50/p99/max (from the drained ticks'
// TickHeader::t_ns), overruns, ring drops and sampler thread CPU use.
//
// Baseline, same run, same period: a bare clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME) loop
// with no reads and the same timer slack and deadline logic as the sampler, so the figures can be
// read against what this machine's timer allows.
//
// Flags: --seconds=S (per run, default 3), --tree=sysfs|tmpfs|regular-file (default: sysfs when
// this machine has 16 netdev counter files, else tmpfs), --periods_us=1000,100, --under-load
// (then the 100 us sampler under 2 x nproc spinning threads, unpinned and normal, pinned
// (--sampler-cpu), SCHED_FIFO 10 (--sampler-priority) and both, against the bare timer loop).

#include <pthread.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/sampler.h"
#include "agent/tick.h"
#include "collectors/clock.h"
#include "collectors/spsc_ring.h"
#include "collectors/sysfs_collector.h"
#include "tests/bench/bench_common.h"

namespace fabricscope::bench {
namespace {

using collectors::MonotonicNowNs;

int64_t ThreadCpuNs() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// CPU time of thread `tid` of this process in ns from /proc (schedstat: ns on CPU; falls back to
// stat utime+stime in clock ticks). -1 when unreadable.
int64_t TaskCpuNs(pid_t tid) {
  const std::string base = "/proc/self/task/" + std::to_string(tid);
  {
    std::ifstream in(base + "/schedstat");
    long long on_cpu = -1;
    if (in >> on_cpu && on_cpu >= 0) return on_cpu;
  }
  std::ifstream in(base + "/stat");
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t rp = s.rfind(')');
  if (rp == std::string::npos) return -1;
  std::vector<std::string> f;
  size_t i = rp + 2;
  while (i < s.size()) {
    const size_t j = s.find(' ', i);
    f.push_back(s.substr(i, j == std::string::npos ? std::string::npos : j - i));
    if (j == std::string::npos) break;
    i = j + 1;
  }
  if (f.size() < 13) return -1;  // fields 14/15 of stat are f[11], f[12] after the comm
  const long hz = sysconf(_SC_CLK_TCK);
  return (std::atoll(f[11].c_str()) + std::atoll(f[12].c_str())) * (1'000'000'000 / hz);
}

// The thread of this process named `name`, or 0.
pid_t FindThread(const std::string& name) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    std::ifstream in(e.path() / "comm");
    std::string comm;
    std::getline(in, comm);
    if (comm == name) return static_cast<pid_t>(std::atoi(e.path().filename().c_str()));
  }
  return 0;
}

struct IntervalStats {
  size_t n = 0;
  int64_t p50 = 0, p99 = 0, max = 0, min = 0;
  double mean = 0;
};

IntervalStats Stats(std::vector<int64_t> v) {
  IntervalStats s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.n = v.size();
  s.p50 = PercentileSorted(v, 50);
  s.p99 = PercentileSorted(v, 99);
  s.max = v.back();
  s.min = v.front();
  double sum = 0;
  for (int64_t x : v) sum += static_cast<double>(x);
  s.mean = sum / static_cast<double>(v.size());
  return s;
}

std::string Us(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", static_cast<double>(ns) / 1e3);
  return buf;
}

struct BaselineResult {
  IntervalStats iv;
  uint64_t ticks = 0;
  uint64_t overruns = 0;
  double cpu_pct = 0;
};

// The sampler's loop with the reads and the ring taken out.
BaselineResult RunBaseline(int64_t period, double seconds) {
  BaselineResult r;
  std::vector<int64_t> t;
  t.reserve(static_cast<size_t>(seconds * 1e9 / static_cast<double>(period) * 1.2) + 16);
  std::thread th([&] {
    pthread_setname_np(pthread_self(), "fs-bench-base");
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
    const int64_t start = MonotonicNowNs();
    const int64_t cpu0 = ThreadCpuNs();
    const int64_t end = start + static_cast<int64_t>(seconds * 1e9);
    int64_t deadline = start + period;
    int64_t now = start;
    while (now < end) {
      timespec ts{static_cast<time_t>(deadline / 1'000'000'000),
                  static_cast<long>(deadline % 1'000'000'000)};
      while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
      }
      now = MonotonicNowNs();
      if (now - deadline > period) ++r.overruns;
      if (t.size() < t.capacity()) t.push_back(now);
      deadline += period;
      if (deadline <= now) deadline += ((now - deadline) / period + 1) * period;
    }
    r.cpu_pct = 100.0 * static_cast<double>(ThreadCpuNs() - cpu0) /
                static_cast<double>(MonotonicNowNs() - start);
  });
  th.join();
  std::vector<int64_t> iv;
  for (size_t i = 1; i < t.size(); ++i) iv.push_back(t[i] - t[i - 1]);
  r.ticks = t.size();
  r.iv = Stats(std::move(iv));
  return r;
}

struct SamplerResult {
  IntervalStats iv;
  uint64_t ticks = 0;
  uint64_t drained = 0;
  uint64_t overruns = 0;
  uint64_t ring_drops = 0;
  uint64_t tick_gaps = 0;    // drained tick numbers that skip (ring drops seen by the consumer)
  uint64_t read_errors = 0;  // counters not kOk in drained ticks
  double wall_s = 0;
  int64_t api_cpu_ns = 0;          // Sampler::cpu_ns() just before Stop()
  double api_cpu_pct_wall = 0;     // api_cpu_ns / whole wall time
  double api_cpu_pct_refresh = 0;  // api_cpu_ns / wall time up to the tick it was refreshed at
  double proc_cpu_pct = -1;        // /proc/self/task/<tid> CPU time / wall time
};

SamplerResult RunSampler(const CounterTree& tree, int64_t period, double seconds,
                         agent::ThreadSched sched = {}) {
  SamplerResult r;
  auto col = collectors::SysfsCounterCollector::Open(tree.ports);
  if (!col.ok()) {
    std::fprintf(stderr, "SysfsCounterCollector::Open: %s\n", col.status().ToString().c_str());
    std::exit(1);
  }
  agent::TickLayout layout{(*col)->counter_count()};
  collectors::SpscSlotRing ring(8192, layout.slot_bytes());  // the agent's default ring_slots

  struct Drained {
    int64_t t_ns;
    uint64_t tick;
  };
  std::vector<Drained> drained;
  drained.reserve(static_cast<size_t>(seconds * 1e9 / static_cast<double>(period) * 1.2) + 1024);
  std::atomic<bool> stop_consumer{false};
  std::thread consumer([&] {
    pthread_setname_np(pthread_self(), "fs-bench-cons");
    while (true) {
      const bool stopping = stop_consumer.load(std::memory_order_acquire);
      bool any = false;
      while (const void* slot = ring.Peek()) {
        const agent::TickHeader* h = agent::TickLayout::header(slot);
        const collectors::ReadStatus* st = layout.status(slot);
        for (size_t i = 0; i < layout.counters; ++i) {
          r.read_errors += st[i] != collectors::ReadStatus::kOk;
        }
        if (drained.size() < drained.capacity()) drained.push_back({h->t_ns, h->tick});
        ring.Pop();
        any = true;
      }
      if (stopping) break;
      if (!any) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // as the agent
    }
  });

  agent::Sampler sampler({col->get()}, ring, layout, agent::SamplerOptions{period, sched});
  const int64_t start = MonotonicNowNs();
  if (absl::Status st = sampler.Start(); !st.ok()) {
    std::fprintf(stderr, "sampler: %s\n", std::string(st.message()).c_str());
    stop_consumer.store(true, std::memory_order_release);
    consumer.join();
    r.wall_s = -1;
    return r;
  }
  pid_t tid = 0;
  for (int i = 0; i < 200 && tid == 0; ++i) {
    tid = FindThread("fs-sampler");
    if (tid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::nanoseconds(static_cast<int64_t>(seconds * 1e9)));
  const int64_t proc_cpu = tid != 0 ? TaskCpuNs(tid) : -1;
  const int64_t before_stop = MonotonicNowNs();
  r.api_cpu_ns = sampler.cpu_ns();
  const uint64_t ticks_at_cpu_read = sampler.ticks();
  sampler.Stop();
  r.ticks = sampler.ticks();
  stop_consumer.store(true, std::memory_order_release);
  consumer.join();
  r.overruns = sampler.overruns();
  r.ring_drops = ring.dropped();
  r.drained = drained.size();
  r.wall_s = static_cast<double>(before_stop - start) / 1e9;

  std::vector<int64_t> iv;
  for (size_t i = 1; i < drained.size(); ++i) {
    if (drained[i].tick == drained[i - 1].tick + 1) {
      iv.push_back(drained[i].t_ns - drained[i - 1].t_ns);
    } else {
      ++r.tick_gaps;
    }
  }
  r.iv = Stats(std::move(iv));
  const double wall_ns = static_cast<double>(before_stop - start);
  r.api_cpu_pct_wall = 100.0 * static_cast<double>(r.api_cpu_ns) / wall_ns;
  // Sampler::Run refreshes cpu_ns_ after tick numbers 1023, 2047, ...: find the last such tick's
  // start time among the drained ticks.
  if (ticks_at_cpu_read >= 1024) {
    const uint64_t last_refresh_tick = (ticks_at_cpu_read / 1024) * 1024 - 1;
    for (const Drained& d : drained) {
      if (d.tick == last_refresh_tick) {
        r.api_cpu_pct_refresh =
            100.0 * static_cast<double>(r.api_cpu_ns) / static_cast<double>(d.t_ns - start);
      }
    }
  }
  if (proc_cpu >= 0) {
    r.proc_cpu_pct =
        100.0 * static_cast<double>(proc_cpu) / static_cast<double>(before_stop - start);
  }
  return r;
}

double Ratio(int64_t a, int64_t b) {
  return b > 0 ? static_cast<double>(a) / static_cast<double>(b) : 0;
}

// A busy node: `n` threads that spin at normal priority (a training job's data loaders and
// host-side work), running until the returned flag is set and the threads joined.
struct Load {
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  explicit Load(unsigned n) {
    for (unsigned i = 0; i < n; ++i) {
      threads.emplace_back([this] {
        volatile uint64_t x = 0;
        while (!stop.load(std::memory_order_relaxed)) x = x + 1;
      });
    }
  }
  ~Load() {
    stop.store(true);
    for (std::thread& t : threads) t.join();
  }
};

// The 100 us sampler under load, with and without --sampler-cpu and --sampler-priority, in one
// run; the bare timer loop without load is the baseline. SCHED_FIFO needs CAP_SYS_NICE (root
// here); without it those rows say so.
void UnderLoad(const CounterTree& tree, double seconds) {
  const int64_t period = 100'000;
  const unsigned hogs = 2 * std::max(1u, std::thread::hardware_concurrency());
  const BaselineResult idle = RunBaseline(period, seconds);
  std::printf("--- period 100 us under load: %u spinning threads at normal priority ---\n", hogs);
  std::printf("baseline clock_nanosleep loop, no load: %.1f ticks/s, interval p99=%s us\n",
              static_cast<double>(idle.ticks) / seconds, Us(idle.iv.p99).c_str());
  const int last_cpu = static_cast<int>(std::thread::hardware_concurrency()) - 1;
  const agent::ThreadSched configs[] = {{-1, 0}, {last_cpu, 0}, {-1, 10}, {last_cpu, 10}};
  Load load(hogs);
  const BaselineResult loaded = RunBaseline(period, seconds);
  std::printf("baseline clock_nanosleep loop, loaded: %.1f ticks/s, interval p99=%s us\n",
              static_cast<double>(loaded.ticks) / seconds, Us(loaded.iv.p99).c_str());
  for (const agent::ThreadSched& c : configs) {
    const SamplerResult s = RunSampler(tree, period, seconds, c);
    const std::string what = agent::DescribeThreadSched(c);
    if (s.wall_s <= 0) {
      std::printf("sampler, %-28s refused (above)\n", what.c_str());
      continue;
    }
    const double rate = static_cast<double>(s.ticks) / s.wall_s;
    std::printf(
        "sampler, %-28s %.1f ticks/s (%.2fx the idle baseline's), interval p99=%s us "
        "(%.2fx), max=%s us, overruns=%llu\n",
        (what + ":").c_str(), rate, rate / (static_cast<double>(idle.ticks) / seconds),
        Us(s.iv.p99).c_str(), Ratio(s.iv.p99, idle.iv.p99), Us(s.iv.max).c_str(),
        static_cast<unsigned long long>(s.overruns));
  }
  std::printf("\n");
}

}  // namespace
}  // namespace fabricscope::bench

int main(int argc, char** argv) {
  using namespace fabricscope::bench;
  double seconds = 3;
  std::string tree_name;
  std::vector<int64_t> periods_us = {1000, 100};
  bool under_load = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--seconds=", 0) == 0) {
      seconds = std::atof(a.c_str() + 10);
    } else if (a.rfind("--tree=", 0) == 0) {
      tree_name = a.substr(7);
    } else if (a == "--under-load") {
      under_load = true;
    } else if (a.rfind("--periods_us=", 0) == 0) {
      periods_us.clear();
      std::string list = a.substr(13);
      size_t pos = 0;
      while (pos <= list.size()) {
        const size_t comma = list.find(',', pos);
        const std::string item =
            list.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
        if (!item.empty()) periods_us.push_back(std::atoll(item.c_str()));
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: %s [--seconds=3] [--tree=sysfs|tmpfs|regular-file] "
                   "[--periods_us=1000,100] [--under-load]\n",
                   argv[0]);
      return 2;
    }
  }
  if (seconds <= 0) seconds = 3;

  PrintMachine();
  {
    std::ifstream la("/proc/loadavg");
    std::string l;
    std::getline(la, l);
    std::printf("loadavg at start: %s\n", l.c_str());
  }
  std::vector<CounterTree> trees = AllTrees();
  const CounterTree* tree = nullptr;
  for (const CounterTree& t : trees) {
    if (tree_name.empty() ? t.label == "sysfs" : t.label == tree_name) tree = &t;
  }
  if (tree == nullptr && tree_name.empty() && !trees.empty()) tree = &trees.front();
  if (tree == nullptr) {
    std::fprintf(stderr, "no counter tree \"%s\" on this machine\n", tree_name.c_str());
    return 1;
  }
  std::printf("tree: %s (%zu counters, fs=%s): %s\n", tree->label.c_str(), tree->counters(),
              tree->fs.c_str(), tree->where.c_str());
  std::printf("%.1f s per run; ring 8192 slots; consumer drains, else sleeps 1 ms\n\n", seconds);

  for (int64_t pus : periods_us) {
    const int64_t period = pus * 1000;
    const BaselineResult b = RunBaseline(period, seconds);
    const SamplerResult s = RunSampler(*tree, period, seconds);
    std::printf("--- period %lld us ---\n", static_cast<long long>(pus));
    std::printf(
        "baseline clock_nanosleep loop: ticks=%llu  interval p50=%s us p99=%s us max=%s us "
        "min=%s us  overruns=%llu  thread cpu=%.2f%% of one core\n",
        static_cast<unsigned long long>(b.ticks), Us(b.iv.p50).c_str(), Us(b.iv.p99).c_str(),
        Us(b.iv.max).c_str(), Us(b.iv.min).c_str(), static_cast<unsigned long long>(b.overruns),
        b.cpu_pct);
    std::printf(
        "sampler (16 counters):         ticks=%llu  interval p50=%s us p99=%s us max=%s us "
        "min=%s us  overruns=%llu  ring drops=%llu  tick gaps=%llu  drained=%llu  "
        "read errors=%llu\n",
        static_cast<unsigned long long>(s.ticks), Us(s.iv.p50).c_str(), Us(s.iv.p99).c_str(),
        Us(s.iv.max).c_str(), Us(s.iv.min).c_str(), static_cast<unsigned long long>(s.overruns),
        static_cast<unsigned long long>(s.ring_drops), static_cast<unsigned long long>(s.tick_gaps),
        static_cast<unsigned long long>(s.drained), static_cast<unsigned long long>(s.read_errors));
    std::printf(
        "achieved rate: sampler %.1f ticks/s, baseline %.1f ticks/s, nominal %.1f ticks/s\n",
        static_cast<double>(s.ticks) / s.wall_s, static_cast<double>(b.ticks) / seconds,
        1e9 / static_cast<double>(period));
    std::printf("ratio sampler/baseline: p50 %.3f  p99 %.3f  max %.3f\n", Ratio(s.iv.p50, b.iv.p50),
                Ratio(s.iv.p99, b.iv.p99), Ratio(s.iv.max, b.iv.max));
    std::printf(
        "sampler thread cpu: Sampler::cpu_ns()=%.1f ms over %.2f s wall = %.2f%% of one core; "
        "over the wall time up to cpu_ns()'s last refresh = %.2f%%; /proc task cpu time = %.2f%% "
        "(baseline loop: %.2f%%)\n\n",
        static_cast<double>(s.api_cpu_ns) / 1e6, s.wall_s, s.api_cpu_pct_wall,
        s.api_cpu_pct_refresh, s.proc_cpu_pct, b.cpu_pct);
    std::fflush(stdout);
  }
  if (under_load) UnderLoad(*tree, seconds);
  return 0;
}
