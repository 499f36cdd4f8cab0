#pragma once

// What ClusterState hands out (exporters/state/cluster_state.h): plain values and shared,
// immutable windows, taken under the state's locks and rendered after them by
// exporters/exposition/cluster_render.h and cluster_json.h. Nothing here points into the state.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "collectors/common/metric_profile.h"
#include "exporters/analysis/cross_rank.h"
#include "exporters/analysis/fabric_model.h"
#include "exporters/analysis/link_analysis.h"
#include "exporters/shard/forwarder.h"
#include "exporters/state/gpu_views.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

// A port as the last stored window shows it. `info` and `last` are immutable once stored (a new
// Hello or window replaces the pointer), so a view shares them.
struct PortView {
  std::shared_ptr<const v1::PortInfo> info = std::make_shared<const v1::PortInfo>();
  std::shared_ptr<const v1::PortWindow> last;  // null before the first window
  // Sums over the stored windows of this agent instance (PortWindow.counter_resets_by_group by
  // kind, unavailable_reads).
  std::map<std::string, uint64_t> resets_total;
  uint64_t unavailable_total = 0;
};

// A node: its live agent instance, its progress here and its latest windows.
struct NodeView {
  std::string node, version, boot_id;
  uint64_t instance_id = 0;
  uint64_t acked_seq = 0;  // the highest contiguous seq stored or declared lost
  uint64_t batches = 0, duplicate_batches = 0, lost_batches = 0;  // of this instance, here
  int64_t last_batch_unix_ns = 0;  // the last window's end; 0 before one
  absl::Time last_seen;            // this aggregator's clock at the last Hello or batch
  // Fast-sampler ticks per second in the last window (its ports' most samples over its span);
  // -1 before a window with samples.
  double samples_per_second = -1;
  std::shared_ptr<const v1::AgentStats> agent;       // null before a batch with stats
  std::shared_ptr<const v1::CaptureWindow> capture;  // without its loss events; may be null
  std::vector<PortView> ports;                       // in the Hello's port order
};

// The aggregator's own counts since start. Reasons are ClusterState::kRejectedBatchReasons and
// kRefusedStreamReasons.
struct AggregatorCounters {
  uint64_t batches = 0, duplicate_batches = 0, lost_batches = 0, expired_nodes = 0;
  uint64_t window_gaps = 0, throttled_batches = 0, nodes = 0;
  std::map<std::string, uint64_t> rejected_batches, refused_streams;  // by reason
  // The timeline's on-demand fetch (RecordingFetch::Stats): nodes asked, by outcome (answered,
  // timed_out, unreachable, busy), and answers nobody waited for.
  std::map<std::string, uint64_t> recording_fetches;
  uint64_t recording_answers_dropped = 0;
};

// Sharded aggregators (issue 18): what peers forwarded here, and what this one forwards.
struct PeerCounters {
  std::vector<std::pair<std::string, uint64_t>> received;  // (peer, records matched here)
  bool forwarding = false;                                 // a forwarder is set
  size_t peers = 0;                                        // of the forwarder's list
  std::vector<Forwarder::PeerStats> forwarded;
};

// One microburst of a node's recent ones (/api/microbursts).
struct MicroburstRecord {
  std::string node, device;
  uint32_t port = 0;
  v1::Direction direction = v1::DIRECTION_UNSPECIFIED;
  int64_t start_unix_ns = 0, duration_ns = 0;
  double peak_utilization = 0;  // 0..1
  uint64_t bytes = 0;
};

// One captured loss or retransmit event of a node's recent ones (/api/loss).
struct LossEventRecord {
  std::string node;
  v1::PacketLossEvent event;
};

// What one scrape of /metrics reads (ClusterState::Snapshot).
struct ClusterSnapshot {
  common::MetricProfile profile = common::MetricProfile::kBasic;  // the --metrics profile
  std::vector<NodeView> nodes;                                    // by name
  AggregatorCounters counters;
  GpuSnapshot gpu;
  LinkSnapshot links;
  // Sharded: the diagnoses only of communicators this aggregator owns, so that a communicator's
  // series come from its owner only.
  CrossRankSnapshot cross_rank;
  PeerCounters peers;
  FabricSnapshot fabric;  // leaves, their uplink demand, leaf-local shares (fabric_model.h)
};

}  // namespace fabricscope::exporters
