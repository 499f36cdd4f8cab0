#include "agent/recording_requests.h"

#include <algorithm>

namespace fabricscope::agent {

namespace {

// The times an aggregator admits in a batch: |t| <= 2^61 ns (exporters/ingest/message_checks.cc
// TimeOk); a recording's from/to outside them would have the whole batch refused.
constexpr int64_t kTimeBound = int64_t{1} << 61;

// unix - offset, clamped to the admitted times: an aggregator's nonsense range selects nothing
// rather than wrapping or poisoning the batch.
int64_t ToMonotonic(int64_t unix_ns, int64_t offset_ns) {
  int64_t out = 0;
  if (__builtin_sub_overflow(unix_ns, offset_ns, &out))
    out = unix_ns < 0 ? -kTimeBound : kTimeBound;
  return std::clamp(out, -kTimeBound, kTimeBound);
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
  size_t attached = 0;  // max_samples is the whole window's: the batch stays within its bound
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
    const size_t left = max_samples - attached;
    const size_t bound = req.max_samples() > 0 ? std::min<size_t>(req.max_samples(), left) : left;
    const size_t share = ports.empty() ? 0 : bound / ports.size();
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
