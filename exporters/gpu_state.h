#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "fabricscope/v1/telemetry.pb.h"
#include "prometheus/metric_family.h"

namespace fabricscope::exporters {

// The aggregator's view of the nodes' GPU timelines (Batch fields 10-12): the latest cumulative
// GpuWindow per node, recent collectives and kernel spans per node for /api/collectives and
// /api/kernels, and the Prometheus families built from them.
//
// Labels stay bounded: func comes from the agent's fixed set (agent/bus_bandwidth.h; anything
// else is "other"); comm is the first 8 hex digits of the communicator hash, for the
// max_comm_labels communicators with the most collectives (the rest fold into comm="other");
// rank pairs are the top rank_pair_top_k by bytes over all nodes.
//
// Not thread-safe: ClusterState calls it under its own lock.
class GpuState {
 public:
  struct Options {
    size_t recent_collectives_per_node = 1024;
    size_t recent_kernels_per_node = 1024;
    size_t rank_pair_top_k = 20;
    size_t max_comm_labels = 64;
  };
  GpuState() : GpuState(Options{}) {}
  explicit GpuState(Options options) : options_(options) {}

  // Stores what a validated batch of `node` carries (nothing when it has no GPU fields).
  void OnBatch(const std::string& node, const v1::Batch& batch);
  // A new agent instance on `node`: its cumulative totals restart.
  void ResetNode(const std::string& node);
  void set_rank_pair_top_k(size_t k) { options_.rank_pair_top_k = k; }

  // Appends the GPU metric families (those with at least one sample).
  void Collect(std::vector<prometheus::MetricFamily>* out) const;

  // {"collectives":[{node, comm, rank, nranks, func, seq, bytes, count, datatype, algo, proto,
  // channels, root, peer, timing_source, enqueue_unix_seconds, start_unix_seconds,
  // end_unix_seconds, duration_seconds, algbw_bytes_per_second, busbw_bytes_per_second, pid,
  // gpu, p2p, graph_captured, proxy_bytes, proxy_peers:[{peer, bytes_sent, bytes_received}]},
  // ...]} oldest first; at most `limit` (0 = all kept) newest; node_filter empty = all nodes.
  std::string CollectivesJson(absl::string_view node_filter, size_t limit) const;
  // {"kernels":[{node, device, stream, name, is_nccl, memcpy, bytes, start_unix_seconds,
  // end_unix_seconds, duration_seconds, pid, graph_id, correlation_id}, ...]}, same rules.
  std::string KernelsJson(absl::string_view node_filter, size_t limit) const;

  // "0123abcd": the comm label of a communicator hash.
  static std::string CommLabel(uint64_t comm_hash);

 private:
  struct Timed {
    int64_t unix_offset_ns;
  };
  struct Collective : Timed {
    v1::Collective c;
  };
  struct Kernel : Timed {
    v1::KernelSpan k;
  };
  struct LastBusBw {
    double busbw = 0;
    double seconds = 0;
  };
  struct NodeGpu {
    v1::GpuWindow last;
    bool have = false;
    std::deque<Collective> collectives;
    std::deque<Kernel> kernels;
    // (comm, func) -> the last window in which it ran with a known duration.
    std::map<std::pair<uint64_t, std::string>, LastBusBw> last_busbw;
  };

  Options options_;
  std::map<std::string, NodeGpu> nodes_;
};

}  // namespace fabricscope::exporters
