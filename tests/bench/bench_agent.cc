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

#include <httplib.h>
#include <pthread.h>
#include <sys/prctl.h>
#include <sys/resource.h>
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
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/agent.h"
#include "agent/options.h"
#include "collectors/clock.h"
#include "glog/logging.h"
#include "tests/bench/bench_common.h"
#include "tests/bench/bench_node.h"

// ---- interposed system call wrappers -------------------------------------------------------

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
ThreadLog g_logs[kMaxThreads];
std::atomic<int> g_claimed{0};
std::atomic<bool> g_armed{false};
thread_local ThreadLog* t_log = nullptr;
thread_local bool t_checked = false;
thread_local uint32_t t_preads = 0;

inline int64_t Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Called from the wrapper after a successful absolute CLOCK_MONOTONIC sleep.
inline void Record(const timespec* req, int64_t enter, int64_t wake) {
  if (!t_checked) {
    t_checked = true;
    char name[16] = {};
    prctl(PR_GET_NAME, name, 0, 0, 0);
    if (g_armed.load(std::memory_order_acquire) &&
        (std::strcmp(name, "fs-sampler") == 0 || std::strcmp(name, "fs-bench-base") == 0)) {
      const int i = g_claimed.fetch_add(1);
      if (i < kMaxThreads) {
        t_log = &g_logs[i];
        std::memcpy(t_log->name, name, sizeof(name));
        t_log->tid.store(static_cast<pid_t>(syscall(SYS_gettid)), std::memory_order_release);
      }
    }
  }
  const uint32_t preads = t_preads;
  t_preads = 0;
  ThreadLog* log = t_log;
  if (log == nullptr) return;
  const size_t n = log->n.load(std::memory_order_relaxed);
  if (n >= log->cap) return;
  log->wakes[n] =
      Wake{static_cast<int64_t>(req->tv_sec) * 1'000'000'000 + req->tv_nsec, enter, wake, preads};
  log->n.store(n + 1, std::memory_order_release);
}

// Arms recording for threads created from now on; `cap` wake-ups per thread.
void Arm(size_t cap) {
  for (ThreadLog& l : g_logs) {
    delete[] l.wakes;
    l.wakes = new Wake[cap];
    l.cap = cap;
    l.n.store(0);
    l.tid.store(0);
    std::memset(l.name, 0, sizeof(l.name));
  }
  g_claimed.store(0);
  g_armed.store(true, std::memory_order_release);
}
void Disarm() { g_armed.store(false, std::memory_order_release); }

}  // namespace fabricscope::bench::rec

extern "C" {

// glibc semantics: 0 or an error number (errno untouched).
int clock_nanosleep(clockid_t clock, int flags, const struct timespec* req, struct timespec* rem) {
  using namespace fabricscope::bench::rec;
  const int64_t enter = Now();
  const int saved = errno;
  const long r = syscall(SYS_clock_nanosleep, clock, flags, req, rem);
  const int rc = r == 0 ? 0 : errno;
  errno = saved;
  if (rc == 0 && clock == CLOCK_MONOTONIC && (flags & TIMER_ABSTIME) != 0) {
    Record(req, enter, Now());
  }
  return rc;
}

ssize_t pread(int fd, void* buf, size_t count, off_t offset) {
  ++fabricscope::bench::rec::t_preads;
  return syscall(SYS_pread64, fd, buf, count, offset);
}

ssize_t pread64(int fd, void* buf, size_t count, off64_t offset) {
  ++fabricscope::bench::rec::t_preads;
  return syscall(SYS_pread64, fd, buf, count, offset);
}

}  // extern "C"

// ---- the benchmark -------------------------------------------------------------------------

namespace fabricscope::bench {
namespace {

constexpr int kPorts = 8;
constexpr int64_t kPeriodNs = 1'000'000;

std::string Us(double ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", ns / 1e3);
  return buf;
}
std::string Us(int64_t ns) { return Us(static_cast<double>(ns)); }

struct Dist {
  size_t n = 0;
  int64_t p50 = 0, p99 = 0, p999 = 0, max = 0;
};

Dist Distribution(std::vector<int64_t> v) {
  Dist d;
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  d.n = v.size();
  d.p50 = PercentileSorted(v, 50);
  d.p99 = PercentileSorted(v, 99);
  d.p999 = PercentileSorted(v, 99.9);
  d.max = v.back();
  return d;
}

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

int64_t TaskCpuNs(pid_t tid) {
  std::ifstream in("/proc/self/task/" + std::to_string(tid) + "/schedstat");
  long long on_cpu = -1;
  if (in >> on_cpu) return on_cpu;
  return -1;
}

// Copies the claimed logs out (the threads have exited or stopped recording).
std::vector<Recorded> TakeLogs(const std::vector<int64_t>& cpu, int64_t wall) {
  std::vector<Recorded> out;
  const int claimed = std::min(rec::g_claimed.load(), rec::kMaxThreads);
  for (int i = 0; i < claimed; ++i) {
    const rec::ThreadLog& l = rec::g_logs[i];
    Recorded r;
    r.name = l.name;
    r.tid = l.tid.load();
    r.wakes.assign(l.wakes, l.wakes + l.n.load(std::memory_order_acquire));
    r.cpu_ns = i < static_cast<int>(cpu.size()) ? cpu[i] : -1;
    r.wall_ns = wall;
    std::vector<int64_t> steps;
    std::vector<double> preads;
    for (size_t k = 1; k < r.wakes.size(); ++k) {
      steps.push_back(r.wakes[k].deadline - r.wakes[k - 1].deadline);
      preads.push_back(r.wakes[k].preads);
    }
    if (!steps.empty()) {
      std::sort(steps.begin(), steps.end());
      r.period = steps[steps.size() / 2];
    }
    r.preads_median = Median(preads);
    out.push_back(std::move(r));
  }
  return out;
}

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

ThreadResult Digest(const std::vector<const Recorded*>& runs) {
  ThreadResult r;
  std::vector<int64_t> iv, late, work;
  int64_t cpu = 0, wall = 0;
  bool cpu_ok = true;
  for (const Recorded* rr : runs) {
    ++r.runs;
    r.period = rr->period;
    r.ticks += rr->wakes.size();
    for (size_t i = 0; i < rr->wakes.size(); ++i) {
      const rec::Wake& w = rr->wakes[i];
      const int64_t l = w.wake - w.deadline;
      late.push_back(l);
      r.overruns += rr->period > 0 && l > rr->period;
      if (i == 0) continue;
      const rec::Wake& p = rr->wakes[i - 1];
      iv.push_back(w.wake - p.wake);
      r.over_1_2 += (w.wake - p.wake) * 5 > rr->period * 6;
      work.push_back(w.enter - p.wake);
      ++r.preads_hist[w.preads];
    }
    if (rr->cpu_ns < 0) cpu_ok = false;
    cpu += rr->cpu_ns;
    wall += rr->wall_ns;
  }
  r.interval = Distribution(std::move(iv));
  r.late = Distribution(std::move(late));
  r.work = Distribution(std::move(work));
  if (cpu_ok && wall > 0) r.cpu_pct = 100.0 * static_cast<double>(cpu) / static_cast<double>(wall);
  return r;
}

double P99Ratio(const ThreadResult& t, double denom_ns) {
  return denom_ns > 0 ? static_cast<double>(t.interval.p99) / denom_ns : 0;
}

void PrintThread(const char* label, const ThreadResult& t) {
  if (t.empty()) {
    std::printf("  %-24s (not recorded)\n", label);
    return;
  }
  std::printf(
      "  %-24s ticks=%zu period=%s us | interval p50=%s p99=%s p99.9=%s max=%s us | "
      "p99/nominal=%.3f | overruns=%llu, intervals >1.2x=%llu | late p50=%s p99=%s max=%s us | "
      "tick work p50=%s p99=%s max=%s us | cpu=%.1f%% of a core\n",
      label, t.ticks, Us(t.period).c_str(), Us(t.interval.p50).c_str(), Us(t.interval.p99).c_str(),
      Us(t.interval.p999).c_str(), Us(t.interval.max).c_str(),
      P99Ratio(t, static_cast<double>(t.period)), static_cast<unsigned long long>(t.overruns),
      static_cast<unsigned long long>(t.over_1_2), Us(t.late.p50).c_str(), Us(t.late.p99).c_str(),
      Us(t.late.max).c_str(), Us(t.work.p50).c_str(), Us(t.work.p99).c_str(),
      Us(t.work.max).c_str(), t.cpu_pct);
}

std::string PreadsSummary(const ThreadResult& t) {
  // The most common counts of preads per tick, e.g. "212 preads in 900 ticks, 404 in 100".
  std::vector<std::pair<size_t, uint32_t>> by_ticks;
  for (const auto& [reads, ticks] : t.preads_hist) by_ticks.emplace_back(ticks, reads);
  std::sort(by_ticks.rbegin(), by_ticks.rend());
  std::string s;
  for (size_t i = 0; i < by_ticks.size() && i < 3; ++i) {
    if (!s.empty()) s += ", ";
    s += std::to_string(by_ticks[i].second) + " preads in " + std::to_string(by_ticks[i].first) +
         " ticks";
  }
  if (by_ticks.size() > 3) s += ", ...";
  return s;
}

// ---- /metrics ------------------------------------------------------------------------------

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

std::string LabelValue(const std::string& line, const std::string& label) {
  const std::string key = label + "=\"";
  const size_t p = line.find(key);
  if (p == std::string::npos) return "";
  const size_t s = p + key.size();
  return line.substr(s, line.find('"', s) - s);
}

double LineValue(const std::string& line) {
  const size_t sp = line.rfind(' ');
  return sp == std::string::npos ? 0 : std::strtod(line.c_str() + sp + 1, nullptr);
}

Scrape ScrapeMetrics(int port) {
  Scrape s;
  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(5, 0);
  auto r = http.Get("/metrics");
  if (!r || r->status != 200) {
    s.error = r ? "HTTP " + std::to_string(r->status) : "no response";
    return s;
  }
  std::istringstream in(r->body);
  std::string line;
  const std::string node = "node=\"bench\"";
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#' || line.find(node) == std::string::npos) continue;
    if (line.rfind("fabricscope_agent_sample_interval_seconds_bucket{", 0) == 0) {
      const std::string le = LabelValue(line, "le");
      const double bound = le == "+Inf" ? 1e300 : std::strtod(le.c_str(), nullptr);
      s.buckets.emplace_back(bound, static_cast<uint64_t>(LineValue(line)));
    } else if (line.rfind("fabricscope_agent_sample_interval_seconds_count{", 0) == 0) {
      s.count = static_cast<uint64_t>(LineValue(line));
    } else if (line.rfind("fabricscope_agent_sample_interval_seconds_sum{", 0) == 0) {
      s.sum = LineValue(line);
    } else if (line.rfind("fabricscope_agent_sampler_overruns_total{", 0) == 0) {
      s.overruns = LineValue(line);
    } else if (line.rfind("fabricscope_agent_ring_dropped_samples_total{", 0) == 0) {
      s.ring_drops = LineValue(line);
    } else if (line.rfind("fabricscope_agent_group_resolution_seconds{", 0) == 0) {
      s.resolution[LabelValue(line, "group")] = LineValue(line);
    } else if (line.rfind("fabricscope_agent_read_cost_seconds{", 0) == 0) {
      s.read_cost[LabelValue(line, "device")] = LineValue(line);
    }
  }
  std::sort(s.buckets.begin(), s.buckets.end());
  s.ok = s.count > 0;
  if (!s.ok) s.error = "no fabricscope_agent_sample_interval_seconds for node bench yet";
  return s;
}

// The bucket holding quantile q, as the agent's status line computes it: "<=B us".
std::string BucketQuantile(const Scrape& s, double q) {
  if (s.count == 0) return "-";
  const double target = q * static_cast<double>(s.count);
  for (size_t i = 0; i < s.buckets.size(); ++i) {
    if (static_cast<double>(s.buckets[i].second) >= target) {
      if (s.buckets[i].first >= 1e300) {
        return i > 0 ? ">" + Us(s.buckets[i - 1].first * 1e9) + " us" : "+Inf";
      }
      return "<=" + Us(s.buckets[i].first * 1e9) + " us";
    }
  }
  return "-";
}

uint64_t CountAbove(const Scrape& s, double bound) {
  uint64_t at_or_below = 0;
  for (const auto& [le, cum] : s.buckets) {
    if (le <= bound + 1e-12) at_or_below = cum;
  }
  return s.count - at_or_below;
}

// ---- runs ----------------------------------------------------------------------------------

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

struct AgentRun {
  bool ok = false;
  Recorded fast, slow, base;  // base: the baseline loop running alongside the agent
  bool have_slow = false, have_base = false;
  Scrape metrics;
  size_t ports = 0, fast_counters = 0, slow_counters = 0, ethtool_counters = 0;
  std::vector<std::string> notes;
};

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

// All rounds of one agent configuration.
struct Config {
  int64_t slow_ns = 0;
  int slow_nice = 0;
  std::string label;
  std::vector<AgentRun> runs;
  ThreadResult fast, slow, base;
};

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

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

}  // namespace
}  // namespace fabricscope::bench

int main(int argc, char** argv) {
  using namespace fabricscope::bench;
  double seconds = 5;
  int rounds = 1;
  // Slow sample periods, each optionally with "+nice": the slow sampler thread reniced to 10.
  std::vector<std::pair<int64_t, int>> slow_periods = {
      {10'000'000, 0}, {1'000'000, 0}, {1'000'000, 10}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--seconds=", 0) == 0) {
      seconds = std::atof(a.c_str() + 10);
    } else if (a.rfind("--rounds=", 0) == 0) {
      rounds = std::max(1, std::atoi(a.c_str() + 9));
    } else if (a.rfind("--configs=", 0) == 0) {
      slow_periods.clear();
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
          return 2;
        }
        slow_periods.emplace_back(*ns, nice);
      }
    } else {
      std::fprintf(stderr, "usage: %s [--seconds=5] [--rounds=1] [--configs=10ms,1ms,1ms+nice]\n",
                   argv[0]);
      return 2;
    }
  }
  if (seconds <= 0) seconds = 5;
  // The agent's INFO lines (e.g. "no ethtool RoCE/PHY statistics on ...") would interleave with
  // the report; what matters of them is printed below. Warnings and errors still show.
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;
  google::InitGoogleLogging(argv[0]);

  PrintMachine();
  {
    std::ifstream la("/proc/loadavg");
    std::string l;
    std::getline(la, l);
    std::printf("loadavg at start: %s\n", l.c_str());
  }
  std::vector<std::string> netdevs;
  for (int i = 0; i < kPorts; ++i) netdevs.push_back("fsb" + std::to_string(i));
  FakeNode node;
  std::string why;
  if (!BuildFakeNode(FakeTreeBase(), netdevs, &node, &why)) {
    std::fprintf(stderr, "fake node: %s\n", why.c_str());
    return 1;
  }
  std::unique_ptr<BenchNetns> ns = BenchNetns::Create(netdevs, &why);
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
      seconds, rounds);
  std::fflush(stdout);

  std::vector<Recorded> baselines;
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
  for (int round = 0; round < rounds; ++round) {
    std::printf("--- round %d/%d: baseline", round + 1, rounds);
    std::fflush(stdout);
    Recorded b;
    if (RunBaseline(seconds, &b)) baselines.push_back(std::move(b));
    for (Config& c : configs) {
      std::printf(", %s", c.label.c_str());
      std::fflush(stdout);
      c.runs.push_back(RunAgent(node, ns.get(), c.slow_ns, c.slow_nice, seconds));
    }
    std::printf("\n");
  }
  std::vector<const Recorded*> bp;
  for (const Recorded& b : baselines) bp.push_back(&b);
  const ThreadResult base = Digest(bp);
  for (Config& c : configs) DigestConfig(c);

  std::printf(
      "\n=== sampler threads at 1 ms (exact, from the interposed clock_nanosleep; all "
      "rounds) ===\n");
  PrintThread("baseline loop, alone", base);
  for (const Config& c : configs) {
    const AgentRun* first = nullptr;
    for (const AgentRun& r : c.runs) {
      if (r.ok && first == nullptr) first = &r;
    }
    std::printf("%s:", c.label.c_str());
    if (first == nullptr) {
      std::printf(" failed, see above\n");
      continue;
    }
    std::printf(
        " %zu ports, %zu fast counters (byte/packet), %zu slow-group counters "
        "(%zu ethtool)%s\n",
        first->ports, first->fast_counters, first->slow_counters, first->ethtool_counters,
        first->ethtool_counters == 0 && ns
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

  std::printf(
      "\n=== summary: 1 ms tick, p99 interval; target fast p99 <= 1.2 x nominal "
      "(1200 us) ===\n");
  std::printf("%-42s %9s %9s %9s %9s %8s %8s %9s %9s\n", "thread", "p50 us", "p99 us", "max us",
              "overruns", ">1.2x", "p99/nom", "p99/base", "p99/base");
  std::printf("%-42s %9s %9s %9s %9s %8s %8s %9s %9s\n", "", "", "", "", "", "", "", "alone",
              "alongside");
  auto row = [&](const std::string& label, const ThreadResult& t, const ThreadResult* along) {
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
  };
  row("baseline loop, alone", base, nullptr);
  for (const Config& c : configs) {
    row(c.label + " fast", c.fast, &c.base);
    row(c.label + " baseline alongside", c.base, nullptr);
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
  // Each configuration against the first (the defaults): does the slow group's load reach the
  // fast tick?
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
  std::printf(
      "overruns = ticks that woke more than one period after their deadline (the "
      "sampler's own rule); >1.2x = intervals longer than 1.2 periods; base alone = the "
      "bare loop with nothing else running, alongside = the same loop running during "
      "that agent run (same machine load). The agent's /metrics histogram cannot resolve "
      "1.2 ms (buckets 1, 1.25, 1.5 ms) and its overrun counter adds both groups.\n");
  std::fflush(stdout);
  return 0;
}
