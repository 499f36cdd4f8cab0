// GrpcUplink's replay of what earlier agent processes left in the spool
// (collectors/uplink/uplink.h).
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <random>

#include "absl/time/time.h"
#include "collectors/uplink/uplink.h"
#include "glog/logging.h"

namespace fabricscope::uplink {
namespace {

// An aggregator that refuses a leftover's Hello or batches for one of these reasons refuses it
// again: the leftover is kept on disk (the next start tries again, until it expires) and this
// instance goes on.
bool GivesUp(const grpc::Status& st) {
  switch (st.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::PERMISSION_DENIED:
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return true;
    default:
      return false;
  }
}

// Acks of one replay stream, as its reader thread sees them.
struct ReplayAcks {
  absl::Mutex mu;
  uint64_t acked ABSL_GUARDED_BY(mu) = 0;
  bool broken ABSL_GUARDED_BY(mu) = false;
};

// How long one segment's acks may take before the stream is given up and opened again.
constexpr absl::Duration kSegmentAckTimeout = absl::Seconds(30);

}  // namespace

void GrpcUplink::ReplayLeftovers(v1::Telemetry::Stub& stub, std::stop_token& stop) {
  std::mt19937_64 rng(std::random_device{}());
  for (const Spool::Leftover& l : options_.spool->Leftovers()) {
    LOG(INFO) << "spool: replaying " << l.segments.size() << " segments of instance "
              << l.hello.instance_id() << " (an earlier agent process)";
    size_t next = 0;
    int backoff_ms = options_.initial_backoff_ms;
    while (next < l.segments.size() && !stop.stop_requested()) {
      const size_t before = next;
      const grpc::Status st = ReplayStream(stub, l, &next, stop);
      if (next == l.segments.size()) break;
      if (GivesUp(st)) {
        LOG(WARNING) << "spool: the aggregator refused the replay of instance "
                     << l.hello.instance_id() << " (" << st.error_message()
                     << "); kept on disk for the next start";
        break;
      }
      if (next > before) backoff_ms = options_.initial_backoff_ms;
      if (!SleepBackoff(&backoff_ms, rng)) return;
    }
  }
}

std::vector<v1::Batch> GrpcUplink::NextLeftoverSegment(const Spool::Leftover& leftover,
                                                       size_t* next) {
  for (; *next < leftover.segments.size(); ++*next) {
    absl::StatusOr<std::vector<v1::Batch>> batches = Spool::ReadSegment(leftover.segments[*next]);
    if (batches.ok() && !batches->empty()) return *std::move(batches);
    options_.spool->RemoveLeftoverSegment(leftover.segments[*next], 0);
  }
  return {};
}

grpc::Status GrpcUplink::ReplayStream(v1::Telemetry::Stub& stub, const Spool::Leftover& leftover,
                                      size_t* next, std::stop_token& stop) {
  // The first segment with a batch in it sets where the stream resumes.
  std::vector<v1::Batch> batches = NextLeftoverSegment(leftover, next);
  if (batches.empty()) return grpc::Status::OK;
  grpc::ClientContext ctx;
  Authorize(ctx);
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return grpc::Status::CANCELLED;
    active_ctx_ = &ctx;
  }
  v1::AgentMessage hello;
  *hello.mutable_hello() = leftover.hello;
  hello.mutable_hello()->set_resume_seq(batches.front().seq());
  hello.mutable_hello()->set_acked_seq(batches.front().seq() - 1);
  auto stream = stub.Stream(&ctx);
  ReplayAcks acks;
  std::thread reader;
  if (stream->Write(hello)) {
    reader = std::thread([&] {
      v1::AggregatorMessage in;
      while (stream->Read(&in)) {
        absl::MutexLock lock(&acks.mu);
        if (in.has_ack()) acks.acked = std::max(acks.acked, in.ack().seq());
      }
      absl::MutexLock lock(&acks.mu);
      acks.broken = true;
    });
    while (*next < leftover.segments.size() && !stop.stop_requested()) {
      bool written = true;
      for (const v1::Batch& b : batches) {
        v1::AgentMessage m;
        *m.mutable_batch() = b;
        if (!(written = stream->Write(m))) break;
      }
      const uint64_t last = batches.back().seq();
      bool acked = false;
      if (written) {
        absl::MutexLock lock(&acks.mu);
        auto done = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(acks.mu) {
          return acks.broken || acks.acked >= last;
        };
        acks.mu.AwaitWithTimeout(absl::Condition(&done), kSegmentAckTimeout);
        acked = acks.acked >= last;
      }
      if (!acked) break;
      options_.spool->RemoveLeftoverSegment(leftover.segments[(*next)++], batches.size());
      batches = NextLeftoverSegment(leftover, next);
    }
    ctx.TryCancel();  // done, or broken: the reader's Read returns either way
    stream->WritesDone();
    reader.join();
  }
  grpc::Status st = stream->Finish();
  {
    absl::MutexLock lock(&mu_);
    active_ctx_ = nullptr;
  }
  if (*next == leftover.segments.size()) {
    LOG(INFO) << "spool: instance " << leftover.hello.instance_id() << " replayed and acked";
    return grpc::Status::OK;
  }
  return st;
}

}  // namespace fabricscope::uplink
