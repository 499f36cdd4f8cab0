#pragma once

#include <cmath>
#include <cstdint>

namespace fabricscope::common {

// The one-byte utilization code of v1::UtilizationSeries (proto/fabricscope/v1/telemetry.proto):
// 0..254 = utilization x 250 rounded to nearest (steps of 0.004 of line rate; 254 stands for
// 1.016 or more, which sampling jitter produces on a saturated link), 255 = no sample covered
// the bucket. Shared by the agent (encoder) and the aggregator (decoder).
inline constexpr uint8_t kUtilizationMissing = 255;
inline constexpr double kUtilizationScale = 250.0;

inline uint8_t EncodeUtilization(double utilization) {
  if (!(utilization >= 0)) return utilization < 0 ? 0 : kUtilizationMissing;  // NaN: missing
  const double q = std::round(utilization * kUtilizationScale);
  return q >= 254 ? 254 : static_cast<uint8_t>(q);
}

// NaN for kUtilizationMissing.
inline double DecodeUtilization(uint8_t code) {
  return code == kUtilizationMissing ? NAN : static_cast<double>(code) / kUtilizationScale;
}

}  // namespace fabricscope::common
