#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace fabricscope::testing {

// Polls `condition` every few milliseconds until it holds or `timeout` passes; returns whether
// it held. Tests wait on a condition this way, never on a fixed sleep.
inline bool WaitFor(const std::function<bool()>& condition,
                    std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace fabricscope::testing
