#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "collectors/common/stream_auth.h"
#include "collectors/common/tls.h"
#include "exporters/ingest/admission.h"
#include "fabricscope/v1/telemetry.grpc.pb.h"

namespace grpc {
class Server;
}

namespace fabricscope::exporters {

using common::ServerTls;
using common::TokenAuth;

// How fast one stream's batches are read (`limits: max_batches_per_second, batch_burst`): a
// token bucket per stream. An agent sends one batch per window (1 s by default) plus early
// batches (every 200 ms at most) and, after an outage, its whole queue at once (900 batches at
// the default --max-queued-batches): the burst lets that replay through unthrottled. Past the
// bucket the reactor delays its next read (a grpc::Alarm), so HTTP/2 flow control slows the
// sender down: nothing is refused or lost, and each delayed read is counted in
// fabricscope_aggregator_throttled_batches_total.
struct StreamRate {
  double batches_per_second = 100;
  double burst = 1000;
};

// Who may stream, and what a second stream for a live node gets.
struct StreamPolicy {
  // mTLS: a Hello's node must be the client certificate's identity.
  bool check_identity = false;
  // Shared-secret tokens (collectors/common/stream_auth.h); null or disabled = no token asked.
  std::shared_ptr<const TokenAuth> tokens;
  StreamRate rate;
  AdmissionLimits limits;  // what one Hello and batch may hold (exporters/ingest/admission.h)
};

// gRPC Telemetry service on the callback API: one reactor per agent stream. A reactor reads the
// Hello, then Batches, applies each to the ClusterState, and writes an Ack after each; with one
// write in flight at a time, a newer ack replaces a pending one (acks are cumulative). Between
// acks it writes the RecordingRequests the timeline's fetch queued (RequestRecording), in order.
// Malformed input (no Hello first, bad port index) ends that stream with INVALID_ARGUMENT or
// FAILED_PRECONDITION and is counted; it never affects other agents.
//
// Refused streams, each counted in fabricscope_aggregator_refused_streams_total{reason}:
// - identity: with check_identity (mTLS: every agent presents a certificate the client CA
//   signed), a Hello whose node is not the certificate's identity (its DNS subject alternative
//   names, else its common name: gRPC's GetPeerIdentity) ends with PERMISSION_DENIED, so that
//   no agent can report as another node;
// - token: with tokens, a stream without `authorization` metadata ends at once with
//   UNAUTHENTICATED, and a Hello whose token is neither the shared one nor its node's own with
//   PERMISSION_DENIED;
// - duplicate: one live stream per node. A Hello for a node that already has a live stream from
//   another agent instance ends with ALREADY_EXISTS, and the live stream keeps the node: a second
//   agent with the same node name (a copied config, a forger with a valid token) can neither
//   kick the real one off nor mix its counters in. A dead peer's stream is closed by keepalive
//   within 30 s (20 s + 10 s), after which the node is free again; a process that exits closes
//   its stream at once. A Hello from the same instance (the agent reconnected after its side
//   of the stream broke) takes the node over; the old stream is ended with ABORTED at its next
//   message.
//
// - peer: a stream whose Hello has `peer` set (a shard aggregator forwarding the analyses of
//   communicators this one owns, exporters/shard/forwarder.h) from an address not in this
//   aggregator's --peers (ClusterState::OnPeerHello) ends with PERMISSION_DENIED. A peer passes
//   the same token and mTLS checks as an agent (its certificate names its host), holds one
//   live stream per address, and its batches may carry only Batch.forwarded.
//
// Threading: reactions run on gRPC's threads and never block beyond a short lock.
class TelemetryService final : public v1::Telemetry::CallbackService {
 public:
  explicit TelemetryService(ClusterState& state, StreamPolicy policy = {})
      : state_(state), admission_(state, policy.limits), policy_(std::move(policy)) {}
  // New tokens (a SIGHUP re-read the files): streams opened from now on are checked against
  // them; live streams, already authenticated, go on.
  void SetTokens(std::shared_ptr<const TokenAuth> tokens) {
    absl::MutexLock lock(&policy_mu_);
    policy_.tokens = std::move(tokens);
  }
  // The gate every stream's Hellos and batches pass before the state stores them.
  Admission& admission() { return admission_; }
  grpc::ServerBidiReactor<v1::AgentMessage, v1::AggregatorMessage>* Stream(
      grpc::CallbackServerContext* context) override;

  uint64_t streams_total() const { return streams_total_.load(); }

  enum class RequestOutcome { kQueued, kNoStream, kQueueFull };
  // The live-stream registry, used by the reactors (telemetry_service.cc). A live stream is one
  // whose Hello was accepted and whose reactor has not finished.
  class Claimant {
   public:
    virtual ~Claimant() = default;
    virtual void Supersede() = 0;  // a newer stream of the same instance took the node
    // Queues `request` to be written on the stream: kQueued, or kNoStream when the stream is
    // ending, or kQueueFull when kMaxQueuedRequests already wait. Called under the registry's
    // lock; must not call back.
    virtual RequestOutcome Request(const v1::RecordingRequest& request) = 0;
  };
  static constexpr size_t kMaxQueuedRequests = 8;
  // Sends a RecordingRequest to `node`'s agent over its live stream (exporters/state/
  // recording_fetch.h's sender): kNoStream when the node has none.
  RequestOutcome RequestRecording(const std::string& node, const v1::RecordingRequest& request);
  // Errors: AlreadyExists (counted) when another instance holds `node`.
  absl::Status Claim(const std::string& node, uint64_t instance, const std::string& peer,
                     Claimant* who);
  void Release(const std::string& node, Claimant* who);

 private:
  struct Live {
    uint64_t instance = 0;
    std::string peer;
    Claimant* who = nullptr;
  };
  ClusterState& state_;
  Admission admission_;  // every Hello and batch of every stream passes it
  absl::Mutex policy_mu_;
  StreamPolicy policy_ ABSL_GUARDED_BY(policy_mu_);
  std::atomic<uint64_t> streams_total_{0};
  absl::Mutex live_mu_;
  absl::flat_hash_map<std::string, Live> live_ ABSL_GUARDED_BY(live_mu_);
};

// Owns the gRPC server hosting TelemetryService with keepalive configured.
class TelemetryServer {
 public:
  // A batch or Hello is at most max_message_bytes: gRPC answers a bigger one with
  // RESOURCE_EXHAUSTED, and the agent drops that batch (collectors/uplink/uplink.h). 16 MiB is four
  // times gRPC's own default.
  static constexpr int kDefaultMaxMessageBytes = 16 << 20;
  // tls: plain text unless tls.enabled(); with tls.client_ca, mTLS and node identity checks.
  // tokens: null or disabled = no token asked.
  // rate: the per-stream read rate (StreamRate). limits: what a Hello and a batch may hold.
  explicit TelemetryServer(ClusterState& state, int max_message_bytes = kDefaultMaxMessageBytes,
                           ServerTls tls = {}, std::shared_ptr<const TokenAuth> tokens = nullptr,
                           StreamRate rate = {}, AdmissionLimits limits = {});
  ~TelemetryServer();
  // Listens on host:port (port 0 picks one). Returns the bound port.
  // Errors: Unavailable when it cannot bind.
  absl::StatusOr<int> Start(const std::string& listen);
  void SetTokens(std::shared_ptr<const TokenAuth> tokens) { service_.SetTokens(std::move(tokens)); }
  TelemetryService& service() { return service_; }
  // Cancels open streams and stops, waiting at most `grace_ms` for them.
  void Stop(int grace_ms = 1000);

 private:
  TelemetryService service_;
  const int max_message_bytes_;
  const ServerTls tls_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace fabricscope::exporters
