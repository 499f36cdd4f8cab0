#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "exporters/tls.h"
#include "fabricscope/v1/telemetry.grpc.pb.h"

namespace grpc {
class Server;
}

namespace fabricscope::exporters {

class ClusterState;

// gRPC Telemetry service on the callback API: one reactor per agent stream. A reactor reads the
// Hello, then Batches, applies each to the ClusterState, and writes an Ack after each; with one
// write in flight at a time, a newer ack replaces a pending one (acks are cumulative).
// Malformed input (no Hello first, bad port index) ends that stream with INVALID_ARGUMENT or
// FAILED_PRECONDITION and is counted; it never affects other agents. With check_identity (mTLS:
// every agent presents a certificate the client CA signed), a Hello whose node is not the
// certificate's identity (its DNS subject alternative names, else its common name: gRPC's
// GetPeerIdentity) ends the stream with PERMISSION_DENIED, counted, so that no agent can
// report as another node.
//
// Threading: reactions run on gRPC's threads and never block beyond a short state lock.
class TelemetryService final : public v1::Telemetry::CallbackService {
 public:
  explicit TelemetryService(ClusterState& state, bool check_identity = false)
      : state_(state), check_identity_(check_identity) {}
  grpc::ServerBidiReactor<v1::AgentMessage, v1::AggregatorMessage>* Stream(
      grpc::CallbackServerContext* context) override;

  uint64_t streams_total() const { return streams_total_.load(); }

 private:
  ClusterState& state_;
  const bool check_identity_;
  std::atomic<uint64_t> streams_total_{0};
};

// Owns the gRPC server hosting TelemetryService with keepalive configured.
class TelemetryServer {
 public:
  // A batch or Hello is at most max_message_bytes: gRPC answers a bigger one with
  // RESOURCE_EXHAUSTED, and the agent drops that batch (agent/uplink.h). 16 MiB is four times
  // gRPC's own default.
  static constexpr int kDefaultMaxMessageBytes = 16 << 20;
  // tls: plain text unless tls.enabled(); with tls.client_ca, mTLS and node identity checks.
  explicit TelemetryServer(ClusterState& state, int max_message_bytes = kDefaultMaxMessageBytes,
                           ServerTls tls = {});
  ~TelemetryServer();
  // Listens on host:port (port 0 picks one). Returns the bound port.
  // Errors: Unavailable when it cannot bind.
  absl::StatusOr<int> Start(const std::string& listen);
  // Cancels open streams and stops, waiting at most `grace_ms` for them.
  void Stop(int grace_ms = 1000);

 private:
  TelemetryService service_;
  const int max_message_bytes_;
  const ServerTls tls_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace fabricscope::exporters
