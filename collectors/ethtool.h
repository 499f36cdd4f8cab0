#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectors/collector.h"
#include "collectors/priority_stat.h"

namespace fabricscope::collectors {

// True for the RoCE-relevant mlx5 stats exported by default (kernel
// Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst): the ethtool
// names of the one counter-meaning table (collectors/counter_meaning.cc, IsTableEthtoolStat):
// its port-level rows (rx/tx_pause_ctrl_phy, rx/tx_discards_phy, rx_out_of_buffer, the PFC
// storm guard, PHY bits and errors, link_down_events_phy) and its per-priority kinds,
// rx_prio<p>_{bytes, packets, pause, pause_duration, pause_transition, discards, buf_discard,
// cong_discard, marked} and tx_prio<p>_{bytes, packets, pause, pause_duration} for p in 0-7.
bool IsDefaultRoceStat(absl::string_view name);

// The names of an ETH_SS_STATS string set as ETHTOOL_GSTRINGS fills it (include/uapi/linux/
// ethtool.h struct ethtool_gstrings): `count` fields of ETH_GSTRING_LEN (32) bytes, each a name
// padded with NULs; a name of exactly 32 bytes has no NUL and is taken whole. Reads exactly
// count x 32 bytes of `strings`.
std::vector<std::string> StringSetNames(const unsigned char* strings, uint32_t count);

// Which of a driver's ETH_SS_STATS statistics become counters.
struct EthtoolSelection {
  // Every stat the driver offers, in driver order, instead of the IsDefaultRoceStat() set.
  // Useful on virtio_net / veth (which have none of the mlx5 names) and in tests. Note that some
  // driver "stats" are not counters (veth's peer_ifindex); they are exported as they are.
  bool all = false;
};

// Driver statistics of network interfaces read with the SIOCETHTOOL ioctl (include/uapi/linux/
// ethtool.h: ETHTOOL_GSSET_INFO, ETHTOOL_GSTRINGS, ETHTOOL_GSTATS; kernel net/ethtool/ioctl.c).
// One ETHTOOL_GSTATS per interface returns all of its stats at once; on mlx5 this is where the
// per-priority PFC, buffer-discard and PHY error counters live (mlx5 counters.rst, above).
//
// One PortDescriptor per interface that has at least one selected stat: device = ifname, port =
// its dev_port, rdma = false, and one CounterDescriptor per selected stat (group "ethtool", role
// kOther, 64-bit wrapping, scale 1, empty path). Counters are in driver order.
//
// Namespaces: the ioctls act in the network namespace of the socket, i.e. of the thread that
// called Open(); sysfs_root must show that same namespace's class/net (sysfs is tagged with the
// namespace of whoever mounted it), otherwise dev_port falls back to 0.
//
// Permissions: GSSET_INFO, GSTRINGS and GSTATS need no capability (net/ethtool/ioctl.c).
//
// Cost: the kernel serves SIOCETHTOOL under the RTNL lock, and drivers may gather the stats with
// firmware commands (mlx5 refreshes its PPORT/PFC groups with register reads on every GSTATS).
// A GSTATS call therefore waits for any concurrent link configuration on the node; ReadCostNs
// reports what it costs here. Consider a tick_divisor > 1 on mlx5.
class EthtoolCollector final : public Collector {
 public:
  // Opens one AF_INET datagram socket and reads the stat names of each of `ifnames`.
  // Interfaces that do not exist, have no ETH_SS_STATS set (lo: EOPNOTSUPP), have no selected
  // stat, or whose stat count changed while their names were read, are left out with a line in
  // *notes (if given). A zero tick_divisor is taken as 1.
  // Errors: Unavailable when the socket cannot be created; FailedPrecondition when no counter
  // is left (empty ifnames included): a collector without counters would only cost a sampler
  // slot, and callers treat this source as optional (the message then goes to their notes).
  static absl::StatusOr<std::unique_ptr<EthtoolCollector>> Open(
      std::vector<std::string> ifnames, const EthtoolSelection& sel, uint32_t tick_divisor,
      std::vector<std::string>* notes = nullptr, const std::string& sysfs_root = "/sys");

  ~EthtoolCollector() override;
  EthtoolCollector(const EthtoolCollector&) = delete;
  EthtoolCollector& operator=(const EthtoolCollector&) = delete;

  const std::vector<PortDescriptor>& ports() const override { return ports_; }
  size_t counter_count() const override { return slots_.size(); }

  // One ETHTOOL_GSTATS per interface on due ticks. An interface whose ioctl fails (vanished:
  // ENODEV; stat count grew past the buffer on kernels before 6.19: EFAULT) or whose returned
  // n_stats differs from the count seen at Open (newer kernels answer 0 on a mismatch; selected
  // indexes would be stale anyway) gives kError for all of its counters until the count is back;
  // the collector must be reopened to pick up a new stat layout. Buffers end at a guard page, so
  // a grown set never overwrites memory.
  void Sample(uint64_t tick, uint64_t* values, ReadStatus* status) override;

  // The mean wall time of one GSTATS of counter i's interface, divided by that interface's
  // counter count (one ioctl serves them all), in ns; measured every kCostTickStride-th tick.
  double ReadCostNs(size_t i) const override;

  static constexpr uint64_t kCostTickStride = 64;

 private:
  class StatsBuffer;
  struct Interface;
  struct Slot {
    uint32_t iface;  // index into ifaces_
    uint32_t stat;   // index into the driver's stat array
  };
  EthtoolCollector();
  // Open's steps for one interface (see the .cc).
  absl::Status ReadStatNames(const std::string& ifname, std::vector<std::string>* names) const;
  size_t AddSelectedStats(const std::vector<std::string>& names, const EthtoolSelection& sel,
                          PortDescriptor* port);

  int fd_ = -1;  // AF_INET SOCK_DGRAM, only for SIOCETHTOOL
  uint32_t tick_divisor_ = 1;
  std::vector<PortDescriptor> ports_;
  std::vector<Interface> ifaces_;
  std::vector<Slot> slots_;
};

}  // namespace fabricscope::collectors
