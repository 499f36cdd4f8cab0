#include "collectors/counter.h"

namespace fabricscope::collectors {

ReadStatus ParseCounterText(absl::string_view text, uint64_t* value) {
  size_t i = 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
  if (text.substr(i, 3) == "N/A") return ReadStatus::kUnavailable;
  if (i == text.size() || text[i] < '0' || text[i] > '9') return ReadStatus::kError;
  uint64_t v = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
    if (v > (~uint64_t{0} - digit) / 10) return ReadStatus::kError;  // overflow
    v = v * 10 + digit;
  }
  for (; i < text.size(); ++i) {
    if (text[i] != ' ' && text[i] != '\n' && text[i] != '\t' && text[i] != '\r') {
      return ReadStatus::kError;
    }
  }
  *value = v;
  return ReadStatus::kOk;
}

Delta ComputeDelta(const CounterSpec& spec, uint64_t prev, uint64_t cur,
                   uint64_t max_plausible_raw) {
  const uint64_t max = CounterMax(spec.width_bits);
  if (spec.behavior == CounterBehavior::kSaturating) {
    if (cur < prev) return {cur, DeltaKind::kReset};
    return {cur - prev, cur >= max ? DeltaKind::kSaturated : DeltaKind::kNormal};
  }
  if (spec.stuck_at_32_bits_saturates && prev == CounterMax(32) && cur == prev) {
    return {0, DeltaKind::kSaturated};
  }
  if (cur >= prev) return {cur - prev, DeltaKind::kNormal};
  // Went backwards: a wrap at the declared width, a wrap at 32 bits of a counter declared wider,
  // or a reset.
  if (spec.width_bits < 64) {
    const uint64_t unfolded = (max - prev) + cur + 1;
    // With a bound, the unfolded increment must fit in it. Without one, a wrap must start in
    // the top quarter of the range: a counter at 1,000 that reads 3 was reset, not wrapped.
    const bool plausible =
        max_plausible_raw != 0 ? unfolded <= max_plausible_raw : prev >= max - (max >> 2);
    if (prev <= max && plausible) return {unfolded, DeltaKind::kWrapped};
    return {cur, DeltaKind::kReset};
  }
  constexpr uint64_t kMax32 = CounterMax(32);
  // Only while the bound is well below 2^32 can a 32-bit wrap be told from a reset: after a
  // long gap on a fast link (400 Gb/s moves 2^32 bytes in 86 ms) both look the same, and a
  // phantom 4 GiB is worse than a missed wrap.
  if (prev <= kMax32 && max_plausible_raw != 0 && max_plausible_raw < (uint64_t{1} << 31)) {
    const uint64_t unfolded = (kMax32 - prev) + cur + 1;
    if (unfolded <= max_plausible_raw) return {unfolded, DeltaKind::kWrapped};
  }
  if (max_plausible_raw == 0 && prev > cur && (prev - cur) > (max - (max >> 2))) {
    // A 64-bit counter within a quarter of 2^64 of its maximum wrapped.
    return {(max - prev) + cur + 1, DeltaKind::kWrapped};
  }
  return {cur, DeltaKind::kReset};
}

}  // namespace fabricscope::collectors
