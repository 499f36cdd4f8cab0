#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "exporters/analysis/link_analysis.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

// Fetches agents' flight-recorder samples of a recent range on demand, for the timeline
// (exporters/exposition/timeline_fetch.h): asks each node over its stream (a
// v1::RecordingRequest in an AggregatorMessage, written by the node's stream reactor in
// exporters/ingest/telemetry_service.cc; in the standalone agent, straight to its pipeline) and
// waits, bounded, for the answers, which come back inside the node's next regular batch
// (FlightRecording.request_id) and reach Answer() from ClusterState's ingest.
//
// Bounds: at most kMaxConcurrent fetches at once (one more returns at once, every node counted
// busy); one request per node per fetch; answers of a request nobody waits for any more (its
// fetch timed out), of an unknown id, or from another node than the one asked are dropped and
// counted (late_total). A node's agent that does not know the message never answers: its wait
// ends at the deadline.
//
// Thread-safe. Lock order: this class's mutex, then the sender's (the stream registry's, then a
// reactor's); Answer() takes only this one.
class RecordingFetch {
 public:
  static constexpr size_t kMaxConcurrent = 4;
  // What a sender did with a request: sent (an answer may come), or not because the node has
  // no live stream here, or because its stream already has requests queued (busy).
  enum class Sent { kSent, kNotConnected, kBusy };
  // Sends `request` to `node`. Called under this class's mutex: must not call back into it.
  using Sender = std::function<Sent(const std::string& node, const v1::RecordingRequest&)>;

  // Replaces the sender; null = none (every node unreachable). After it returns, the old sender
  // is never called again: clear it before what it sends through goes away. Fetches waiting
  // then end at once, their unanswered nodes unreachable (the streams are going: a shutdown
  // does not wait for their deadlines).
  void SetSender(Sender sender);

  struct Result {
    std::vector<LinkRecording> recordings;  // every answer's recordings, node by node
    // busy: not asked, four fetches already running, or the node's stream had requests queued.
    std::vector<std::string> answered, timed_out, unreachable, busy;
  };
  // Asks every node in `nodes` for its samples with end in [from_unix_ns, to_unix_ns], at most
  // max_samples_per_node each (0 = the agent's own bound), and waits until all reachable nodes
  // answered or `wait` passed.
  Result Fetch(const std::vector<std::string>& nodes, int64_t from_unix_ns, int64_t to_unix_ns,
               uint32_t max_samples_per_node, absl::Duration wait);

  // One node's batch held answers (LinkAnalysis::OnBatch's requested recordings, all of one
  // batch, so of one or more complete answers).
  void Answer(const std::string& node, std::vector<LinkRecording> recordings);

  struct Stats {
    uint64_t requests_total = 0, answered_total = 0, timed_out_total = 0, unreachable_total = 0,
             busy_total = 0, late_total = 0;
  };
  Stats stats() const;

 private:
  struct Pending {
    std::string node;
    bool answered = false;
    std::vector<LinkRecording> recordings;
  };
  mutable absl::Mutex mu_;
  Sender sender_ ABSL_GUARDED_BY(mu_);
  // Random per process, so that an answer an agent replays from before an aggregator restart
  // (its spool, its unacked queue) does not pass for the answer to a new request.
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = FirstRequestId();
  static uint64_t FirstRequestId();
  size_t active_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t sender_epoch_ ABSL_GUARDED_BY(mu_) = 0;  // bumped by SetSender: waiters end
  absl::flat_hash_map<uint64_t, Pending> pending_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fabricscope::exporters
