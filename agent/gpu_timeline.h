#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "agent/bus_bandwidth.h"
#include "agent/comm_registry.h"
#include "agent/gpu_ingest.h"
#include "agent/histogram.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::agent {

struct GpuTimelineOptions {
  // Per batch: collectives sent one by one (the rest still count in CollectiveTotals and
  // GpuWindow.collectives_not_sent), and kernel spans sent one by one (NCCL kernels first, then
  // the others in arrival order; the rest summarized per device and name, at most
  // kMaxSummaryNames names per window).
  size_t max_collectives_per_batch = 4096;
  size_t max_kernel_spans_per_batch = 1024;
  // Records waiting for their window (past it, the oldest go to totals/summaries unsent).
  size_t max_pending = 65536;
  // Cumulative (communicator, src rank, dst rank) byte counters kept; bytes of further pairs
  // go to GpuWindow.rank_pairs_untracked_bytes_total.
  size_t max_rank_pairs = 4096;
  // Communicators whose totals, rank pairs and records are kept (agent/comm_registry.h). To
  // admit a new one, the least recently active one no connected process names goes first; when
  // every one is live, the least recently active (counted in
  // GpuWindow.communicators_evicted_total). No window names more than the aggregator's
  // limits: max_communicators_per_node (default 1024) accepts.
  size_t max_communicators = 1024;
};

// Bucket bounds of fabricscope_collective_duration_seconds: 10 us .. 10 s, 1-2.5-5 steps.
std::vector<double> CollectiveDurationBounds();

// A window's GPU part, typed: what the agent's batch assembler (agent/batch_assembler.h)
// writes into Batch.gpu and Batch.kernel_spans, once.
struct GpuWindowParts {
  v1::GpuWindow gpu;                         // totals, summaries, communicators, ingest stats
  std::vector<v1::KernelSpan> kernel_spans;  // at most max_kernel_spans_per_batch
  // Moves both into *batch and leaves this empty.
  void MoveInto(v1::Batch* batch);
};

// The pipeline thread's view of GPU records: converts wire records into v1::Collective and
// v1::KernelSpan (duration, algBw and busBw per agent/bus_bandwidth.h, proxy peers joined by
// (comm, rank, func, seq)), keeps cumulative totals per (communicator, function), per device and
// per rank pair, and fills each window's GPU part (GpuWindowParts).
//
// Memory is bounded by the options. Not thread-safe: owned by the pipeline thread.
class GpuTimeline {
 public:
  explicit GpuTimeline(GpuTimelineOptions options = {});

  // One record from the ingest queue.
  void Add(const GpuEvent& event);

  // Appends to *collectives the collectives that completed at or before window_end_ns (and
  // anything that has waited since before window_start_ns, whatever its timestamps say), and
  // fills out->kernel_spans and out->gpu, updating the totals. At most
  // max_collectives_per_batch collectives per window, counting those FillEarly took since the
  // last FillWindow; the rest are counted in GpuWindow.collectives_not_sent. `ingest` (may be
  // null) supplies the endpoint's stats; `connected_pids` limits the communicator list to live
  // producers and, for one window, those that left since the last. The caller sends the collectives
  // (after CollectiveAnalyzer, in the agent).
  void FillWindow(int64_t window_start_ns, int64_t window_end_ns, const v1::GpuIngestStats* ingest,
                  const std::vector<int32_t>& connected_pids, GpuWindowParts* out,
                  std::vector<v1::Collective>* collectives);
  // The same into a batch, for tests: Batch.gpu is replaced and the span bound counts from zero
  // (parts.MoveInto(batch)).
  void FillBatch(int64_t window_start_ns, int64_t window_end_ns, const v1::GpuIngestStats* ingest,
                 const std::vector<int32_t>& connected_pids, v1::Batch* batch,
                 std::vector<v1::Collective>* collectives);

  // Appends to *collectives those that completed at or before until_ns (for an early batch),
  // within the same per-window bound, updating the totals the next FillWindow reports. Returns
  // how many it took.
  size_t FillEarly(int64_t until_ns, std::vector<v1::Collective>* collectives);

  // A communicator no connected process names (its job ended) is forgotten, without counting,
  // once it has been idle this long (window ends on the agent's monotonic clock), or sooner
  // when a new communicator needs its room.
  static constexpr int64_t kIdleNs = 300'000'000'000;

  // Converts one record (no proxy peers). Exposed for tests.
  static v1::Collective ToProto(const GpuEvent& event);
  static v1::KernelSpan KernelToProto(const GpuEvent& event);

 private:
  // Moves the pending collectives that due(event, end_ns) accepts into *out (at most
  // max_collectives_per_batch per window; the rest counted in overflow_collectives_).
  size_t TakeCollectives(const std::function<bool(const GpuEvent&, int64_t)>& due,
                         std::vector<v1::Collective>* out);

  // Marks `comm` active at the later of seen_ns (the event's CLOCK_MONOTONIC receipt) and the
  // clock; a communicator forgotten to make room is dropped whole.
  void Track(uint64_t comm, int64_t seen_ns);
  // Whether a connected process's communicator record names `comm`.
  bool Named(uint64_t comm) const;
  // Drops a communicator's totals, rank pairs and records.
  void Forget(uint64_t comm);
  // Forgets the communicators idle for kIdleNs that no connected process names (a job that
  // ended): their series leave /metrics instead of staying for as long as the agent runs.
  void ForgetEnded();

  static constexpr size_t kMaxSummaryNames = 256;
  static constexpr int kMaxProxyPeers = 32;
  static constexpr size_t kMaxPendingProxyKeys = 16384;
  static constexpr size_t kMaxChannelSpans = 64;  // per collective: NCCL's MAXCHANNELS
  // Per window (early batches included): about 330 KB of a batch (about 20 bytes each).
  static constexpr size_t kMaxChannelSpansPerWindow = 16384;

  using ProxyKey = std::tuple<uint64_t, int32_t, std::string, uint64_t>;  // comm, rank, func, seq
  struct PeerBytes {
    uint64_t sent = 0;
    uint64_t received = 0;
    uint32_t ops = 0;
  };
  struct Totals {
    Totals() : durations(CollectiveDurationBounds()) {}
    Histogram durations;
    uint64_t count = 0;
    uint64_t bytes = 0;
    double bus_bytes = 0;
    uint32_t window_count = 0;
    double window_bus_bytes = 0;  // of collectives with a known duration
    double window_seconds = 0;
    uint64_t by_timing_source[5] = {};  // v1::TimingSource values
  };
  struct DeviceTotals {
    uint64_t kernels = 0;
    double kernel_seconds = 0;
    uint64_t nccl_kernels = 0;
    double nccl_kernel_seconds = 0;
    uint64_t memcpys = 0;
    uint64_t memcpy_bytes = 0;
  };

  bool Due(const GpuEvent& e, int64_t end_ns, int64_t window_start_ns, int64_t window_end_ns) const;
  void AttachCollective(const GpuEvent& e, std::vector<v1::Collective>* out, bool send);
  void CountKernel(const GpuEvent& e);

  GpuTimelineOptions options_;
  std::deque<GpuEvent> pending_collectives_;
  std::deque<GpuEvent> pending_kernels_;
  std::map<ProxyKey, std::map<int32_t, PeerBytes>> proxy_;
  std::deque<ProxyKey> proxy_order_;
  // Channel spans (ChannelSpansRecord) waiting for their collective, by the same key and bound.
  std::map<ProxyKey, std::vector<collectors::gpu::ChannelSpan>> channels_;
  std::deque<ProxyKey> channel_order_;
  std::map<std::pair<uint64_t, std::string>, Totals> totals_;  // (comm, func)
  std::map<uint32_t, DeviceTotals> devices_;
  std::map<std::tuple<uint64_t, int32_t, int32_t>, uint64_t> rank_pairs_;
  uint64_t rank_pairs_untracked_ = 0;
  std::map<std::tuple<uint64_t, int32_t, int32_t>, v1::Communicator> comms_;  // comm, rank, pid
  // Keys of comms_ whose process had gone at the last FillWindow: listed once more, then erased.
  std::set<std::tuple<uint64_t, int32_t, int32_t>> departed_;
  CommRegistry registry_;  // the communicators of totals_, rank_pairs_ and comms_
  int64_t clock_ns_ = 0;   // the registry's clock: the latest window end or event receipt
  uint64_t comms_evicted_ = 0;
  size_t window_collectives_ = 0;  // taken since the last FillWindow (the per-window bound)
  // Channel spans sent, and left out past kMaxChannelSpansPerWindow, since the last FillWindow.
  size_t window_channel_spans_ = 0;
  uint64_t window_channel_spans_omitted_ = 0;
  uint64_t overflow_collectives_ = 0;  // dropped from pending (max_pending), not yet reported
};

}  // namespace fabricscope::agent
