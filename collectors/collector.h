#pragma once

#include <cstdint>
#include <string>
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

  // Control thread, about once a second: reopens files whose path now names another inode (a
  // hot-unplugged device that came back has new sysfs nodes; the old descriptors would read the
  // removed ones forever). The new file takes the old descriptor's number (dup2), so Sample()
  // on the sampler thread needs no lock: a read sees either file. Returns how many were
  // reopened. Sources without files return 0.
  virtual size_t ReopenReplaced() { return 0; }
};

// Reopens `path` onto descriptor `fd` if the path now names a different file than fd. Returns
// true when it did. A missing path leaves fd alone (the device is still away). Control thread.
bool ReopenIfReplaced(int fd, const std::string& path);

}  // namespace fabricscope::collectors
