#include "exporters/state/recording_fetch.h"

#include <random>
#include <utility>

namespace fabricscope::exporters {

uint64_t RecordingFetch::FirstRequestId() {
  std::random_device rd;
  const uint64_t id = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return id == 0 ? 1 : id;
}

void RecordingFetch::SetSender(Sender sender) {
  absl::MutexLock lock(&mu_);
  sender_ = std::move(sender);
  ++sender_epoch_;
}

RecordingFetch::Result RecordingFetch::Fetch(const std::vector<std::string>& nodes,
                                             int64_t from_unix_ns, int64_t to_unix_ns,
                                             uint32_t max_samples_per_node, absl::Duration wait) {
  Result out;
  const absl::Time deadline = absl::Now() + wait;
  std::vector<uint64_t> ids;
  absl::MutexLock lock(&mu_);
  if (active_ >= kMaxConcurrent) {
    out.busy = nodes;
    stats_.busy_total += nodes.size();
    return out;
  }
  ++active_;
  for (const std::string& node : nodes) {
    v1::RecordingRequest req;
    if (next_id_ == 0) ++next_id_;  // 0 is no request
    req.set_id(next_id_++);
    req.set_from_unix_ns(from_unix_ns);
    req.set_to_unix_ns(to_unix_ns);
    req.set_max_samples(max_samples_per_node);
    ++stats_.requests_total;
    const Sent sent = sender_ ? sender_(node, req) : Sent::kNotConnected;
    if (sent == Sent::kBusy) {
      out.busy.push_back(node);
      ++stats_.busy_total;
      continue;
    }
    if (sent != Sent::kSent) {
      out.unreachable.push_back(node);
      ++stats_.unreachable_total;
      continue;
    }
    pending_[req.id()].node = node;
    ids.push_back(req.id());
  }
  const uint64_t epoch = sender_epoch_;
  auto done = [this, &ids, epoch]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (sender_epoch_ != epoch) return true;  // the sender changed: its streams are going
    for (uint64_t id : ids) {
      if (!pending_.at(id).answered) return false;
    }
    return true;
  };
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  const bool cut = sender_epoch_ != epoch;
  for (uint64_t id : ids) {
    auto it = pending_.find(id);
    Pending& p = it->second;
    if (p.answered) {
      out.answered.push_back(p.node);
      ++stats_.answered_total;
      for (LinkRecording& r : p.recordings) out.recordings.push_back(std::move(r));
    } else if (cut) {
      out.unreachable.push_back(p.node);
      ++stats_.unreachable_total;
    } else {
      out.timed_out.push_back(p.node);
      ++stats_.timed_out_total;
    }
    pending_.erase(it);
  }
  --active_;
  return out;
}

void RecordingFetch::Answer(const std::string& node, std::vector<LinkRecording> recordings) {
  absl::MutexLock lock(&mu_);
  for (LinkRecording& r : recordings) {
    auto it = pending_.find(r.r.request_id());
    if (it == pending_.end() || it->second.node != node) {
      ++stats_.late_total;
      continue;
    }
    it->second.answered = true;
    it->second.recordings.push_back(std::move(r));
  }
}

RecordingFetch::Stats RecordingFetch::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace fabricscope::exporters
