#pragma once

#include <cstdint>
#include <string>

namespace fabricscope::common {

// Tells the service manager (systemd, Type=notify) what the daemon is doing, through
// sd_notify(3) from libsystemd: READY=1, RELOADING=1, STOPPING=1, STATUS=<text> and the
// watchdog keep-alive WATCHDOG=1.
//
// Without $NOTIFY_SOCKET (started by hand, in a container, in a test) every call is a no-op
// and watchdog_interval_ns() is 0, so the daemons behave the same with or without systemd.
// The watchdog is armed when systemd sets $WATCHDOG_USEC (WatchdogSec= in the unit) for this
// process ($WATCHDOG_PID, when set, must be ours); sd_watchdog_enabled(3).
//
// Threading: one control thread (the daemon's main loop). Calls never block for long: the
// notification is one datagram on a unix socket.
class ServiceNotifier {
 public:
  ServiceNotifier();

  // Whether a service manager listens ($NOTIFY_SOCKET set).
  bool enabled() const { return enabled_; }
  // How often to send WATCHDOG=1: half of $WATCHDOG_USEC, as sd_watchdog_enabled(3)
  // recommends; 0 when no watchdog is armed.
  int64_t watchdog_interval_ns() const { return watchdog_interval_ns_; }

  // READY=1 with a status line: start-up or a reload finished.
  void Ready(const std::string& status);
  // RELOADING=1 (with MONOTONIC_USEC, which systemd >= 253 requires for Type=notify-reload)
  // and a status line; Ready() must follow when the reload is done.
  void Reloading(const std::string& status);
  // STOPPING=1 and a status line: graceful shutdown began.
  void Stopping(const std::string& status);
  // STATUS=<text> alone.
  void Status(const std::string& status);
  // WATCHDOG=1. The caller sends it only while the daemon makes progress; a daemon that stops
  // calling it is killed (SIGABRT) and restarted by systemd after WatchdogSec.
  void WatchdogPing();

 private:
  void Send(const std::string& state);

  bool enabled_ = false;
  int64_t watchdog_interval_ns_ = 0;
};

}  // namespace fabricscope::common
