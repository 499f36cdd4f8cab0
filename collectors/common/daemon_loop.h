#pragma once

// The control loop of fabricscope-agent and fabricscope-aggregator: signals, the systemd
// watchdog and status, and a once-a-second tick. Each daemon says what a reload, a tick and a
// stall mean for it; the loop is written once.

#include <signal.h>

#include <cstdint>
#include <functional>
#include <string>

#include "collectors/common/service_notifier.h"

namespace fabricscope::common {

struct DaemonHooks {
  // SIGHUP: re-read the config file and apply it (or keep running as before and say why).
  // Returns false when the daemon cannot go on (the loop then ends, returning 0).
  std::function<bool()> reload;
  // About once a second (CLOCK_MONOTONIC ns): maintenance, the status line.
  std::function<void(int64_t now_ns)> tick;
  // Why the daemon makes no progress (a stalled sampler, a lock held too long); empty while
  // it does. WATCHDOG=1 goes out only while it is empty, so systemd restarts a stuck daemon.
  std::function<std::string(int64_t now_ns)> stall;
  // STATUS= text sent every 10 s while healthy (empty function: none).
  std::function<std::string()> status;
};

// Blocks in sigtimedwait(2) on SIGINT, SIGTERM and SIGHUP, which the caller blocked with
// BlockDaemonSignals() before starting any thread. Wakes at least every quarter of the watchdog
// interval ($WATCHDOG_USEC / 4, so a late wake-up on a loaded machine stays far from the
// deadline; sd_watchdog_enabled(3)) and at least once a second. Logs each change of `stall`.
// Returns the signal that ended it (SIGINT or SIGTERM), or 0 when `reload` said to stop.
int RunDaemonLoop(const sigset_t& signals, ServiceNotifier& notifier, const DaemonHooks& hooks);

// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread (and so in every thread it starts
// later) and returns the set for RunDaemonLoop.
sigset_t BlockDaemonSignals();

}  // namespace fabricscope::common
