#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

#include "absl/synchronization/mutex.h"

namespace fabricscope::exporters {

// Watches that a daemon's state locks keep changing hands: a thread calls `probe` (which takes
// and releases each lock in turn) every period and stamps the time it came back. While some
// code holds a lock without end (an ingest or a render that loops on what a client sent),
// the probe blocks and the stamp ages: StalledSeconds() says for how long, for /healthz and
// the systemd watchdog, so that Kubernetes or systemd restart the daemon instead of it
// answering "ok" while frozen.
//
// Threading: Start/Stop from the control thread; StalledSeconds from any thread.
class LockWatchdog {
 public:
  LockWatchdog(std::function<void()> probe, int64_t period_ns);
  ~LockWatchdog();
  void Start();
  // Waits for the probe thread; a probe stuck in a lock keeps it waiting as long.
  void Stop();
  // Seconds since the last probe completed, minus one period (0 while the locks move).
  double StalledSeconds() const;

 private:
  void Run();
  const std::function<void()> probe_;
  const int64_t period_ns_;
  std::atomic<int64_t> last_ns_{0};
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace fabricscope::exporters
