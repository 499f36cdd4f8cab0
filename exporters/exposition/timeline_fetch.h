#pragma once

// The agents' own samples on the timeline (issue 37): the flight recordings they attached to
// batches (around slow collectives, bursts with loss), and, for the part of a timeline's range
// their flight recorders still hold (10 s by default), the samples fetched on demand over their
// streams (exporters/state/recording_fetch.h).

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "exporters/analysis/link_analysis.h"
#include "exporters/exposition/timeline_json.h"

namespace fabricscope::exporters {

class ClusterState;
struct TimelineScope;

// At most this many samples are fetched for one timeline in all (shared by its nodes, at most
// kFetchMaxNodes of them), so that with the rest of the trace it stays within
// kMaxTimelineEvents (exporters/exposition/history_http.h); one node gets at most the agent's
// own bound (agent/pipeline.h requested_samples_max, 65,536).
inline constexpr size_t kFetchMaxSamples = 200'000;
inline constexpr size_t kFetchMaxNodes = 64;
// A node's window counts up to this much in a fetch's wait (its answer comes with its next
// batch): a node with longer windows is not waited for, and its wait ends "no answer in time".
inline constexpr double kFetchMaxWindowSeconds = 5;

// Adds the samples of `recordings` whose time lies in [from_ns, to_ns) (Unix) as
// "samples (flight recorder)" counter tracks of in->counters, one per (node, port), merged with
// such tracks already there (points by time, one per time). Recordings of nodes `node_ok`
// refuses are skipped. Utilization that is not finite (no line rate) draws as 0.
void AddSampleTracks(const std::vector<LinkRecording>& recordings, int64_t from_ns, int64_t to_ns,
                     const std::function<bool(const std::string&)>& node_ok, TimelineInput* in);

// Fetches the samples of the part of scope's range that the flight recorders still hold from the
// trace's nodes (scope.node, else the nodes of in's slices and counters; at most
// kFetchMaxNodes, in name order) that stream to this aggregator, waiting at most `wait` plus
// the longest window of those nodes, each counted up to kFetchMaxWindowSeconds (their answers
// come in their next batch), and adds them (AddSampleTracks) within max_events (none when the
// trace is already at it). in->notes says which nodes answered, timed out, were not connected,
// were busy or left out, and which hold no flight recorder here. Nothing is asked when the
// range ends before what every recorder holds.
void AddFetchedSamples(const ClusterState& state, const TimelineScope& scope, size_t max_events,
                       absl::Duration wait, TimelineInput* in);

}  // namespace fabricscope::exporters
