#include "agent/recording_requests.h"

#include <algorithm>
#include <limits>

namespace fabricscope::agent {

namespace {

// unix - offset, saturated: an aggregator's nonsense range selects nothing rather than wrapping.
int64_t ToMonotonic(int64_t unix_ns, int64_t offset_ns) {
  int64_t out = 0;
  if (!__builtin_sub_overflow(unix_ns, offset_ns, &out)) return out;
  return unix_ns < 0 ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max();
}

}  // namespace

bool RecordingInbox::Push(const v1::RecordingRequest& request) {
  absl::MutexLock lock(&mu_);
  if (request.id() == 0 || request.to_unix_ns() < request.from_unix_ns() ||
      pending_.size() >= kMaxPending) {
    ++dropped_;
    return false;
  }
  pending_.push_back(request);
  return true;
}

std::vector<v1::RecordingRequest> RecordingInbox::Take() {
  absl::MutexLock lock(&mu_);
  std::vector<v1::RecordingRequest> out;
  out.swap(pending_);
  return out;
}

size_t AnswerRecordingRequests(const FlightRecorder& recorder,
                               const std::vector<v1::RecordingRequest>& requests,
                               int64_t unix_offset_ns, size_t max_samples, v1::Batch* batch) {
  size_t attached = 0;
  for (const v1::RecordingRequest& req : requests) {
    std::vector<size_t> ports;
    if (req.port_index_size() == 0) {
      for (size_t p = 0; p < recorder.ports(); ++p) ports.push_back(p);
    } else {
      for (uint32_t p : req.port_index()) {
        if (p < recorder.ports() && std::find(ports.begin(), ports.end(), p) == ports.end()) {
          ports.push_back(p);
        }
      }
    }
    const size_t bound =
        req.max_samples() > 0 ? std::min<size_t>(req.max_samples(), max_samples) : max_samples;
    const size_t share = ports.empty() ? 0 : std::max<size_t>(1, bound / ports.size());
    const int64_t from = ToMonotonic(req.from_unix_ns(), unix_offset_ns);
    const int64_t to = ToMonotonic(req.to_unix_ns(), unix_offset_ns);
    for (size_t p : ports) {
      v1::FlightRecording* r = batch->add_flight_recordings();
      r->set_reason("requested");
      r->set_request_id(req.id());
      attached += recorder.Fill(p, from, to, share, r);
    }
  }
  return attached;
}

}  // namespace fabricscope::agent
