#pragma once

// The fabric's loss, port by port: each port's loss rate over its node's latest window, and the
// median rate of the other ports of its kind, so that a collective's port can be judged against
// the fabric rather than against its own past (exporters/analysis/path_evidence.h): a port that
// was lossy before the job's first collective is lossy compared with its neighbours.

#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "exporters/analysis/names.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

struct FabricLossOptions {
  // A port's latest window stands for it while it ended within max_age_ns of the newest window
  // of its kind (a node that stopped reporting leaves the median): 3 windows at the default 1 s.
  int64_t max_age_ns = 3'000'000'000;
  // Each kind's median is taken again with every window while it has at most always_refresh
  // ports, beyond that at most every refresh_ns of window time (a quarter of the default
  // window): cost O(ports) each time, none per lookup.
  size_t always_refresh = 1024;
  int64_t refresh_ns = 250'000'000;
  // A window whose busier direction moved fewer packets has no rate (an idle port says nothing
  // of its loss) and stays out of the median.
  uint64_t min_packets = 100;
  size_t max_ports = 1 << 20;  // ports tracked; a new one beyond it is not
};

// The kind of a port that its loss is compared within: loss per packet of an InfiniBand link, a
// RoCE port and a plain interface carrying TCP have different causes and floors.
enum class PortKind : uint8_t { kInfiniBand, kRoce, kNetdev };
inline constexpr size_t kPortKinds = 3;

// Thread-safe (one lock, held for a lookup or one node's windows; never while taking another).
class FabricLoss {
 public:
  explicit FabricLoss(FabricLossOptions options = {}) : options_(options) {}

  // One stored batch of `node`: each of its port windows (batch.ports; a port_index beyond
  // `ports` is skipped) becomes that port's latest rate. A network interface's loss events
  // include the node's TCP retransmissions (RetransSegs of its node-level port in the same
  // batch), as the agent counts them on every interface; node-level ports are not ports of the
  // fabric. Batches without port windows (early batches) change nothing.
  void OnBatch(Name node, absl::Span<const v1::PortInfo> ports, const v1::Batch& batch)
      ABSL_LOCKS_EXCLUDED(mu_);
  void ForgetNode(Name node) ABSL_LOCKS_EXCLUDED(mu_);

  // The port's latest window against the other ports of its kind: events, rate, the median of
  // the others' rates and how many there were (ports = 0: nothing to compare with, or the port
  // unknown or idle in its latest window).
  v1::FabricLossEvidence Of(Name node, uint32_t port_index) const ABSL_LOCKS_EXCLUDED(mu_);

  static PortKind KindOf(const v1::PortInfo& p) {
    if (!p.rdma()) return PortKind::kNetdev;
    return p.link_layer() == v1::LINK_LAYER_INFINIBAND ? PortKind::kInfiniBand : PortKind::kRoce;
  }
  size_t ports() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Latest {
    bool known = false;  // a window of it was stored
    PortKind kind = PortKind::kNetdev;
    bool has_rate = false;  // moved min_packets
    uint64_t events = 0;
    double rate = 0;
    int64_t end_unix_ns = 0;
  };
  struct KindRates {
    size_t ports = 0;  // tracked ports of the kind
    int64_t newest_unix_ns = 0;
    int64_t taken_unix_ns = INT64_MIN;  // when `sorted` was taken
    std::vector<double> sorted;         // the rates of the kind's fresh ports, ascending
  };
  // Takes the kind's rates again when refresh_ns passed since the last time.
  void Refresh(PortKind kind) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const FabricLossOptions options_;
  mutable absl::Mutex mu_;
  // Per node, by port_index: one lookup per batch, its ports side by side.
  absl::flat_hash_map<Name, std::vector<Latest>> nodes_ ABSL_GUARDED_BY(mu_);
  size_t ports_ ABSL_GUARDED_BY(mu_) = 0;  // known entries in nodes_
  KindRates kinds_[kPortKinds] ABSL_GUARDED_BY(mu_);
};

}  // namespace fabricscope::exporters
