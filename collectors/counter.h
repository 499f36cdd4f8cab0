#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"

namespace fabricscope::collectors {

// What one read of a counter file produced.
enum class ReadStatus : uint8_t {
  kOk = 0,
  kNotRead = 1,      // not due this tick (slower counter group)
  kUnavailable = 2,  // the driver says the counter does not exist, e.g. "N/A (no PMA)"
  kError = 3,        // the read failed (file vanished, permission denied, garbage)
};

// How a hardware counter behaves at its maximum.
enum class CounterBehavior : uint8_t {
  // Wraps to 0 after 2^width - 1 (netdev statistics; IB 64-bit extended data/packet counters).
  kWrapping,
  // Sticks at 2^width - 1 and stops counting: IB PMA PortCounters error counters
  // (IBTA spec vol. 1, 16.1.3.5 PortCounters: "shall stop at all ones").
  kSaturating,
};

// Where a counter's value goes in the port model.
enum class CounterRole : uint8_t {
  kTransmitBytes,
  kReceiveBytes,
  kTransmitPackets,
  kReceivePackets,
  kError,  // exported as fabricscope_port_errors_total{kind=<name>}
  kOther,  // any other event counter (hw_counters, ethtool, TCP): exported by group and name
  kState,  // not a counter: a level (link state, rate) whose changes are events
};

// Bytes or packets: the counters utilization and microbursts are made of, read by the fast
// sampler (agent/agent.cc).
inline bool IsTrafficRole(CounterRole r) {
  return r == CounterRole::kTransmitBytes || r == CounterRole::kReceiveBytes ||
         r == CounterRole::kTransmitPackets || r == CounterRole::kReceivePackets;
}

struct CounterSpec {
  uint8_t width_bits = 64;  // 4, 8, 16, 32 or 64
  CounterBehavior behavior = CounterBehavior::kWrapping;
  // Units per raw count: 4 for IB port_xmit_data / port_rcv_data, which count 4-octet words
  // (perfquery(8); kernel Documentation/ABI/stable/sysfs-class-infiniband). Applied to deltas
  // and totals, never to the raw value the delta logic compares.
  uint32_t scale = 1;
  // A 64-bit data or packet counter of counters/ that may really be the 32-bit PortCounters one
  // (IBTA vol. 1 16.1.3.5: PortXmitData/PortRcvData/PortXmitPkts/PortRcvPkts are 32 bits and
  // "stop at all ones"), as on mlx4 ports that serve the 64-bit values in counters_ext/ (the
  // legacy layout, gpud#943): reading 2^32 - 1 twice in a row is then saturation, not silence.
  bool stuck_at_32_bits_saturates = false;
};

// Largest raw value a counter of this width holds.
inline constexpr uint64_t CounterMax(uint8_t width_bits) {
  return width_bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << width_bits) - 1;
}

// Parses the text of a sysfs counter file: optional leading blanks, a decimal number, optional
// trailing blanks/newline. Text starting with "N/A" gives kUnavailable; anything else that is not
// a number that fits in 64 bits gives kError. Does not allocate (safe on the sampler thread).
ReadStatus ParseCounterText(absl::string_view text, uint64_t* value);

enum class DeltaKind : uint8_t {
  kNormal,
  kWrapped,    // the counter passed its maximum and restarted at 0
  kReset,      // the counter went backwards without a plausible wrap: device reset or re-plug
  kSaturated,  // a saturating counter sits at its maximum: increments are being lost
  kGap,        // no delta: one of the two reads was not OK
};

struct Delta {
  uint64_t raw = 0;  // increment in raw counter units (multiply by CounterSpec::scale)
  DeltaKind kind = DeltaKind::kGap;
};

// Increment of a counter between two reads.
//
// - Wrapping counters: cur < prev is a wrap when the unfolded increment
//   (2^width - prev + cur) is at most max_plausible_raw; otherwise it is a reset and the
//   increment is cur (the counter restarted from 0). A 64-bit counter that is really 32 bits
//   wide (older drivers, IB PortCounters without the extended set) is unfolded at 2^32 under the
//   same plausibility rule, and only while max_plausible_raw < 2^31 (otherwise a reset and a
//   32-bit wrap are indistinguishable, and it is a reset). max_plausible_raw = 0 means "no bound
//   known": a counter narrower than 64 bits then wraps only from the top quarter of its range (else
//   it was reset), and a 64-bit decrease is a reset unless it starts in the top quarter of 2^64.
// - Saturating counters: cur == max reports kSaturated with the increment up to the maximum,
//   never a wrapped or huge delta; cur < prev is a reset (counters cleared, e.g. perfquery -x).
// - stuck_at_32_bits_saturates: prev == cur == 2^32 - 1 is kSaturated with no increment.
// Pure function; safe on any thread.
Delta ComputeDelta(const CounterSpec& spec, uint64_t prev, uint64_t cur,
                   uint64_t max_plausible_raw);

}  // namespace fabricscope::collectors
