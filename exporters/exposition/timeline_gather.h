#pragma once

// What /api/timeline draws, gathered from the state's memory and the event history
// (exporters/exposition/history_http.h says which part comes from where).

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "exporters/exposition/timeline_json.h"

namespace fabricscope::exporters {

class ClusterState;
class HistoryStore;

struct TimelineScope {
  std::string job, node;           // "" = any
  uint64_t comm = 0;               // whole hash; 0 = any
  int64_t comm_label = -1;         // CommLabel's top 32 bits; -1 = any
  int64_t from_ns = 0, to_ns = 0;  // Unix
};

// The range's slices, waits, kernels, counters and instants. history null: memory only.
// Errors: NotFound for a job neither the state nor the history knows; ResourceExhausted when
// the trace would pass max_events (the message says the count and the limit).
absl::StatusOr<TimelineInput> GatherTimeline(const ClusterState& state, const HistoryStore* history,
                                             const TimelineScope& scope, size_t max_events);

}  // namespace fabricscope::exporters
