#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"
#include "collectors/counter.h"

// The InfiniBand port counters, declared once for both ways the agent reads them: the kernel's
// sysfs files (collectors/sysfs_ports.cc) and PerfMgt MADs (collectors/umad_perfquery.cc).

namespace fabricscope::collectors {

// One counter of IBTA vol. 1 16.1.3.5 PortCounters (and 16.1.4.11 PortCountersExtended where
// it has a 64-bit form), by the name of its kernel sysfs file (drivers/infiniband/core/sysfs.c).
// PortCounters counters "shall stop at all ones" (saturate); the extended ones wrap.
struct IbPortCounter {
  const char* name;
  uint8_t width_bits;           // in PortCounters
  uint8_t extended_width_bits;  // in PortCountersExtended; 0 when it has none there
  uint32_t scale;               // 4 for the data counters: they count 4-octet words
  CounterRole role;
};

inline constexpr IbPortCounter kIbPortCounters[] = {
    {"port_xmit_data", 32, 64, 4, CounterRole::kTransmitBytes},
    {"port_rcv_data", 32, 64, 4, CounterRole::kReceiveBytes},
    {"port_xmit_packets", 32, 64, 1, CounterRole::kTransmitPackets},
    {"port_rcv_packets", 32, 64, 1, CounterRole::kReceivePackets},
    {"symbol_error", 16, 0, 1, CounterRole::kError},
    {"link_error_recovery", 8, 0, 1, CounterRole::kError},
    {"link_downed", 8, 0, 1, CounterRole::kError},
    {"port_rcv_errors", 16, 0, 1, CounterRole::kError},
    {"port_rcv_remote_physical_errors", 16, 0, 1, CounterRole::kError},
    {"port_rcv_switch_relay_errors", 16, 0, 1, CounterRole::kError},
    {"port_xmit_discards", 16, 0, 1, CounterRole::kError},
    {"port_xmit_constraint_errors", 8, 0, 1, CounterRole::kError},
    {"port_rcv_constraint_errors", 8, 0, 1, CounterRole::kError},
    {"local_link_integrity_errors", 4, 0, 1, CounterRole::kError},
    {"excessive_buffer_overrun_errors", 4, 0, 1, CounterRole::kError},
    {"VL15_dropped", 16, 0, 1, CounterRole::kError},
    // PortXmitWait (32 bits, stops at all ones): ticks in which the port had data to send but
    // sent none (no credits from the far end: congestion). Not an error; read in the slow group
    // (agent/derived.h turns it into seconds).
    {"port_xmit_wait", 32, 0, 1, CounterRole::kOther},
};

// The counter's spec: its extended form (64-bit, wrapping) when `extended` and it has one,
// else its PortCounters form (saturating).
inline CounterSpec IbCounterSpec(const IbPortCounter& c, bool extended) {
  if (extended && c.extended_width_bits != 0) {
    return CounterSpec{c.extended_width_bits, CounterBehavior::kWrapping, c.scale};
  }
  return CounterSpec{c.width_bits, CounterBehavior::kSaturating, c.scale};
}

// The entry of kIbPortCounters named `name`, or nullptr.
inline const IbPortCounter* FindIbPortCounter(absl::string_view name) {
  for (const IbPortCounter& c : kIbPortCounters) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

}  // namespace fabricscope::collectors
