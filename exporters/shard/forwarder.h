#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "collectors/common/tls.h"
#include "collectors/uplink/uplink.h"
#include "exporters/shard/peer_ring.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

struct ForwarderOptions {
  // This aggregator's gRPC address exactly as the peer list names it: the Hello.node of its
  // streams to the others (Hello.peer set), which they check against their own lists.
  std::string self;
  common::ClientTls tls = {};  // plain text unless tls.enabled()
  std::string auth_token =
      "";  // `authorization: Bearer` on every stream; empty = none; never logged
  // Batches held per peer until acked (uplink::UplinkOptions::max_queued_batches): at one
  // batch per flush_interval, 6,000 are 10 minutes of an owner being away. The oldest is
  // dropped when full and counted in fabricscope_aggregator_forward_dropped_records_total.
  size_t max_queued_batches = 6000;
  // How often the records gathered for a peer go out as one batch.
  absl::Duration flush_interval = absl::Milliseconds(100);
  // A peer's batch goes out at once when it holds this many records, or this many bytes (a
  // slow collective's record carries its flight recording): well under the 16 MiB message limit
  // of TelemetryServer, past which the owner would refuse the batch.
  size_t max_records_per_batch = 20000;
  size_t max_batch_bytes = 4 << 20;
  int initial_backoff_ms = 100;  // reconnect backoff (GrpcUplink)
  int max_backoff_ms = 5000;
  // Matches records here (ClusterState::MatchForwarded): those queued for a peer whose
  // communicators this aggregator owns after a list change. Called without the forwarder's lock.
  std::function<void(std::vector<v1::ForwardedAnalysis>&&)> match_here;
};

// The shard side of sharded aggregators (issue 18): sends the per-collective analyses of
// communicators another aggregator owns (CrossRankAnalysis::OnBatch's *forward) to that owner,
// over the Telemetry uplink agents use (collectors/uplink/uplink.h): one numbered stream per
// peer under a Hello with `peer` set, each batch carrying only Batch.forwarded, kept until the
// owner acks it and sent again after a reconnect (the owner drops duplicates), with jittered
// exponential backoff while the owner is away. Records gather per peer and go out every
// flush_interval.
//
// A peer list change (SetRing): records not yet handed to a stream are routed again under the
// new list; a peer that left the list gets one second to take what its stream still holds,
// the rest is counted as dropped. Each record goes to one owner only, so none is matched twice.
//
// Thread-safe: Forward from any ingest thread; SetRing and Stop from the control thread.
class Forwarder {
 public:
  explicit Forwarder(ForwarderOptions options);
  ~Forwarder();

  // Opens streams to the ring's peers other than itself, closes those to peers no longer in
  // it. Starts the flush thread on first call.
  void SetRing(std::shared_ptr<const PeerRing> ring);
  // Queues each record for the owner of its communicator under the current list (SetRing's;
  // `ring`, the caller's, only before the first SetRing). One that list gives to this
  // aggregator goes to options.match_here.
  void Forward(const PeerRing& ring, std::vector<v1::ForwardedAnalysis>&& records);
  // Flushes what is gathered, then gives each stream up to timeout_ms to deliver.
  void Stop(int timeout_ms);

  struct PeerStats {
    std::string peer;        // its gRPC address
    uint64_t forwarded = 0;  // records the owner acked
    uint64_t queued = 0;     // records gathered or sent and not yet acked
    uint64_t dropped = 0;    // records dropped: the stream's queue full, the peer removed,
                             // or handed over after Stop (a reload replacing the forwarder)
    bool connected = false;
  };
  // Per peer that has or had a stream (a peer that left the list keeps its totals), by
  // address; peers() is the list's length (0 before a ring).
  std::vector<PeerStats> Stats() const;
  size_t peers() const;

 private:
  struct Link {
    std::unique_ptr<uplink::GrpcUplink> stream;  // null once the peer left the list
    v1::Batch pending;                           // gathered, not yet submitted
    size_t pending_bytes = 0;                    // the records' encoded size
    uint64_t submitted = 0;  // batches submitted (the stream numbers them 1, 2, ...)
    std::deque<std::pair<uint64_t, uint64_t>> in_flight;  // (seq, records) submitted, unacked
    PeerStats stats;
  };
  std::unique_ptr<Link> OpenLink(const std::string& peer) const;
  // Hands a link's gathered records to its stream as one batch.
  void SubmitLocked(Link& link) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the acked batches' records to `forwarded`, and those the stream's full queue dropped
  // (it keeps max_queued_batches) to `dropped`.
  void SettleLocked(Link& link) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Queues a record for its owner (see Forward); appends it to *here when this aggregator
  // owns it.
  void RouteLocked(const PeerRing& ring, v1::ForwardedAnalysis&& record,
                   std::vector<v1::ForwardedAnalysis>* here) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void MatchHere(std::vector<v1::ForwardedAnalysis>&& here) const;
  void Run(std::stop_token stop);

  const ForwarderOptions options_;
  const uint64_t instance_;
  mutable absl::Mutex mu_;
  std::shared_ptr<const PeerRing> ring_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::unique_ptr<Link>> links_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::jthread thread_;
};

}  // namespace fabricscope::exporters
