#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "agent/flight_recorder.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::agent {

// The aggregator's requests for flight-recorder samples (v1::RecordingRequest, sent on the
// stream: collectors/uplink/uplink.h; or by the standalone agent's own timeline), waiting for
// the pipeline thread to answer them when its window closes (Pipeline::CloseWindow).
//
// Bounded: at most kMaxPending requests wait; one more is dropped and counted (dropped()), and
// its waiter at the aggregator ends at its deadline. A request without an id, or with to < from,
// is dropped the same way. Thread-safe.
class RecordingInbox {
 public:
  static constexpr size_t kMaxPending = 8;

  // From any thread. Returns false when the request was dropped.
  bool Push(const v1::RecordingRequest& request);
  // The waiting requests, oldest first; the inbox is empty after.
  std::vector<v1::RecordingRequest> Take();
  uint64_t dropped() const {
    absl::MutexLock lock(&mu_);
    return dropped_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<v1::RecordingRequest> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
};

// Answers `requests` into *batch: per request, one FlightRecording per asked port that exists
// (every port when it names none), reason "requested", request_id = the request's id, holding
// the recorder's samples whose end lies in [from, to], converted to CLOCK_MONOTONIC by
// unix_offset_ns (unix = monotonic + offset, collectors/clock.h) and clamped to the times the
// aggregator admits (|t| <= 2^61 ns). max_samples bounds the whole answer (all requests: one
// batch); a request gets what its predecessors left, less when its own max_samples says so,
// shared equally by its ports (the earliest of each kept, FlightRecording.truncated set where
// cut). A port the recorder holds nothing of in the range, or that the bound leaves no share,
// still gets its (empty) recording, so that every request is answered. Returns the samples
// attached.
size_t AnswerRecordingRequests(const FlightRecorder& recorder,
                               const std::vector<v1::RecordingRequest>& requests,
                               int64_t unix_offset_ns, size_t max_samples, v1::Batch* batch);

}  // namespace fabricscope::agent
