#include "collectors/uplink/uplink.h"

#include <grpcpp/grpcpp.h>
#include <pthread.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "collectors/common/stream_auth.h"
#include "glog/logging.h"

namespace fabricscope::uplink {

GrpcUplink::GrpcUplink(UplinkOptions options, v1::Hello hello)
    : options_(std::move(options)), hello_(std::move(hello)) {
  thread_ = std::jthread([this](std::stop_token st) { Run(st); });
}

GrpcUplink::~GrpcUplink() { Shutdown(0); }

void GrpcUplink::Submit(v1::Batch batch) {
  absl::MutexLock lock(&mu_);
  batch.set_seq(next_seq_++);
  // Spooled before it can be sent: a crash from here on loses nothing. A failed append (a
  // full disk past what eviction frees) is counted by the spool; the batch is still queued.
  if (options_.spool != nullptr) options_.spool->Append(batch).IgnoreError();
  queue_.push_back(std::move(batch));
  while (queue_.size() > options_.max_queued_batches) {
    const uint64_t seq = queue_.front().seq();
    queue_.pop_front();
    // On disk it is read back when its turn comes; otherwise it is gone.
    if (options_.spool == nullptr || !options_.spool->Holds(seq)) dropped_.fetch_add(1);
  }
}

void GrpcUplink::OnAck(uint64_t seq) {
  {
    absl::MutexLock lock(&mu_);
    while (!queue_.empty() && queue_.front().seq() <= seq) queue_.pop_front();
    if (seq > acked_.load()) acked_.store(seq);
  }
  if (options_.spool != nullptr) options_.spool->Acked(seq);
}

uint64_t GrpcUplink::FirstHeldLocked() const {
  uint64_t first = queue_.empty() ? next_seq_ : queue_.front().seq();
  if (options_.spool != nullptr) {
    const uint64_t spooled = options_.spool->FirstSeq();
    if (spooled != 0 && spooled > acked_.load()) first = std::min(first, spooled);
  }
  return first;
}

bool GrpcUplink::NextToSend(uint64_t cursor, v1::Batch* out) {
  for (; cursor < next_seq_; ++cursor) {
    if (!queue_.empty() && cursor >= queue_.front().seq()) {
      // The queue is seq-ascending without holes.
      *out = queue_[static_cast<size_t>(cursor - queue_.front().seq())];
      return true;
    }
    if (options_.spool != nullptr) {
      if (std::optional<v1::Batch> b = options_.spool->Read(cursor)) {
        *out = *std::move(b);
        return true;
      }
    }
    // Dropped (full queue without a spool, or the spool full): the aggregator sees the gap and
    // counts it lost.
  }
  return false;
}

void GrpcUplink::Shutdown(int timeout_ms) {
  if (!thread_.joinable()) return;
  uint64_t unacked = 0, last = 0;
  {
    absl::MutexLock lock(&mu_);
    auto all_acked = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return acked_.load() + 1 >= next_seq_;
    };
    mu_.AwaitWithTimeout(absl::Condition(&all_acked), absl::Milliseconds(timeout_ms));
    last = next_seq_ - 1;
    unacked = last - std::min(acked_.load(), last);
    stopping_ = true;
    if (active_ctx_) active_ctx_->TryCancel();
  }
  thread_.request_stop();
  thread_.join();
  LOG(INFO) << "uplink: last batch " << last << ", acked through " << std::min(acked_.load(), last);
  if (unacked == 0) return;
  if (options_.spool != nullptr) {
    options_.spool->Sync();
    LOG(INFO) << unacked << " batches not acked by the aggregator at exit stay in the spool; "
              << "the next start sends them";
  } else {
    dropped_.fetch_add(unacked);
    LOG(WARNING) << unacked << " batches not acked by the aggregator at exit are dropped "
                 << "(no --spool-dir; counted in fabricscope_agent_uplink_dropped_batches_total)";
  }
}

void GrpcUplink::Run(std::stop_token stop) {
  pthread_setname_np(pthread_self(), "fs-uplink");
  grpc::ChannelArguments args;
  // Keepalive matches the aggregator's (exporters/ingest/telemetry_service.cc).
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10'000);
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, options_.initial_backoff_ms);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, options_.initial_backoff_ms);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, options_.max_backoff_ms);
  if (!options_.tls.server_name.empty()) {
    args.SetString(GRPC_SSL_TARGET_NAME_OVERRIDE_ARG, options_.tls.server_name);
  }
  auto channel =
      grpc::CreateCustomChannel(options_.target, common::ChannelCredentialsFor(options_.tls), args);
  auto stub = v1::Telemetry::NewStub(channel);
  if (options_.spool != nullptr) ReplayLeftovers(*stub, stop);
  std::mt19937_64 rng(std::random_device{}());
  int backoff_ms = options_.initial_backoff_ms;
  bool warned = false;
  int waits = 0;
  while (!stop.stop_requested()) {
    // Wait for a connection in short steps so that Shutdown is never held up by a connect.
    if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                   std::chrono::milliseconds(250))) {
      // Said once, with the reason when the channel has one: a refused connection, or a TLS
      // handshake that failed and why (a missing client certificate, an unknown CA).
      const bool failing = channel->GetState(false) == GRPC_CHANNEL_TRANSIENT_FAILURE;
      if (!warned && (failing || ++waits >= 8)) {
        const std::string why = failing ? WhyUnreachable(*stub) : "";
        LOG(WARNING) << "aggregator " << options_.target << " unreachable"
                     << (why.empty() ? "" : " (" + why + ")")
                     << "; batches are queued until it answers";
        warned = true;
      }
      absl::MutexLock lock(&mu_);
      if (stopping_) break;
      continue;
    }
    const uint64_t acked_before = acked_.load();
    const grpc::Status st = RunStream(*stub, stop);
    if (stop.stop_requested()) break;
    // A stream ended before any ack refused the Hello (a limit, an invalid field, a duplicate):
    // no batch was refused, and none is dropped.
    if (acked_.load() > acked_before || (stream_acked_.load() && DropRefused(st))) {
      backoff_ms = options_.initial_backoff_ms;
    }
    if (!SleepBackoff(&backoff_ms, rng)) break;
  }
}

std::string GrpcUplink::WhyUnreachable(v1::Telemetry::Stub& stub) const {
  // A channel in TRANSIENT_FAILURE fails a fail-fast call at once with its connection's last
  // error (gRPC's "failed to connect to all addresses; last error: ..."): nothing reaches the
  // aggregator. Should it have connected meanwhile, the stream carries the token and ends
  // before a Hello, which the aggregator neither stores nor counts as refused.
  grpc::ClientContext ctx;
  Authorize(ctx);
  ctx.set_wait_for_ready(false);
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(1));
  auto stream = stub.Stream(&ctx);
  stream->WritesDone();
  return stream->Finish().error_message();
}

bool GrpcUplink::SleepBackoff(int* backoff_ms, std::mt19937_64& rng) {
  const int sleep_ms = std::uniform_int_distribution<int>(*backoff_ms / 2, *backoff_ms)(rng);
  *backoff_ms = std::min(*backoff_ms * 2, options_.max_backoff_ms);
  absl::MutexLock lock(&mu_);
  mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::Milliseconds(sleep_ms));
  return !stopping_;
}

void GrpcUplink::Authorize(grpc::ClientContext& ctx) const {
  if (!options_.auth_token.empty()) {
    ctx.AddMetadata(common::kAuthMetadataKey,
                    std::string(common::kBearerPrefix) + options_.auth_token);
  }
}

bool GrpcUplink::DropRefused(const grpc::Status& st) {
  if (st.error_code() != grpc::StatusCode::INVALID_ARGUMENT &&
      st.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED) {
    return false;
  }
  uint64_t seq = 0;
  {
    absl::MutexLock lock(&mu_);
    if (queue_.empty()) return false;
    seq = queue_.front().seq();
    // The ack of the batches before it may have been lost with the stream: the next stream's
    // Hello ack settles that. Only a batch that is the first unacked one at two refusals in a
    // row is the refused one.
    if (seq != suspect_seq_) {
      suspect_seq_ = seq;
      return false;
    }
    queue_.pop_front();
  }
  const uint64_t n = refused_.fetch_add(1) + 1;
  if (n == 1 || n % 100 == 0) {
    LOG(WARNING) << "aggregator " << options_.target << " refused batch " << seq << " ("
                 << st.error_message() << "); dropped, not resent (" << n
                 << " so far, fabricscope_agent_uplink_refused_batches_total)";
  }
  return true;
}

grpc::Status GrpcUplink::RunStream(v1::Telemetry::Stub& stub, std::stop_token& stop) {
  grpc::ClientContext ctx;
  uint64_t cursor = 0;
  v1::AgentMessage hello_msg;
  {
    absl::MutexLock lock(&mu_);
    if (stopping_) return grpc::Status::CANCELLED;
    active_ctx_ = &ctx;
    stream_broken_ = false;
    cursor = FirstHeldLocked();
    *hello_msg.mutable_hello() = hello_;
    hello_msg.mutable_hello()->set_resume_seq(cursor);
    hello_msg.mutable_hello()->set_acked_seq(acked_.load());
  }
  Authorize(ctx);
  auto stream = stub.Stream(&ctx);
  if (!stream->Write(hello_msg)) {
    grpc::Status st = stream->Finish();
    LOG(WARNING) << "aggregator " << options_.target
                 << " refused the stream: " << st.error_message();
    absl::MutexLock lock(&mu_);
    active_ctx_ = nullptr;
    return grpc::Status::CANCELLED;  // the Hello, not a batch, was refused
  }
  connected_.store(true);
  connects_.fetch_add(1);

  // "connected" only once the aggregator acknowledged the Hello: a Hello it refuses (a token,
  // an identity, a limit) was written all the same, and reads as success until its status.
  stream_acked_.store(false);
  std::thread reader([this, &stream, cursor] {
    v1::AggregatorMessage in;
    while (stream->Read(&in)) {
      if (!stream_acked_.exchange(true)) {
        LOG(INFO) << "connected to aggregator " << options_.target
                  << " (Hello acknowledged), resuming at batch " << cursor;
      }
      if (in.has_ack()) OnAck(in.ack().seq());
      if (in.has_recording_request() && options_.on_recording_request) {
        options_.on_recording_request(in.recording_request());
      }
    }
    absl::MutexLock lock(&mu_);
    stream_broken_ = true;
  });

  while (!stop.stop_requested()) {
    v1::AgentMessage out;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this, cursor]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || stream_broken_ || cursor < next_seq_;
      };
      mu_.Await(absl::Condition(&ready));
      if (stopping_ || stream_broken_) break;
      // Anything below cursor was sent already; below the held ones nothing is left to send.
      if (!NextToSend(std::max(cursor, FirstHeldLocked()), out.mutable_batch())) {
        cursor = next_seq_;
        continue;
      }
    }
    cursor = out.batch().seq() + 1;
    if (!stream->Write(out)) break;
  }
  // Stopping: cancel, so the reader's Read returns. Otherwise the aggregator ended the stream
  // (the reader saw it, or a Write failed, after which Read fails too): Finish then gives the
  // aggregator's status, which says whether it refused a batch.
  bool cancel = stop.stop_requested();
  {
    absl::MutexLock lock(&mu_);
    cancel = cancel || stopping_;
  }
  if (cancel) ctx.TryCancel();
  stream->WritesDone();
  reader.join();
  grpc::Status st = stream->Finish();
  connected_.store(false);
  {
    absl::MutexLock lock(&mu_);
    active_ctx_ = nullptr;
  }
  if (!stop.stop_requested()) {
    if (!stream_acked_.load() && !st.ok()) {
      LOG(WARNING) << "aggregator " << options_.target << " refused the stream ("
                   << absl::StatusCodeToString(static_cast<absl::StatusCode>(st.error_code()))
                   << ": " << st.error_message() << "); reconnecting";
    } else {
      LOG(WARNING) << "stream to aggregator " << options_.target
                   << " ended: " << (st.ok() ? "closed" : st.error_message()) << "; reconnecting";
    }
  }
  return st;
}

}  // namespace fabricscope::uplink
