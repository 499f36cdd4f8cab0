#pragma once

// A line rate as a user writes it (agent --line-rate, the aggregator's topology file).

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace fabricscope::common {

// Parses a line rate given by a user, in tc(8) style: a number followed by bit, kbit, mbit,
// gbit or tbit (case-insensitive; "G"/"M"/"K"/"T" alone and "Gb/s" forms are accepted too),
// or a bare number of bits per second. Returns bytes per second (decimal prefixes, /8).
// Errors: InvalidArgument on anything else, or a zero or negative rate.
absl::StatusOr<uint64_t> ParseBitRate(absl::string_view text);

}  // namespace fabricscope::common
