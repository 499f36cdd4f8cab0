#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "collectors/common/bit_rate.h"
#include "collectors/port.h"

namespace fabricscope::collectors {

// Reads a whole small text file (sysfs attribute, procfs table), at most max_bytes.
// Errors: NotFound when the file does not exist, PermissionDenied, Unavailable for other
// read errors (e.g. EINVAL from class/net/lo/speed).
absl::StatusOr<std::string> ReadSmallFile(const std::string& path, size_t max_bytes = 65536);

// Parses an RDMA port's `rate` attribute, e.g. "100 Gb/sec (4X EDR)" or "2.5 Gb/sec (1X SDR)",
// into bytes per second: Gb/s x 125,000,000 (kernel drivers/infiniband/core/sysfs.c rate_show).
// Errors: InvalidArgument on text without a "<number> Gb/sec" prefix.
absl::StatusOr<uint64_t> ParseIbRate(absl::string_view text);

// The link width of an RDMA port's `rate` attribute: 4 for "100 Gb/sec (4X EDR)", 1 for
// "25 Gb/sec (1X EDR)" (kernel drivers/infiniband/core/sysfs.c rate_show prints the active
// width as "<n>X"); 0 when the text has none.
uint32_t ParseIbLanes(absl::string_view text);

// Parses an RDMA device's `node_guid` attribute, "0a7f:bc12:45ef:d23b" (four 16-bit groups,
// kernel drivers/infiniband/core/sysfs.c node_guid_show "%04x:%04x:%04x:%04x"), into the GUID
// as ibnetdiscover prints it (0x0a7fbc1245efd23b). Errors: InvalidArgument on any other text.
absl::StatusOr<uint64_t> ParseNodeGuid(absl::string_view text);

// Parses a netdev's `speed` attribute (Mb/s, kernel Documentation/ABI/testing/sysfs-class-net)
// into bytes per second (x 125,000). "-1" (virtio, veth, link down) gives 0 = unknown.
// Errors: InvalidArgument on non-numeric text.
absl::StatusOr<uint64_t> ParseNetdevSpeed(absl::string_view text);

// ParseBitRate (a user's line rate, tc(8) style): collectors/common/bit_rate.h.
using common::ParseBitRate;

// The standard counter set of an RDMA port (counters/*), with widths from the IB PMA
// PortCounters attribute (IBTA vol. 1 16.1.3.5; kernel drivers/infiniband/core/sysfs.c). Data
// counters are 4-octet words (scale 4). Error counters saturate.
std::vector<CounterDescriptor> RdmaCounterSet(const std::string& counters_dir,
                                              uint32_t error_tick_divisor);

// Every file of an RDMA port's hw_counters/ directory except `lifespan`, as group "hw_counters",
// role kOther, width from the counter-meaning table (collectors/counter_meaning.cc) where it
// knows the name, else as mlx5 has them (drivers/infiniband/hw/mlx5/counters.c: congestion
// counters np_*, rp_* and rx_icrc_encapsulated 64-bit; the queue counters 32-bit, wrapping).
// The driver's byte and packet counters (irdma ip4InOctets, ...: Meaning kReceiveBytes, ...)
// come out as one counter per role with that role, 64-bit, their parts added
// (CounterDescriptor::part_paths): "ip4InOctets+ip6InOctets", tick_divisor 1.
std::vector<CounterDescriptor> RdmaHwCounterSet(const std::string& hw_counters_dir,
                                                uint32_t tick_divisor);

// The standard counter set of a network interface (statistics/*, 64-bit in
// include/uapi/linux/if_link.h rtnl_link_stats64; may wrap at 32 bits on old drivers).
std::vector<CounterDescriptor> NetdevCounterSet(const std::string& statistics_dir,
                                                uint32_t error_tick_divisor);

struct DiscoveryResult {
  std::vector<PortDescriptor> ports;
  // One line per thing worth telling the user once: counters that read "N/A", ports skipped
  // because they have no counter files, ports with unknown line rate.
  std::vector<std::string> notes;
};

// Finds every port under <sysfs_root>/class/infiniband/<dev>/ports/<n>/ with its rate, link
// layer and every counter file present. Counters reading "N/A" (drivers without a PMA, e.g.
// iWARP) are left out and noted; a port left with none is kept (noted) for its state files. A
// missing class/infiniband is not an error (no RDMA devices).
// Errors: NotFound when sysfs_root itself does not exist.
absl::StatusOr<DiscoveryResult> DiscoverRdmaPorts(const std::string& sysfs_root,
                                                  uint32_t error_tick_divisor = 1);

// Finds every interface under <sysfs_root>/class/net/ with its statistics counters, speed,
// dev_port and whether it is virtual (its sysfs link points under devices/virtual/).
// Errors: NotFound when sysfs_root itself does not exist.
absl::StatusOr<DiscoveryResult> DiscoverNetdevs(const std::string& sysfs_root,
                                                uint32_t error_tick_divisor = 1);

// The network interface of an RDMA port (RoCE: where its ethtool stats live), per kernel
// Documentation/ABI/stable/sysfs-class-infiniband and drivers/infiniband/core/sysfs.c:
// 1. <root>/class/infiniband/<dev>/ports/<port>/gid_attrs/ndevs/<i>, in ascending i: the first
//    that reads non-empty (the kernel fails the read of a GID entry without a netdev).
// 2. Else the directories <root>/class/infiniband/<dev>/device/net/<ifname> of the port's PCI
//    function, IPoIB interfaces (type 32, ARPHRD_INFINIBAND) left out: the one whose dev_port
//    + 1 == port, else the only one.
// With RoCE LAG the GID entries name the bond (bond0), not a physical port.
// Errors: NotFound when neither gives exactly one interface (InfiniBand link layer ports usually
// have none; several netdevs without a dev_port match are ambiguous and also NotFound).
absl::StatusOr<std::string> FindRdmaNetdev(const std::string& sysfs_root, const std::string& device,
                                           uint32_t port);

}  // namespace fabricscope::collectors
