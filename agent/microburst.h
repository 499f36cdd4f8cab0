#pragma once

#include <cstdint>
#include <optional>

namespace fabricscope::agent {

// Hysteresis thresholds as fractions of line rate (agent/README.md "The agent": Microburst).
struct MicroburstThresholds {
  double enter = 0.9;  // a burst starts at a sample with utilization >= enter
  double exit = 0.7;   // it ends at the first sample with utilization < exit
};

struct MicroburstEvent {
  int64_t start_ns = 0;     // CLOCK_MONOTONIC start of the first sample's interval
  int64_t duration_ns = 0;  // sum of the intervals of the samples in the burst
  double peak_utilization = 0;
  uint64_t bytes = 0;  // bytes counted during the burst's samples
  uint32_t samples = 0;
};

// Detects microbursts on one port and direction from consecutive utilization samples.
//
// A burst is the run of samples from one at or above `enter` up to (not including) the first
// below `exit`; samples between the thresholds extend an open burst but never start one. A
// burst open at a window boundary continues into the next window and is reported once, when it
// ends. Not thread-safe: owned by the pipeline thread. Does not allocate.
class MicroburstDetector {
 public:
  explicit MicroburstDetector(MicroburstThresholds t = {}) : t_(t) {}

  // One sample covering (end_ns - interval_ns, end_ns] with the given utilization and bytes.
  // Returns the burst that this sample ended, if any.
  std::optional<MicroburstEvent> Add(int64_t end_ns, int64_t interval_ns, double utilization,
                                     uint64_t bytes);

  // Ends an open burst because the sample stream broke (read error, counter reset, shutdown).
  std::optional<MicroburstEvent> Break();

  bool in_burst() const { return open_; }
  const MicroburstThresholds& thresholds() const { return t_; }

 private:
  MicroburstThresholds t_;
  bool open_ = false;
  MicroburstEvent cur_;
};

}  // namespace fabricscope::agent
