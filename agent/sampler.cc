#include "agent/sampler.h"

#include <pthread.h>
#include <sys/prctl.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <future>

#include "agent/histogram.h"
#include "collectors/clock.h"

namespace fabricscope::agent {

Sampler::Sampler(std::vector<collectors::Collector*> collectors, collectors::SpscSlotRing& ring,
                 TickLayout layout, SamplerOptions options)
    : collectors_(std::move(collectors)),
      ring_(ring),
      layout_(layout),
      options_(options),
      bounds_(SampleIntervalBounds(options.period_ns > 0 ? options.period_ns : 1'000'000)),
      interval_counts_(new std::atomic<uint64_t>[bounds_.size() + 1]) {
  size_t off = 0;
  for (collectors::Collector* c : collectors_) {
    offsets_.push_back(off);
    off += c->counter_count();
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) interval_counts_[i].store(0);
  if (options_.period_ns <= 0) options_.period_ns = 1'000'000;
}

Sampler::~Sampler() { Stop(); }

absl::Status Sampler::Start() {
  std::promise<absl::Status> applied;
  std::future<absl::Status> result = applied.get_future();
  // The promise moves into the thread: it outlives the set_value that wakes Start.
  thread_ = std::jthread([this, applied = std::move(applied)](std::stop_token st) mutable {
    pthread_setname_np(pthread_self(), "fs-sampler");
    absl::Status s = ApplyThreadSched(options_.sched);
    const bool ok = s.ok();
    applied.set_value(std::move(s));
    if (ok) Run(st);
  });
  absl::Status s = result.get();
  if (!s.ok()) thread_.join();
  return s;
}

void Sampler::Stop() {
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
}

void Sampler::IntervalHistogram(v1::Histogram* out) const {
  out->mutable_upper_bounds()->Assign(bounds_.begin(), bounds_.end());
  uint64_t count = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    const uint64_t c = interval_counts_[i].load(std::memory_order_relaxed);
    out->add_bucket_counts(c);
    count += c;
  }
  out->set_count(count);
  out->set_sum(static_cast<double>(interval_sum_ns_.load(std::memory_order_relaxed)) / 1e9);
}

int64_t Sampler::cpu_ns() const {
  if (!thread_.joinable()) return cpu_ns_at_exit_.load(std::memory_order_relaxed);
  clockid_t cid;
  timespec cpu{};
  if (pthread_getcpuclockid(const_cast<std::jthread&>(thread_).native_handle(), &cid) != 0 ||
      clock_gettime(cid, &cpu) != 0) {
    return 0;
  }
  return static_cast<int64_t>(cpu.tv_sec) * 1'000'000'000 + cpu.tv_nsec;
}

void Sampler::Run(std::stop_token stop) {
  Loop(stop);
  timespec cpu{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
  cpu_ns_at_exit_.store(static_cast<int64_t>(cpu.tv_sec) * 1'000'000'000 + cpu.tv_nsec,
                        std::memory_order_relaxed);
}

void Sampler::Loop(std::stop_token stop) {
  // The default 50 us timer slack (prctl(2) PR_SET_TIMERSLACK) alone would make every 100 us
  // tick late; ask for the tightest wake-up the kernel offers this thread.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  const int64_t period = options_.period_ns;
  int64_t deadline = collectors::MonotonicNowNs() + period;
  int64_t last_t = 0;
  uint64_t tick = 0;
  while (!stop.stop_requested()) {
    timespec ts{static_cast<time_t>(deadline / 1'000'000'000),
                static_cast<long>(deadline % 1'000'000'000)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
    }
    const int64_t now = collectors::MonotonicNowNs();
    if (now - deadline > period) overruns_.fetch_add(1, std::memory_order_relaxed);

    if (void* slot = ring_.BeginWrite()) {
      TickHeader* h = TickLayout::header(slot);
      h->t_ns = now;
      h->tick = tick;
      uint64_t* values = layout_.values(slot);
      collectors::ReadStatus* status = layout_.status(slot);
      for (size_t c = 0; c < collectors_.size(); ++c) {
        collectors_[c]->Sample(tick, values + offsets_[c], status + offsets_[c]);
      }
      ring_.CommitWrite();
    }

    if (last_t != 0) {
      const int64_t interval = now - last_t;
      const double s = static_cast<double>(interval) / 1e9;
      const size_t b = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), s) -
                                           bounds_.begin());
      interval_counts_[b].fetch_add(1, std::memory_order_relaxed);
      interval_sum_ns_.fetch_add(static_cast<uint64_t>(interval), std::memory_order_relaxed);
    }
    last_t = now;
    ++tick;
    ticks_.store(tick, std::memory_order_relaxed);
    deadline += period;
    if (deadline <= now) {  // late: skip to the next deadline in the future
      deadline += ((now - deadline) / period + 1) * period;
    }
  }
}

}  // namespace fabricscope::agent
