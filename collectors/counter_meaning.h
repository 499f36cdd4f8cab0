#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

// What a counter's increase means, declared once for every consumer: the port discovery (which
// driver counters carry bytes and packets, and how wide they are), the agent's derived signals
// (agent/derived.cc), its per-collective join (agent/collective_analysis.cc) and loss windows
// (agent/pipeline.cc), and the aggregator's loss patterns (exporters/analysis/loss_patterns.cc,
// link_analysis.cc). A pure library with no ioctl or libibumad, so that the aggregator links it.

namespace fabricscope::collectors {

enum class Meaning : uint8_t {
  kNone = 0,  // exported by group and name; no analysis reads it
  // Traffic, for driver counters that are a port's only byte and packet counters (irdma
  // hw_counters). The standard counters/ and statistics/ files carry their role in
  // collectors/sysfs_ports.cc.
  kTransmitBytes,
  kReceiveBytes,
  kTransmitPackets,
  kReceivePackets,
  kOutOfSequence,      // an RDMA responder saw a PSN gap: packets lost upstream of it
  kRetransmit,         // an RDMA or iWARP-TCP retransmission, or the NAK/timeout that caused one
  kDiscard,            // a packet the NIC dropped, exported as fabricscope_port_discards_total
  kPriorityDiscard,    // rx_prio<p>_discards: the share of rx_discards_phy at one priority
  kDrop,               // another counter of dropped packets (loss only, not a discard reason)
  kNetdevDrop,         // statistics/rx_dropped and rx_missed_errors: the netdev loss ratio
  kCnpSent,            // congestion notification packets sent (notification point)
  kCnpHandled,         // CNPs that throttled this sender (reaction point)
  kEcnMarked,          // received packets with ECN CE
  kPauseMicroseconds,  // {rx,tx}_prio<p>_pause_duration, in µs
  kTransmitWait,       // PortXmitWait ticks
  kCorrectedBits,      // rx_corrected_bits_phy
  kPhyBits,            // rx_bits_phy
  kTcpRetransmit,      // Tcp: RetransSegs (node level)
  kTcpSent,            // Tcp: OutSegs (node level)
  kPauseStorm,         // tx_pause_storm_{warning,error}_events: the NIC's PFC storm guard
  // The values travel in CounterValue.meaning (proto/fabricscope/v1/telemetry.proto) and are
  // kept in the spool: a new meaning is appended here, and kMeaningCount names the last one.
};
inline constexpr size_t kMeaningCount = static_cast<size_t>(Meaning::kPauseStorm) + 1;

// The meaning a CounterValue.meaning carries: kNone for a value no agent sends (a newer or
// hostile producer). Pure.
inline Meaning MeaningFromWire(uint32_t v) {
  return v < kMeaningCount ? static_cast<Meaning>(v) : Meaning::kNone;
}

struct CounterMeaning {
  Meaning meaning = Meaning::kNone;
  // Raw width of an hw_counters file (the table's, else the mlx5 rule: np_*, rp_* and
  // rx_icrc_encapsulated 64-bit, the rest 32-bit); 0 for other groups (the caller's default).
  uint8_t width_bits = 0;
};

// The meaning of the counter `name` of `group` ("counters", "counters_ext", "statistics",
// "hw_counters", "ethtool", "tcp", "pma"). Read once, at discovery, into
// CounterDescriptor::meaning (collectors/port.h), which every consumer reads. Exact entries first
// (the table in counter_meaning.cc, each with its source), then the per-priority ethtool names
// (collectors::ParsePriorityStat), then any other name containing "discard", "drop" or
// "out_of_buffer" is kDrop. Pure; thread-safe; allocation-free after the first call.
CounterMeaning MeaningOf(absl::string_view group, absl::string_view name);

// True for an ethtool statistic the table names: a port-level "ethtool" row or a per-priority
// {rx,tx}_prio<p>_<kind> of a kind it lists. The agent reads these by default
// (collectors/ethtool.h, IsDefaultRoceStat): the table is the one list. Pure; thread-safe.
bool IsTableEthtoolStat(absl::string_view name);

// True when the table has a row of `group` (a source's counters: agent/source_registry.h
// SourceSpec::meaning_group). Pure; thread-safe.
bool HasMeaningGroup(absl::string_view group);

// Counters the basic metrics profile exports one by one although their group is full-only: what
// the shipped rules read (deploy/prometheus/fabricscope.rules.yml: the pre-FEC bit error ratio
// and PFC pause storms).
inline bool KeptAtBasicProfile(Meaning m) {
  return m == Meaning::kCorrectedBits || m == Meaning::kPhyBits || m == Meaning::kPauseStorm;
}

// Loss evidence for the loss patterns and the loss windows: kOutOfSequence, kRetransmit,
// kDiscard, kPriorityDiscard, kDrop, kNetdevDrop, kTcpRetransmit.
bool IsLoss(Meaning m);

// Congestion feedback: kCnpSent, kCnpHandled, kEcnMarked.
bool IsCongestionFeedback(Meaning m);

// The counter that counts every receive-buffer drop of an mlx5 port (ethtool, PPCNT).
inline constexpr absl::string_view kPortDiscardsCounter = "rx_discards_phy";

// True for a counter that only breaks down another one the port also has, and so must not be
// added to the port's loss count: mlx5's rx_prio<p>_discards counts, per priority, the received
// packets "dropped due to lack of buffers on a physical port" (kernel commit 827a8cb2,
// "net/mlx5e: Add discard counters per priority"), which is what rx_discards_phy counts for the
// whole port (kernel Documentation/networking/device_drivers/ethernet/mellanox/mlx5/
// counters.rst). One drop raises both: with rx_discards_phy present the per-priority ones are
// left out of the sum (they still say which priority: exporters/analysis/link_analysis.cc); without
// it they are the port's count.
inline bool IsLossBreakdown(Meaning m, bool port_has_discards_phy) {
  return port_has_discards_phy && m == Meaning::kPriorityDiscard;
}

}  // namespace fabricscope::collectors
