// fabricscope_bench_agent: the recorded wake-ups of each thread turned into intervals, lateness,
// tick work and reads per tick, and printed.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tests/bench/bench_agent.h"
#include "tests/bench/bench_common.h"

namespace fabricscope::bench {

std::string Us(double ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", ns / 1e3);
  return buf;
}
std::string Us(int64_t ns) { return Us(static_cast<double>(ns)); }

namespace {

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

}  // namespace

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

}  // namespace fabricscope::bench
