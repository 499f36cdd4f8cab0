#pragma once

// InfiniBand PerfMgt queries through libibumad (rdma-core): the second source of IB port
// counters next to sysfs. It reads PortCountersExtended (64-bit data/packet counters) and
// PortCounters (error counters) from the Performance Management Agent (PMA) of the local port,
// or of any port in the subnet addressed by LID + PortSelect, which is how switch ports are
// read. Needs the ib_umad kernel module, /dev/infiniband/umad<N> with read/write access, and an
// IB link layer (RoCE ports have no LID; use their sysfs counters).

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "collectors/collector.h"
#include "collectors/pma_mad.h"

namespace fabricscope::collectors {

// Checks that this node can send MADs: <sysfs_root>/class/infiniband_mad exists and lists at
// least one umad<N> device, and <dev_root>/infiniband/ holds umad<N> device nodes.
// Errors: Unavailable whose message says which of these is missing and the likely cause.
absl::Status CheckUmadPresent(const std::string& sysfs_root = "/sys",
                              const std::string& dev_root = "/dev");

// Something that answers PerfMgt Gets; UmadPerfQuery on real hardware, fakes in tests.
//
// lid 0 addresses the local port itself (its own base LID); with lid 0, port_select 0 means the
// local port number. With a non-zero lid, port_select is used as given (0 is a switch's
// management port). Not thread-safe: one caller at a time.
class PerfMgtQuerier {
 public:
  virtual ~PerfMgtQuerier() = default;

  virtual const std::string& ca_name() const = 0;
  virtual int port() const = 0;

  virtual absl::StatusOr<PerfMgtClassPortInfo> GetClassPortInfo(uint16_t lid) = 0;
  virtual absl::StatusOr<PortCountersSample> GetPortCounters(uint16_t lid, uint8_t port_select) = 0;
  virtual absl::StatusOr<PortCountersExtendedSample> GetPortCountersExtended(
      uint16_t lid, uint8_t port_select) = 0;
};

struct UmadPerfQueryOptions {
  // Time the kernel waits for each answer before resending, ms (umad_send timeout_ms).
  int timeout_ms = 100;
  // Resends after the first try (umad_send retries). A query blocks for at most
  // timeout_ms x (retries + 1) plus scheduling slack.
  int retries = 1;
  // Service level of the requests: the subnet's management SL (usually 0).
  int sl = 0;
  // P_Key table index of the requests; 0 holds the default partition on every IB port.
  int pkey_index = 0;
  // Roots for the device-presence check (tests point them at fake trees).
  std::string sysfs_root = "/sys";
  std::string dev_root = "/dev";
};

// One umad agent for PerfMgt (class 0x04, version 1) on one local CA port. Each Get is a
// blocking round trip (umad_send, then umad_recv until the answer with our TransactionID, a
// kernel timeout report, or the deadline). Answers are decoded and checked by pma_mad.h.
class UmadPerfQuery final : public PerfMgtQuerier {
 public:
  // Opens port `port` of CA `ca_name` (empty: the first CA whose port `port` has an InfiniBand
  // link layer) and registers a PerfMgt client agent.
  // Errors:
  //   Unavailable        no umad device on this node (CheckUmadPresent's reason), no CA, the
  //                      port has LID 0 (no subnet manager has configured it yet), or a libibumad
  //                      call failed.
  //   NotFound           the named CA does not exist or has no port `port`.
  //   FailedPrecondition the port's link layer is not InfiniBand (RoCE).
  //   PermissionDenied   /dev/infiniband/umad<N> cannot be opened by this user.
  //   InvalidArgument    port outside 1-254, timeout_ms <= 0, negative retries or pkey_index,
  //                      or sl outside 0-15.
  static absl::StatusOr<std::unique_ptr<UmadPerfQuery>> Open(
      const std::string& ca_name, int port, const UmadPerfQueryOptions& options = {});

  ~UmadPerfQuery() override;
  UmadPerfQuery(const UmadPerfQuery&) = delete;
  UmadPerfQuery& operator=(const UmadPerfQuery&) = delete;

  const std::string& ca_name() const override { return ca_name_; }
  int port() const override { return port_; }
  // The local port's base LID, read at Open (a LID the SM reassigns later needs a reopen).
  uint16_t base_lid() const { return base_lid_; }

  // Errors: DeadlineExceeded when no answer came in time (after the retries); Unavailable when
  // a libibumad call failed; the errors of the pma_mad.h decoders for a bad or refused answer.
  // No allocation on success.
  absl::StatusOr<PerfMgtClassPortInfo> GetClassPortInfo(uint16_t lid) override;
  absl::StatusOr<PortCountersSample> GetPortCounters(uint16_t lid, uint8_t port_select) override;
  absl::StatusOr<PortCountersExtendedSample> GetPortCountersExtended(uint16_t lid,
                                                                     uint8_t port_select) override;

 private:
  UmadPerfQuery() = default;
  // Sends a Get of `attribute_id` and waits for the answer carrying our TID; on success the
  // answer's MAD is at mad() and *tid is the TID sent.
  absl::Status RoundTrip(uint16_t lid, uint16_t attribute_id, uint8_t port_select, uint64_t* tid);
  // The MAD part of the umad buffer, as long as the last umad_recv delivered.
  absl::Span<const uint8_t> mad() const;

  std::string ca_name_;
  int port_ = 0;
  uint16_t base_lid_ = 0;
  UmadPerfQueryOptions options_;
  int fd_ = -1;     // umad_open_port
  int agent_ = -1;  // umad_register
  uint32_t next_tid_ = 0;
  size_t buf_size_ = 0;              // umad_size() + kMadSize
  std::unique_ptr<uint64_t[]> buf_;  // struct ib_user_mad + MAD, 8-byte aligned
  size_t mad_len_ = 0;               // MAD bytes delivered by the last umad_recv
};

// Where a UmadPerfQueryCollector reads: a port of the local node (lid 0) or any port of the
// subnet, e.g. a leaf switch's port found in the topology.
struct PmaTarget {
  uint16_t lid = 0;         // 0 = the querier's own port
  uint8_t port_select = 0;  // see PerfMgtQuerier; 0 with lid 0 = the local port number
  // PortDescriptor::device; empty = the CA name for the local port, "lid<N>" for a remote one.
  std::string device;
};

// Collector adapter: one PortDescriptor per PmaTarget (group "pma", rdma, InfiniBand link
// layer) with, in this order,
//   - data/packet counters: from PortCountersExtended when the PMA advertises it (64-bit,
//     wrapping; port_xmit_data/port_rcv_data in 4-octet words, scale 4), plus
//     unicast_/multicast_{xmit,rcv}_packets when it advertises the full extended set (not
//     NoIETF); otherwise the 32-bit PortCounters ones, which saturate;
//   - the PortCounters error counters, role kError, saturating, widths per 16.1.3.5:
//     symbol_error 16, link_error_recovery 8, link_downed 8, port_rcv_errors 16,
//     port_rcv_remote_physical_errors 16, port_rcv_switch_relay_errors 16,
//     port_xmit_discards 16, port_xmit_constraint_errors 8, port_rcv_constraint_errors 8,
//     local_link_integrity_errors 4, excessive_buffer_overrun_errors 4, VL15_dropped 16;
//   - port_xmit_wait (32-bit, saturating, role kOther). Kept even without the PMA's
//     PortXmitWait capability bit, as the kernel's sysfs does (mlx5 fills it without setting the
//     bit); such a PMA may report 0.
// Names match the kernel's counters/ files, so the two sources line up.
//
// BLOCKING SOURCE. Sample() performs up to two MAD round trips per target and may block for
// 2 x timeout_ms x (retries + 1) per target when a PMA does not answer; a local mlx5 answer
// costs a firmware command. Put it on a slow sampler group (tick_divisor so that it runs about
// once a second or less), never on the fast tick. Sample() does not allocate on success; a
// failed round trip marks that query's counters kError for the tick (and builds a Status
// message inside the querier).
class UmadPerfQueryCollector final : public Collector {
 public:
  // Probes each target's ClassPortInfo to choose its counter set. A target that does not
  // answer is dropped and described in *notes (if given). Empty `targets` means the querier's
  // own port. tick_divisor 0 is taken as 1.
  // Errors: the probe error of the first target when none answers.
  static absl::StatusOr<std::unique_ptr<UmadPerfQueryCollector>> Create(
      std::unique_ptr<PerfMgtQuerier> querier, std::vector<PmaTarget> targets,
      uint32_t tick_divisor, std::vector<std::string>* notes = nullptr);

  const std::vector<PortDescriptor>& ports() const override { return ports_; }
  size_t counter_count() const override { return slots_.size(); }
  void Sample(uint64_t tick, uint64_t* values, ReadStatus* status) override;
  // Mean round-trip time of the target's queries per tick, divided among its counters.
  double ReadCostNs(size_t i) const override;

  // Queries that failed since Create (any thread).
  uint64_t failed_queries() const { return failed_queries_.load(std::memory_order_relaxed); }

 private:
  struct Target {
    PmaTarget where;
    bool extended = false;  // data/packets from PortCountersExtended
    size_t first_slot = 0;
    size_t slot_count = 0;
  };
  UmadPerfQueryCollector() = default;

  std::unique_ptr<PerfMgtQuerier> querier_;
  uint32_t tick_divisor_ = 1;
  std::vector<Target> targets_;
  std::vector<PortDescriptor> ports_;
  std::vector<uint8_t> slots_;       // per counter, in sample order: the answer field it reads
  std::vector<size_t> slot_target_;  // per counter: index into targets_
  std::unique_ptr<std::atomic<uint64_t>[]> cost_ns_;     // per target: summed round-trip ns
  std::unique_ptr<std::atomic<uint64_t>[]> cost_reads_;  // per target: sampled ticks
  std::atomic<uint64_t> failed_queries_{0};
};

}  // namespace fabricscope::collectors
