// fabricscope_bench_agent: the runs: the bare baseline loop alone, and the agent with a baseline
// loop alongside, each recorded through the interposed wrappers.

#include <pthread.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "collectors/clock.h"
#include "tests/bench/bench_agent.h"
#include "tests/bench/bench_common.h"
#include "tests/bench/bench_node.h"

namespace fabricscope::bench {

// ---- runs ----------------------------------------------------------------------------------

namespace {

int64_t TaskCpuNs(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/schedstat");
  long long on_cpu = -1;
  if (in >> on_cpu) return on_cpu;
  return -1;
}

// A bare clock_nanosleep(TIMER_ABSTIME) loop at 1 ms with the sampler's deadline logic and timer
// slack and no reads, in a thread named fs-bench-base, until *stop (or `seconds`).
void BaselineLoop(double seconds, const std::atomic<bool>* stop, int64_t* cpu_out) {
  pthread_setname_np(pthread_self(), "fs-bench-base");
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  const int64_t start = collectors::MonotonicNowNs();
  const int64_t end = start + static_cast<int64_t>(seconds * 1e9);
  int64_t deadline = start + kPeriodNs;
  int64_t now = start;
  while (now < end && !(stop && stop->load(std::memory_order_relaxed))) {
    timespec ts{static_cast<time_t>(deadline / 1'000'000'000),
                static_cast<long>(deadline % 1'000'000'000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
    now = collectors::MonotonicNowNs();
    deadline += kPeriodNs;
    if (deadline <= now) deadline += ((now - deadline) / kPeriodNs + 1) * kPeriodNs;
  }
  timespec c;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c);
  *cpu_out = static_cast<int64_t>(c.tv_sec) * 1'000'000'000 + c.tv_nsec;
}

size_t Capacity(double seconds) {
  return static_cast<size_t>(seconds * 1e9 / kPeriodNs * 1.2) + 1000;
}

// The recorded fs-sampler thread that reads the most files per tick so far (the slow group), or 0.
pid_t FindSlowSampler() {
  pid_t best = 0;
  double most = -1;
  const int claimed = std::min(rec::g_claimed.load(), rec::kMaxThreads);
  for (int i = 0; i < claimed; ++i) {
    const rec::ThreadLog& l = rec::g_logs[i];
    const pid_t tid = l.tid.load(std::memory_order_acquire);
    if (tid == 0 || std::strcmp(l.name, "fs-sampler") != 0) continue;
    const size_t n = l.n.load(std::memory_order_acquire);
    std::vector<double> preads;
    for (size_t k = 1; k < n; ++k) preads.push_back(l.wakes[k].preads);
    const double m = Median(preads);
    if (n > 1 && m > most) {
      most = m;
      best = tid;
    }
  }
  return best;
}

}  // namespace

// The baseline alone: nothing else of this process runs.
bool RunBaseline(double seconds, Recorded* out) {
  rec::Arm(Capacity(seconds));
  int64_t cpu = -1;
  const int64_t start = collectors::MonotonicNowNs();
  std::thread th(BaselineLoop, seconds, nullptr, &cpu);
  th.join();
  const int64_t wall = collectors::MonotonicNowNs() - start;
  rec::Disarm();
  std::vector<Recorded> logs = TakeLogs({cpu}, wall);
  if (logs.empty()) return false;
  *out = std::move(logs[0]);
  return true;
}

// slow_nice != 0: 0.2 s after Start, the slow sampler thread gets that nice value
// (setpriority on its tid; a what-if for giving the slow group a lower CPU priority, which the
// agent does not do itself).
AgentRun RunAgent(const FakeNode& node, BenchNetns* ns, int64_t slow_ns, int slow_nice,
                  double seconds) {
  AgentRun r;
  agent::AgentOptions o;
  o.node = "bench";
  o.sysfs_root = node.sysfs_root;
  o.procfs_root = node.procfs_root;
  o.http_listen = "127.0.0.1:0";
  o.sample_period_ns = kPeriodNs;
  o.slow_sample_period_ns = slow_ns;

  absl::StatusOr<std::unique_ptr<agent::Agent>> a = absl::UnknownError("not created");
  std::string why;
  if (ns == nullptr || !ns->Within([&] { a = agent::Agent::Create(o); }, &why)) {
    if (ns != nullptr) std::printf("  setns failed (%s); agent created outside\n", why.c_str());
    a = agent::Agent::Create(o);
  }
  if (!a.ok()) {
    std::printf("  Agent::Create: %s\n", a.status().ToString().c_str());
    return r;
  }
  agent::Agent& ag = **a;
  r.notes = ag.notes();
  r.ports = ag.ports().size();
  for (const auto& p : ag.ports()) {
    for (const auto& c : p.counters) {
      const bool fast =
          (c.group == "counters" || c.group == "statistics") && collectors::IsTrafficRole(c.role);
      (fast ? r.fast_counters : r.slow_counters)++;
      r.ethtool_counters += c.group == "ethtool";
    }
  }

  rec::Arm(Capacity(seconds));
  const int64_t start = collectors::MonotonicNowNs();
  if (absl::Status s = ag.Start(); !s.ok()) {
    rec::Disarm();
    std::printf("  Agent::Start: %s\n", s.ToString().c_str());
    return r;
  }
  std::atomic<bool> stop_base{false};
  int64_t base_cpu = -1;
  std::thread base(BaselineLoop, seconds + 10, &stop_base, &base_cpu);
  if (slow_nice != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const pid_t slow_tid = FindSlowSampler();
    if (slow_tid == 0 || setpriority(PRIO_PROCESS, static_cast<id_t>(slow_tid), slow_nice) != 0) {
      std::printf("  [could not renice the slow sampler thread: %s]\n",
                  slow_tid == 0 ? "not found" : strerror(errno));
    }
  }
  std::this_thread::sleep_until(std::chrono::steady_clock::time_point(
      std::chrono::nanoseconds(start + static_cast<int64_t>(seconds * 1e9))));
  // CPU time of the recorded sampler threads while they are alive, then the agent's own view.
  std::vector<int64_t> cpu(rec::kMaxThreads, -1);
  const int claimed = std::min(rec::g_claimed.load(), rec::kMaxThreads);
  for (int i = 0; i < claimed; ++i) {
    const pid_t tid = rec::g_logs[i].tid.load(std::memory_order_acquire);  // then name is set
    if (tid != 0 && std::strcmp(rec::g_logs[i].name, "fs-sampler") == 0) cpu[i] = TaskCpuNs(tid);
  }
  const int64_t wall = collectors::MonotonicNowNs() - start;
  stop_base.store(true);
  base.join();
  r.metrics = ScrapeMetrics(ag.http_port());
  ag.Stop();
  rec::Disarm();
  for (int i = 0; i < claimed; ++i) {
    if (std::strcmp(rec::g_logs[i].name, "fs-bench-base") == 0) cpu[i] = base_cpu;
  }

  std::vector<Recorded> logs = TakeLogs(cpu, wall);
  std::vector<Recorded> samplers;
  for (Recorded& l : logs) {
    if (l.name == "fs-bench-base") {
      r.base = std::move(l);
      r.have_base = true;
    } else {
      samplers.push_back(std::move(l));
    }
  }
  if (samplers.empty()) {
    std::printf("  no sampler thread was recorded (clock_nanosleep interposition not active?)\n");
    return r;
  }
  // The fast thread: the one at the sample period that reads the fewest files per tick.
  std::sort(samplers.begin(), samplers.end(), [](const Recorded& x, const Recorded& y) {
    if ((x.period == kPeriodNs) != (y.period == kPeriodNs)) return x.period == kPeriodNs;
    return x.preads_median < y.preads_median;
  });
  r.fast = std::move(samplers[0]);
  if (samplers.size() > 1) {
    r.slow = std::move(samplers[1]);
    r.have_slow = true;
  }
  r.ok = true;
  return r;
}

void DigestConfig(Config& c) {
  std::vector<const Recorded*> f, s, b;
  for (const AgentRun& r : c.runs) {
    if (!r.ok) continue;
    f.push_back(&r.fast);
    if (r.have_slow) s.push_back(&r.slow);
    if (r.have_base) b.push_back(&r.base);
  }
  c.fast = Digest(f);
  c.slow = Digest(s);
  c.base = Digest(b);
}

}  // namespace fabricscope::bench
