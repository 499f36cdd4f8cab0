#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "collectors/collector.h"

namespace fabricscope::collectors {

// Reads sysfs counter files (class/infiniband/*/ports/*/counters, class/net/*/statistics) with
// pread on descriptors opened once. Implements the Collector threading contract: Sample() runs
// on the sampler thread without allocating, locking or logging.
//
// A file that fails to read (device unplugged: ENODEV; permission; garbage) gives
// ReadStatus::kError for that counter on that tick; the caller counts it. A counter made of
// several files (CounterDescriptor::part_paths) reads as their sum, and as kError or
// kUnavailable when any of them does.
class SysfsCounterCollector final : public Collector {
 public:
  // Opens every counter file of `ports`. A counter whose file cannot be opened is removed from
  // its port and described in *notes (if given); a port left without counters is removed.
  // Errors: FailedPrecondition when no counter at all could be opened.
  static absl::StatusOr<std::unique_ptr<SysfsCounterCollector>> Open(
      std::vector<PortDescriptor> ports, std::vector<std::string>* notes = nullptr);

  ~SysfsCounterCollector() override;
  SysfsCounterCollector(const SysfsCounterCollector&) = delete;
  SysfsCounterCollector& operator=(const SysfsCounterCollector&) = delete;

  const std::vector<PortDescriptor>& ports() const override { return ports_; }
  size_t counter_count() const override { return fds_.size(); }
  void Sample(uint64_t tick, uint64_t* values, ReadStatus* status) override;
  double ReadCostNs(size_t i) const override;
  size_t ReopenReplaced() override;

  // Ticks on which read costs are measured: every kCostTickStride-th.
  static constexpr uint64_t kCostTickStride = 64;

 private:
  struct Slot {
    int fd;
    uint32_t tick_divisor;
    std::vector<int> part_fds;  // CounterDescriptor::part_paths, added to fd's value
  };
  // Reads one slot's value (the sum of its files). Allocation-free.
  static ReadStatus ReadSlot(const Slot& s, uint64_t* value);
  explicit SysfsCounterCollector(std::vector<PortDescriptor> ports, std::vector<Slot> fds);

  std::vector<PortDescriptor> ports_;
  std::vector<Slot> fds_;
  std::unique_ptr<std::atomic<uint64_t>[]> cost_ns_sum_;
  std::unique_ptr<std::atomic<uint64_t>[]> cost_reads_;
};

}  // namespace fabricscope::collectors
