#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectors/collector.h"

namespace fabricscope::collectors {

// Parses a sysfs state attribute "<number>: <NAME>" ("4: ACTIVE", "5: LinkUp") into the number
// (IBTA vol. 1 14.2.5.6 PortInfo PortState / PortPhysicalState; kernel
// drivers/infiniband/core/sysfs.c state_show, phys_state_show). Does not allocate.
ReadStatus ParseStateText(absl::string_view text, uint64_t* value);

// Parses an RDMA `rate` ("100 Gb/sec (4X EDR)") into bytes/s without allocating.
ReadStatus ParseRateText(absl::string_view text, uint64_t* bytes_per_second);

// Parses a netdev `operstate` (RFC 2863 names, kernel Documentation/networking/operstates.rst):
// "up" -> 4 (as IB ACTIVE), "down"/"lowerlayerdown"/"notpresent" -> 1 (as IB DOWN), anything
// else ("unknown", "dormant", "testing") -> 0.
ReadStatus ParseOperstateText(absl::string_view text, uint64_t* value);

// Parses a netdev `speed` (Mb/s) into bytes/s; -1 gives 0 (unknown). Does not allocate.
ReadStatus ParseSpeedText(absl::string_view text, uint64_t* bytes_per_second);

// Link state and rate of ports, re-read every tick so that flaps and speed changes become
// events: RDMA ports read ports/N/{state,phys_state,rate}; netdevs read {operstate,speed}.
// Every value has role kState, group "state", and a name among "state", "phys_state", "rate".
// A read error on the files of a port that vanished gives kError (the pipeline reports the port
// as unreadable, never a crash). Sample() follows the Collector hot-path contract.
class PortStateCollector final : public Collector {
 public:
  // `ports`: the RDMA ports and netdevs to watch (their counter lists are ignored); the
  // descriptors returned carry only the state values. Files that cannot be opened are skipped.
  // Errors: FailedPrecondition when no state file of any port can be opened.
  static absl::StatusOr<std::unique_ptr<PortStateCollector>> Open(
      const std::string& sysfs_root, const std::vector<PortDescriptor>& ports);
  ~PortStateCollector() override;

  const std::vector<PortDescriptor>& ports() const override { return ports_; }
  size_t counter_count() const override { return slots_.size(); }
  void Sample(uint64_t tick, uint64_t* values, ReadStatus* status) override;
  double ReadCostNs(size_t i) const override;
  size_t ReopenReplaced() override;

 private:
  enum class Kind : uint8_t { kState, kRate, kOperstate, kSpeed };
  struct Slot {
    int fd;
    Kind kind;
  };
  PortStateCollector() = default;

  std::vector<PortDescriptor> ports_;
  std::vector<Slot> slots_;
  std::atomic<uint64_t> cost_ns_{0};
  std::atomic<uint64_t> cost_reads_{0};
};

}  // namespace fabricscope::collectors
