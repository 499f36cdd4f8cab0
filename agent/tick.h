#pragma once

#include <cstddef>
#include <cstdint>

#include "collectors/counter.h"

namespace fabricscope::agent {

// Layout of one sampler tick inside a ring slot:
//   TickHeader | uint64_t values[n] | ReadStatus status[n]
// where n is the total counter count over all collectors, fixed at start-up.
struct TickHeader {
  int64_t t_ns;   // CLOCK_MONOTONIC when the tick's reads began
  uint64_t tick;  // tick number since the sampler started
};

struct TickLayout {
  size_t counters = 0;

  size_t slot_bytes() const {
    return sizeof(TickHeader) + counters * sizeof(uint64_t) +
           counters * sizeof(collectors::ReadStatus);
  }
  static TickHeader* header(void* slot) { return static_cast<TickHeader*>(slot); }
  static const TickHeader* header(const void* slot) { return static_cast<const TickHeader*>(slot); }
  uint64_t* values(void* slot) const {
    return reinterpret_cast<uint64_t*>(static_cast<char*>(slot) + sizeof(TickHeader));
  }
  const uint64_t* values(const void* slot) const {
    return reinterpret_cast<const uint64_t*>(static_cast<const char*>(slot) + sizeof(TickHeader));
  }
  collectors::ReadStatus* status(void* slot) const {
    return reinterpret_cast<collectors::ReadStatus*>(values(slot) + counters);
  }
  const collectors::ReadStatus* status(const void* slot) const {
    return reinterpret_cast<const collectors::ReadStatus*>(values(slot) + counters);
  }
};

}  // namespace fabricscope::agent
