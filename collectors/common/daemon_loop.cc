#include "collectors/common/daemon_loop.h"

#include <pthread.h>
#include <time.h>

#include <algorithm>

#include "glog/logging.h"

namespace fabricscope::common {
namespace {

int64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

sigset_t BlockDaemonSignals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  return signals;
}

int RunDaemonLoop(const sigset_t& signals, ServiceNotifier& notifier, const DaemonHooks& hooks) {
  const int64_t wd_ns = notifier.watchdog_interval_ns();  // half of $WATCHDOG_USEC
  const int64_t step_ns = wd_ns > 0 ? std::min<int64_t>(wd_ns / 2, 1'000'000'000) : 1'000'000'000;
  const timespec step{static_cast<time_t>(step_ns / 1'000'000'000),
                      static_cast<long>(step_ns % 1'000'000'000)};
  int64_t last_ping_ns = 0, last_tick_ns = MonotonicNs(), last_status_ns = 0;
  std::string stalled;
  if (wd_ns > 0) notifier.WatchdogPing();
  while (true) {
    const int sig = sigtimedwait(&signals, nullptr, &step);
    if (sig == SIGINT || sig == SIGTERM) return sig;
    if (sig == SIGHUP && hooks.reload) {
      if (!hooks.reload()) return 0;
      stalled.clear();
    }
    const int64_t now = MonotonicNs();
    if (now - last_tick_ns >= 1'000'000'000) {
      if (hooks.tick) hooks.tick(now);
      last_tick_ns = now;
    }
    const std::string why = hooks.stall ? hooks.stall(now) : std::string();
    if (why != stalled) {
      if (!why.empty()) LOG(ERROR) << why << "; systemd watchdog pings stop";
      if (why.empty()) LOG(INFO) << "progress again; systemd watchdog pings resume";
      stalled = why;
      if (!why.empty() || hooks.status) notifier.Status(why.empty() ? hooks.status() : why);
      last_status_ns = now;
    }
    if (wd_ns > 0 && stalled.empty() && now - last_ping_ns >= wd_ns / 2) {
      notifier.WatchdogPing();
      last_ping_ns = now;
    }
    if (hooks.status && notifier.enabled() && stalled.empty() &&
        now - last_status_ns >= 10'000'000'000) {
      notifier.Status(hooks.status());
      last_status_ns = now;
    }
  }
}

}  // namespace fabricscope::common
