#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "collectors/common/tls.h"
#include "collectors/uplink/batch_sink.h"
#include "collectors/uplink/spool.h"
#include "fabricscope/v1/telemetry.grpc.pb.h"

namespace fabricscope::uplink {

struct UplinkOptions {
  std::string target;               // aggregator HOST:PORT
  size_t max_queued_batches = 900;  // 15 min of 1 s windows; the oldest is dropped when full
  int initial_backoff_ms = 100;     // reconnect backoff: exponential with full jitter
  int max_backoff_ms = 5000;
  common::ClientTls tls = {};  // plain text unless tls.enabled()
  // Sent as `authorization: Bearer <token>` on every stream (collectors/common/stream_auth.h);
  // empty = none. Never logged.
  std::string auth_token = "";
  // The crash-safe store behind the memory queue (collectors/uplink/spool.h), or null. Not owned;
  // it must outlive the uplink. With one, a batch evicted from the full memory queue stays on disk
  // and is read back when its turn comes, and what earlier agent processes left is replayed first.
  Spool* spool = nullptr;
  // Called on the stream's reader thread for each RecordingRequest the aggregator sends
  // (proto/fabricscope/v1/telemetry.proto); must not block. Empty = requests are ignored.
  std::function<void(const v1::RecordingRequest&)> on_recording_request = nullptr;
};

// One gRPC bidirectional stream to the aggregator. Batches are numbered, queued in memory and
// kept until acked; after a reconnect everything unacked is sent again (the aggregator drops
// duplicates). A full queue drops its oldest batch and counts it; the next Hello's resume_seq
// tells the aggregator those are gone. A stream the aggregator ends with INVALID_ARGUMENT or
// RESOURCE_EXHAUSTED (a batch over its message size limit) refused the oldest unacked batch
// (the aggregator applies batches in order); once the same batch is the oldest unacked one at
// two refusals in a row (the first may have come before the acks of those ahead of it), it is
// dropped and counted in refused_batches(), with one log line for the first and one per 100
// after, instead of being sent again forever while everything behind it waits.
//
// With a spool (UplinkOptions::spool), every batch is also appended there before it is sent and
// removed once acked; a batch the memory queue evicts is then not dropped but read back from
// disk. Before this instance's first stream, the batches earlier agent processes left in the
// spool are replayed, each instance under its own Hello (its node, instance id and port list,
// so their sequence numbers and port indices mean what they meant), and deleted once acked
// (ReplayLeftovers).
//
// Threading: Submit() from one producer thread, never blocks on the network. One internal
// thread writes the stream; a second reads acks (and hands RecordingRequests to
// UplinkOptions::on_recording_request) while a stream is up.
class GrpcUplink final : public BatchSink {
 public:
  GrpcUplink(UplinkOptions options, v1::Hello hello);
  ~GrpcUplink() override;

  void Submit(v1::Batch batch) override;
  void Shutdown(int timeout_ms) override;
  uint64_t dropped_batches() const override { return dropped_.load(); }
  uint64_t acked_seq() const override { return acked_.load(); }
  bool connected() const override { return connected_.load(); }
  uint64_t connects() const { return connects_.load(); }
  uint64_t refused_batches() const override { return refused_.load(); }

 private:
  void Run(std::stop_token stop);
  // Sends the spool's leftovers (uplink_replay.cc): returns once each is acked, given up
  // (refused: kept on disk for the next start) or stop is requested.
  void ReplayLeftovers(v1::Telemetry::Stub& stub, std::stop_token& stop);
  // One stream under a leftover's Hello, from segment *next on; advances *next past each
  // segment the aggregator acked whole (and deletes it). Returns the stream's final status.
  grpc::Status ReplayStream(v1::Telemetry::Stub& stub, const Spool::Leftover& leftover,
                            size_t* next, std::stop_token& stop);
  // The `authorization` metadata of a stream, when the agent has a token.
  void Authorize(grpc::ClientContext& ctx) const;
  // Sleeps a jittered *backoff_ms (full jitter: half to all of it), doubles it up to
  // max_backoff_ms, and returns false when Shutdown began meanwhile.
  // Why the channel cannot connect, from a fail-fast call on it; call only in
  // TRANSIENT_FAILURE. "" when gRPC gives no message.
  std::string WhyUnreachable(v1::Telemetry::Stub& stub) const;
  bool SleepBackoff(int* backoff_ms, std::mt19937_64& rng);
  // The batches of leftover segment *next, skipping (and deleting) segments that hold none;
  // *next is left at the segment read, or at the end with an empty result.
  std::vector<v1::Batch> NextLeftoverSegment(const Spool::Leftover& leftover, size_t* next);
  // The lowest sequence number not yet acked that is still held (memory or spool).
  uint64_t FirstHeldLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The batch to send at `cursor` or after it (a hole left by a dropped batch is skipped).
  // False when none is held.
  bool NextToSend(uint64_t cursor, v1::Batch* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs one stream until it breaks or stop is requested. Returns its final status.
  grpc::Status RunStream(v1::Telemetry::Stub& stub, std::stop_token& stop);
  // After a stream the aggregator ended with `st`: drops the batch it refused, if it did.
  // Returns whether one was dropped.
  bool DropRefused(const grpc::Status& st);
  void OnAck(uint64_t seq);

  const UplinkOptions options_;
  v1::Hello hello_;

  absl::Mutex mu_;
  std::deque<v1::Batch> queue_ ABSL_GUARDED_BY(mu_);  // unacked, seq ascending
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 1;
  bool stream_broken_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* active_ctx_ ABSL_GUARDED_BY(mu_) = nullptr;

  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> refused_{0};
  uint64_t suspect_seq_ = 0;  // uplink thread: the first unacked batch at the last refusal
  std::atomic<uint64_t> acked_{0};
  std::atomic<bool> stream_acked_{false};  // the current stream got an ack (its Hello passed)
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> connects_{0};
  std::jthread thread_;
};

}  // namespace fabricscope::uplink
