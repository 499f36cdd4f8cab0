#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collectors/counter.h"
#include "collectors/counter_meaning.h"

namespace fabricscope::collectors {

enum class LinkLayer : uint8_t { kUnspecified, kInfiniBand, kEthernet };

enum class LineRateSource : uint8_t { kUnknown, kSysfs, kConfig };

// One counter file of one port.
struct CounterDescriptor {
  std::string name;  // sysfs file name: port_xmit_data, rx_bytes, symbol_error, ...
  std::string path;  // absolute path read with pread (empty for sources that are not files)
  // More files whose values are added to path's on every read: a counter the driver splits in
  // parts, as irdma splits a port's bytes into ip4InOctets and ip6InOctets. name then joins the
  // parts' names with '+'.
  std::vector<std::string> part_paths;
  // Where the value comes from: "counters", "statistics", "hw_counters", "ethtool", "tcp".
  std::string group;
  CounterSpec spec;
  CounterRole role = CounterRole::kError;
  // What an increase means (loss, retransmit, CNP, pause, ...): set once where the counter is
  // discovered, from the one table (collectors::MeaningOf, collectors/counter_meaning.cc), and
  // read by every consumer (agent/derived.cc, pipeline.cc, collective_analysis.cc, and the
  // aggregator through CounterValue.meaning).
  Meaning meaning = Meaning::kNone;
  // Read on every tick when 1; every Nth tick for slower groups (e.g. error counters that cost
  // a firmware command on mlx5: QUERY_VPORT_COUNTER or a PPCNT register read, kernel
  // drivers/infiniband/hw/mlx5/mad.c).
  uint32_t tick_divisor = 1;
};

// A port as discovered on the node: an RDMA device port or a network interface.
struct PortDescriptor {
  std::string device;  // mlx5_0 / eth0
  uint32_t port = 0;   // RDMA port number, or the interface's dev_port
  bool rdma = false;
  LinkLayer link_layer = LinkLayer::kUnspecified;
  uint64_t line_rate_bytes_per_second = 0;  // 0 = unknown
  uint32_t lanes = 0;                       // RDMA link width from `rate` ("4X" = 4); 0 = unknown
  LineRateSource line_rate_source = LineRateSource::kUnknown;
  bool is_virtual = false;  // a netdev under /sys/devices/virtual (lo, veth, bridge, ...)
  // Node-wide counters that belong to no port (TCP): device names the source ("tcp").
  bool node_level = false;
  // RDMA ports: hw_counters/lifespan in ms (the driver refreshes hw_counters at most this
  // often; kernel drivers/infiniband/core/sysfs.c); 0 when the port has none.
  uint32_t hw_lifespan_ms = 0;
  std::string netdev;  // RDMA port: its network interface (RoCE), if found
  // RDMA port: its device's node GUID (sysfs class/infiniband/<dev>/node_guid); 0 unknown.
  uint64_t node_guid = 0;
  std::vector<CounterDescriptor> counters;

  std::string Key() const { return device + ":" + std::to_string(port); }
};

}  // namespace fabricscope::collectors
