#pragma once

// The event history's endpoints (issue 37):
//   /api/history        ?job=&comm=&node=&kind=&from=&to=&limit=&cursor=&order=: a page of events
//                       in time order (order=desc: newest first, its cursors paging back),
//                       {"events":[...], "next_cursor", "history":{stats}}; each event as its JSON
//                       line (exporters/history/history_jsonl.h). job: the job's events and its
//                       nodes' node-level ones while it ran (HistoryQuery); comm: the 8-hex-digit
//                       label or the 16-digit hash; kind: one of kHistoryKinds; from, to: Unix
//                       seconds (fractions allowed) or RFC 3339; limit 1..10,000 (100); cursor: a
//                       page's next_cursor. Any other parameter, or a bad value, is a 400 naming
//                       it. 503 when the history is off.
//   /api/history/jobs   ?job=&limit=: the jobs the history knows, most recent first, with their
//                       nodes and first and last times (the morning after, when the live job
//                       table has forgotten them).
//   /api/timeline       ?job=|comm=|node=&from=&to=: a Trace Event Format trace of that range
//                       (exporters/exposition/timeline_json.h), as a download (Content-
//                       Disposition: fabricscope-timeline-<from>.json). from and to as above; to
//                       defaults to now, from to 60 s before to. A range over kMaxTimelineNs or a
//                       trace over kMaxTimelineEvents is a 400 that says the limit; an unknown job
//                       a 404. What the range is made of: the collectives, instances, kernels and
//                       per-port utilization the aggregator still holds in memory (1 ms buckets
//                       for the last 10 s), and the history's events for the rest (10 s
//                       utilization, slow and classified collectives, instances); otherData.notes
//                       says which. For the part of the range the agents' flight recorders still
//                       hold (their last 10 s by default), their raw samples are fetched over
//                       their streams (exporters/exposition/timeline_fetch.h): the answer waits
//                       up to kTimelineFetchWait plus the nodes' window for them.

#include <cstddef>
#include <cstdint>

#include "absl/time/time.h"

namespace httplib {
class Server;
}

namespace fabricscope::exporters {

class ClusterState;
class HistoryStore;

inline constexpr int64_t kMaxTimelineNs = 600'000'000'000;  // 10 min
inline constexpr size_t kMaxTimelineEvents = 500'000;
// How long a timeline waits for fetched samples beyond the nodes' longest window (their answers
// come in their next batch).
inline constexpr absl::Duration kTimelineFetchWait = absl::Milliseconds(1500);

// history null: the history is off (/api/history answers 503, the timeline uses memory only).
// Both must outlive the server.
void RegisterHistoryRoutes(httplib::Server& server, const ClusterState& state,
                           const HistoryStore* history);

}  // namespace fabricscope::exporters
