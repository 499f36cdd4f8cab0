#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"

// The names of per-priority driver statistics, in a library of their own (no ioctl, no libibumad)
// so that the aggregator can read them too (exporters/analysis/link_analysis.cc: loss per PFC
// priority).

namespace fabricscope::collectors {

enum class StatDirection : uint8_t { kRx, kTx };

// A per-priority (PFC / traffic class) driver statistic, e.g. rx_prio3_pause_duration.
struct EthtoolStatName {
  StatDirection direction = StatDirection::kRx;
  uint8_t priority = 0;  // 0-7 (IEEE 802.1Qbb priority)
  std::string kind;      // what follows "prio<p>_": "bytes", "pause", "pause_duration", ...

  bool operator==(const EthtoolStatName&) const = default;
};

// Splits an mlx5-style per-priority stat name "<rx|tx>_prio<p>_<kind>" (kernel
// Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst). <p> is one
// digit 0-7; <kind> is any non-empty rest made of lowercase letters, digits and '_'. Returns
// nullopt for anything else (rx_prio8_bytes, rx_prio03_bytes, rx_prio3_, rx_bytes_phy). Pure; safe
// on any thread.
std::optional<EthtoolStatName> ParsePriorityStat(absl::string_view name);

}  // namespace fabricscope::collectors
