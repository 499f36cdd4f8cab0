#pragma once

#include <cstdint>
#include <vector>

#include "collectors/counter.h"
#include "collectors/port.h"

namespace fabricscope::collectors {

// A source of port counters sampled by the agent's sampler thread.
//
// Threading contract:
// - Construction, ports() and counter_count() happen on the control thread before sampling
//   starts; the descriptor list does not change afterwards.
// - Sample() is called only from the sampler thread, once per tick. It must not allocate, lock,
//   log, or open files: every file is opened at construction and re-read with pread. It may
//   block only for the reads themselves.
// - ReadCostNs() may be called from any thread at any time.
class Collector {
 public:
  virtual ~Collector() = default;

  // Ports this collector reads, with their counters in sample order.
  virtual const std::vector<PortDescriptor>& ports() const = 0;

  // Total counters over all ports; Sample() fills this many entries.
  virtual size_t counter_count() const = 0;

  // Reads every counter due on `tick` into values[i] / status[i] (i < counter_count(), in port
  // then counter order). Counters not due get ReadStatus::kNotRead.
  virtual void Sample(uint64_t tick, uint64_t* values, ReadStatus* status) = 0;

  // Mean wall time of one read of counter i (pread + parse) in ns, measured on a subset of
  // ticks; 0 until measured.
  virtual double ReadCostNs(size_t i) const = 0;
};

}  // namespace fabricscope::collectors
