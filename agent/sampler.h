#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "agent/thread_sched.h"
#include "agent/tick.h"
#include "collectors/collector.h"
#include "collectors/spsc_ring.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::agent {

struct SamplerOptions {
  int64_t period_ns = 1'000'000;  // 1 ms; must run at 100 us
  ThreadSched sched;              // CPU and priority of the thread (agent/thread_sched.h)
};

// The sampler thread: ticks on absolute CLOCK_MONOTONIC deadlines (clock_nanosleep with
// TIMER_ABSTIME), reads every due counter of every collector and pushes one tick into the ring.
//
// Hot path contract: no allocation, lock, log or file open per tick. A full ring drops the tick
// (counted by the ring). A tick that starts more than one period after its deadline is an
// overrun: it is counted and the schedule moves to the next future deadline, so missed ticks are
// skipped rather than run back to back.
//
// Threading: Start/Stop from the control thread; stats accessors from any thread.
class Sampler {
 public:
  Sampler(std::vector<collectors::Collector*> collectors, collectors::SpscSlotRing& ring,
          TickLayout layout, SamplerOptions options);
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Starts the thread, which first applies options.sched to itself; returns once it did.
  // Errors: ApplyThreadSched's (the thread has then exited: nothing to stop).
  absl::Status Start();
  void Stop();  // joins the thread; idempotent

  uint64_t ticks() const { return ticks_.load(std::memory_order_relaxed); }
  uint64_t overruns() const { return overruns_.load(std::memory_order_relaxed); }
  // Cumulative histogram of achieved intervals between consecutive ticks (seconds), with
  // SampleIntervalBounds(period).
  void IntervalHistogram(v1::Histogram* out) const;
  // CPU time consumed by the sampler thread so far, in ns (its CPU-time clock; the value at
  // exit once stopped). Control thread only (not concurrently with Start/Stop).
  int64_t cpu_ns() const;

 private:
  void Run(std::stop_token stop);
  void Loop(std::stop_token stop);

  std::vector<collectors::Collector*> collectors_;
  std::vector<size_t> offsets_;  // first counter index of each collector in the tick
  collectors::SpscSlotRing& ring_;
  TickLayout layout_;
  SamplerOptions options_;
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> interval_counts_;
  std::atomic<uint64_t> interval_sum_ns_{0};
  std::atomic<uint64_t> ticks_{0};
  std::atomic<uint64_t> overruns_{0};
  std::atomic<int64_t> cpu_ns_at_exit_{0};
  std::jthread thread_;
};

}  // namespace fabricscope::agent
