#include "collectors/common/service_notifier.h"

#include <systemd/sd-daemon.h>
#include <time.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace fabricscope::common {

namespace {

// STATUS= is one line; a newline would start a new assignment.
std::string OneLine(const std::string& text) {
  std::string out = text;
  for (char& c : out) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return out;
}

}  // namespace

ServiceNotifier::ServiceNotifier() {
  const char* socket = getenv("NOTIFY_SOCKET");
  enabled_ = socket != nullptr && socket[0] != '\0';
  uint64_t usec = 0;
  // > 0: armed for this process; 0: not armed; < 0: malformed $WATCHDOG_USEC/$WATCHDOG_PID.
  const int r = sd_watchdog_enabled(/*unset_environment=*/0, &usec);
  if (r > 0 && usec > 0) {
    watchdog_interval_ns_ = static_cast<int64_t>(usec) * 1000 / 2;
  } else if (r < 0) {
    LOG(WARNING) << "ignoring malformed $WATCHDOG_USEC / $WATCHDOG_PID";
  }
}

void ServiceNotifier::Send(const std::string& state) {
  if (!enabled_) return;
  const int r = sd_notify(/*unset_environment=*/0, state.c_str());
  if (r < 0) {
    LOG_EVERY_N(WARNING, 100) << "sd_notify(\"" << state.substr(0, state.find('\n'))
                              << "\") failed: errno " << -r;
  }
}

void ServiceNotifier::Ready(const std::string& status) {
  Send(absl::StrCat("READY=1\nSTATUS=", OneLine(status)));
}

void ServiceNotifier::Reloading(const std::string& status) {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const uint64_t usec = static_cast<uint64_t>(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
  Send(absl::StrCat("RELOADING=1\nMONOTONIC_USEC=", usec, "\nSTATUS=", OneLine(status)));
}

void ServiceNotifier::Stopping(const std::string& status) {
  Send(absl::StrCat("STOPPING=1\nSTATUS=", OneLine(status)));
}

void ServiceNotifier::Status(const std::string& status) {
  Send(absl::StrCat("STATUS=", OneLine(status)));
}

void ServiceNotifier::WatchdogPing() { Send("WATCHDOG=1"); }

}  // namespace fabricscope::common
