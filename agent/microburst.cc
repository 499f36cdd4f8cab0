#include "agent/microburst.h"

#include <algorithm>

namespace fabricscope::agent {

std::optional<MicroburstEvent> MicroburstDetector::Add(int64_t end_ns, int64_t interval_ns,
                                                       double utilization, uint64_t bytes) {
  if (open_) {
    if (utilization < t_.exit) {
      open_ = false;
      return cur_;
    }
    cur_.duration_ns += interval_ns;
    cur_.bytes += bytes;
    cur_.peak_utilization = std::max(cur_.peak_utilization, utilization);
    ++cur_.samples;
    return std::nullopt;
  }
  if (utilization >= t_.enter) {
    open_ = true;
    cur_ = MicroburstEvent{end_ns - interval_ns, interval_ns, utilization, bytes, 1};
  }
  return std::nullopt;
}

std::optional<MicroburstEvent> MicroburstDetector::Break() {
  if (!open_) return std::nullopt;
  open_ = false;
  return cur_;
}

}  // namespace fabricscope::agent
