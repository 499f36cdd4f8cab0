#pragma once

#include <cstdint>

namespace fabricscope {

// One millisecond in the nanoseconds of the agent's monotonic timestamps (collectors/clock.h),
// for tests that write times as `250 * kMs`.
inline constexpr int64_t kMs = 1'000'000;
inline constexpr int64_t kSec = 1000 * kMs;

}  // namespace fabricscope
