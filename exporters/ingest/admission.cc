#include "exporters/ingest/admission.h"

#include "absl/strings/str_cat.h"

namespace fabricscope::exporters {

absl::Status Admission::CheckFields(const v1::Hello& hello) {
  if (absl::Status s = CheckHello(hello, limits_.hello); !s.ok()) {
    state_.CountRefusedStream("invalid_hello");
    return absl::InvalidArgumentError(absl::StrCat("Hello: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status Admission::ValidateHello(const v1::Hello& hello) {
  if (absl::Status s = CheckFields(hello); !s.ok()) return s;
  return state_.CheckCapacity(hello);
}

absl::StatusOr<uint64_t> Admission::OnHello(const v1::Hello& hello) {
  if (absl::Status s = CheckFields(hello); !s.ok()) return s;
  return state_.OnHello(hello);
}

BatchVerdict Admission::Check(const v1::Batch& batch, size_t ports) const {
  BatchVerdict v;
  v.gpu_invalid = CheckGpuWindow(batch, limits_.batch, &v.gpu_reason);
  if (v.gpu_invalid.ok()) {
    v.invalid = CheckAgentBatch(batch, ports, &v.reason);
  } else {
    // The rest of the batch is stored without its GPU window: checked without it too. Rare (a
    // producer past its own bounds), so the copy is not on the steady path.
    v1::Batch without_gpu = batch;
    without_gpu.clear_gpu();
    v.invalid = CheckAgentBatch(without_gpu, ports, &v.reason);
  }
  return v;
}

absl::StatusOr<uint64_t> Admission::OnBatch(const std::string& node, uint64_t instance,
                                            const v1::Batch& batch) {
  return state_.OnBatch(node, instance, batch,
                        [this](const v1::Batch& b, size_t ports) { return Check(b, ports); });
}

absl::StatusOr<uint64_t> Admission::OnPeerBatch(const std::string& peer, uint64_t instance,
                                                const v1::Batch& batch) {
  return state_.OnPeerBatch(peer, instance, batch, [this](const v1::Batch& b, size_t) {
    BatchVerdict v;
    v.invalid = CheckForwarded(b, limits_.hello);
    if (!v.invalid.ok()) v.reason = "forwarded";
    return v;
  });
}

}  // namespace fabricscope::exporters
