#pragma once

#include <string>

#include "absl/status/status.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

// Checks every v1::Histogram inside `message` (any depth: agent stats, port windows, GPU
// totals) before anything is exported from it, as the text format requires of a histogram
// (Prometheus "Exposition formats": the le buckets are cumulative, their bounds increase, the
// +Inf bucket is implicit and equals the count):
//   - upper_bounds finite and strictly increasing (prometheus-cpp adds +Inf itself);
//   - bucket_counts one per bound, plus at most one for +Inf;
//   - the counts summing to at most `count` (the +Inf bucket), and `sum` finite.
// Returns InvalidArgument naming the field path ("ports[3].transmit.microburst_duration_seconds:
// upper_bounds not increasing at 2") of the first bad one. Cost: a walk of the message types
// that can hold a Histogram only (collectives, kernel spans and the like are skipped by type).
absl::Status CheckHistograms(const google::protobuf::Message& message);

}  // namespace fabricscope::exporters
