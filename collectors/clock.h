#pragma once

#include <cstdint>
#include <ctime>

namespace fabricscope::collectors {

// CLOCK_MONOTONIC in nanoseconds: the one time base shared by every process on a node
// (also the NCCL plugin's and CUPTI library's). Async-signal-safe, does not allocate; safe on any
// thread.
inline int64_t MonotonicNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// CLOCK_REALTIME (Unix time) in nanoseconds.
inline int64_t UnixNowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// Offset such that unix_ns = monotonic_ns + offset, measured now as the midpoint of two
// monotonic reads around one realtime read. Any thread.
inline int64_t MeasureUnixOffsetNs() {
  const int64_t m0 = MonotonicNowNs();
  const int64_t u = UnixNowNs();
  const int64_t m1 = MonotonicNowNs();
  return u - (m0 + (m1 - m0) / 2);
}

}  // namespace fabricscope::collectors
