#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "exporters/ingest/message_checks.h"
#include "exporters/state/cluster_state.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

// What one agent may make the aggregator hold (aggregator config `limits:`): the checks'
// bounds (exporters/ingest/message_checks.h).
struct AdmissionLimits {
  HelloLimits hello;  // what one Hello may hold
  BatchLimits batch;  // what one batch's GPU window may name
};

// The one gate between a wire and ClusterState: every Hello and batch an agent (over gRPC, or
// the standalone agent's in-process sink) or a peer aggregator sends is checked here, by
// message_checks.h, and ClusterState stores what passed without checking it again. A check
// that needs what the state holds (the node's port count) runs where the state asks for it
// (ClusterState::BatchCheck: past the sequence checks, under the node's ingest stripe), so a
// batch and a Hello of the same node cannot interleave between check and store.
//
// Holds a reference to `state`, which must outlive it; thread-safe as the state is.
class Admission {
 public:
  explicit Admission(ClusterState& state, AdmissionLimits limits = {})
      : state_(state), limits_(limits) {}

  // CheckHello, then the state's node limit (ClusterState::CheckCapacity); nothing is stored.
  // Errors: InvalidArgument ("Hello: " and the field named; counted as
  // refused_streams{reason="invalid_hello"}) or ResourceExhausted (node_limit).
  absl::Status ValidateHello(const v1::Hello& hello);
  // CheckHello, then ClusterState::OnHello. Returns the seq to ack. Errors: as ValidateHello.
  absl::StatusOr<uint64_t> OnHello(const v1::Hello& hello);
  // ClusterState::OnBatch with Check as its verdict. Returns the seq to ack. Errors: as
  // ClusterState::OnBatch (FailedPrecondition before the instance's Hello).
  absl::StatusOr<uint64_t> OnBatch(const std::string& node, uint64_t instance,
                                   const v1::Batch& batch);
  // ClusterState::OnPeerBatch with CheckForwarded as its verdict (reason "forwarded").
  absl::StatusOr<uint64_t> OnPeerBatch(const std::string& peer, uint64_t instance,
                                       const v1::Batch& batch);

  // An agent's batch against its node's `ports`: CheckGpuWindow (a GPU window past limits:
  // gpu_invalid, the rest checked without it), then CheckAgentBatch (invalid).
  BatchVerdict Check(const v1::Batch& batch, size_t ports) const;

  const AdmissionLimits& limits() const { return limits_; }

 private:
  // CheckHello, counted as invalid_hello. Errors: InvalidArgument.
  absl::Status CheckFields(const v1::Hello& hello);

  ClusterState& state_;
  const AdmissionLimits limits_;
};

}  // namespace fabricscope::exporters
