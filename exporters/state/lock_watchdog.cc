#include "exporters/state/lock_watchdog.h"

#include <pthread.h>

#include <algorithm>

#include "absl/time/time.h"
#include "collectors/clock.h"

namespace fabricscope::exporters {

LockWatchdog::LockWatchdog(std::function<void()> probe, int64_t period_ns)
    : probe_(std::move(probe)), period_ns_(period_ns) {}

LockWatchdog::~LockWatchdog() { Stop(); }

void LockWatchdog::Start() {
  if (thread_.joinable()) return;
  {
    absl::MutexLock lock(&mu_);
    stop_ = false;
  }
  last_ns_.store(collectors::MonotonicNowNs());
  thread_ = std::thread([this] { Run(); });
}

void LockWatchdog::Stop() {
  if (!thread_.joinable()) return;
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

void LockWatchdog::Run() {
  pthread_setname_np(pthread_self(), "fs-lockwatch");
  while (true) {
    probe_();
    last_ns_.store(collectors::MonotonicNowNs());
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Nanoseconds(period_ns_))) return;
  }
}

double LockWatchdog::StalledSeconds() const {
  if (!thread_.joinable()) return 0;
  const int64_t late = collectors::MonotonicNowNs() - last_ns_.load() - period_ns_;
  return std::max<int64_t>(0, late) / 1e9;
}

}  // namespace fabricscope::exporters
