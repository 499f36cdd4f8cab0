#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "exporters/analysis/heatmap_model.h"
#include "exporters/analysis/loss_patterns.h"
#include "exporters/analysis/temporal.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

struct LinkAnalysisOptions {
  // Per-port utilization kept for /heatmap/links: history_seconds at bucket_ns, one byte per
  // bucket and direction (2 x history / bucket bytes per port: 20 KB at 10 s and 1 ms).
  double history_seconds = 10;
  int64_t bucket_ns = 1'000'000;
  // Step-period detection: each node's bytes (all ports, both directions) per period_bucket_ns
  // over the last period_history_seconds, analysed every period_every_batches batches.
  int64_t period_bucket_ns = 10'000'000;
  double period_history_seconds = 20;
  size_t period_every_batches = 5;
  // Anomalies: a window is compared with the node's previous baseline_windows windows once
  // min_baseline_windows exist; |robust z| > anomaly_z is an event.
  size_t baseline_windows = 120;
  size_t min_baseline_windows = 20;
  double anomaly_z = 3.5;
  // Loss patterns look at the last loss_windows windows of every link.
  size_t loss_windows = 60;
  size_t recent_anomalies = 256;
  size_t recent_recordings_per_node = 16;
  // Largest heat map served (cells); wider ones get coarser time buckets.
  size_t max_cells = 1'000'000;
};

// A node's departure from its own baseline (LinkAnalysis::Anomalies): a window's value with
// robust |z| above LinkAnalysisOptions.anomaly_z.
struct LinkAnomaly {
  std::string node, kind;
  int64_t unix_ns;
  double value, median, scale, z;  // z = (value - median) / scale
};

// A flight recording an agent attached to a batch, with its node's Unix offset and its port.
struct LinkRecording {
  v1::FlightRecording r;
  int64_t offset_ns;
  std::string node, device;
  uint32_t port = 0;
};

// What LinkAnalysis::Snapshot reads: plain values, no lock held.
struct LinkSnapshot {
  struct Node {
    std::string name;
    std::optional<PeriodEstimate> period;
    std::map<std::string, uint64_t> anomalies_total;  // by kind
    double imbalance[2] = {NAN, NAN};                 // transmit, receive; NaN unknown
    std::optional<uint64_t> flight_recorder_bytes;
    uint64_t flight_recorder_requests_dropped = 0;  // FlightRecorderStats.requests_dropped_total
  };
  std::vector<Node> nodes;
  struct PortLoss {
    std::string node, device;
    uint32_t port;
    double share;  // of the cluster's loss events over the loss windows
  };
  std::vector<PortLoss> loss_concentration;
  uint64_t series_bytes = 0;
};

// The aggregator's link and traffic analysis: per-port sub-ms utilization history (link x time
// heat map), node x node bytes from captures, traffic imbalance across a node's ports, each
// node's training-step period and departures from its own baseline, and loss patterns.
//
// Fed by ClusterState with every Hello and every stored (non-duplicate, valid) batch.
// Thread-safe: every method may be called from any thread.
class LinkAnalysis {
 public:
  explicit LinkAnalysis(LinkAnalysisOptions options = {});

  void OnHello(const v1::Hello& hello);
  // Drops everything held for `node` (ClusterState::ExpireNodes); its past anomalies stay in
  // the bounded list until they age out.
  void ForgetNode(const std::string& node) {
    absl::MutexLock lock(&mu_);
    nodes_.erase(node);
  }
  // Takes and releases the lock (LockWatchdog).
  void ProbeLock() const { absl::MutexLock lock(&mu_); }
  // Recordings the agent sent in answer to a RecordingRequest (FlightRecording.request_id set)
  // are not kept with the recent ones: they are appended to *requested (null: dropped), with
  // their port resolved, for the request's waiter (exporters/state/recording_fetch.h).
  void OnBatch(const std::string& node, const v1::Batch& batch,
               std::vector<LinkRecording>* requested = nullptr);
  // A node's flight recorder as its Hello and latest batch describe it.
  struct RecorderInfo {
    double seconds = 0;         // samples kept (FlightRecorderStats.seconds); 0 = none
    double window_seconds = 0;  // how often its batches come (Hello.window_seconds)
  };
  RecorderInfo FlightRecorderOf(const std::string& node) const;

  // The per-node figures at this moment, rendered as metrics by
  // exporters/exposition/link_render.h.
  LinkSnapshot Snapshot() const;

  struct LinkQuery {
    int64_t from_unix_ns = 0;  // 0 = to - seconds
    int64_t to_unix_ns = 0;    // 0 = the newest bucket held
    double seconds = 10;
    int64_t bucket_ns = 0;        // 0 = the stored resolution; rounded up to a multiple of it
    std::string node;             // empty = all
    std::set<std::string> nodes;  // non-empty: only these nodes' links (with `node`: both)
    std::string direction;        // "transmit", "receive", empty = both
  };
  // Link x time: one row per port and direction ("node/device:port tx"), the maximum of the
  // stored buckets in each column (a one-bucket microburst stays visible), NaN where no data.
  HeatmapModel LinksHeatmap(const LinkQuery& query) const;
  // Node x node bytes over the last `seconds` from the captures' top peer pairs. An IP that a
  // Hello lists maps to its node, others stay IPs. A pair seen by both ends' captures counts
  // once: per pair, the largest total any one node reported. `only` non-empty keeps the pairs
  // whose both ends are nodes it names (a job's nodes).
  HeatmapModel NodesHeatmap(double seconds, const std::set<std::string>& only = {}) const;

  // The recent anomalies, newest last; node_filter empty = all nodes.
  std::vector<LinkAnomaly> Anomalies(absl::string_view node_filter) const;
  // The loss patterns over every link and node (AnalyzeLossPatterns, loss_patterns.h).
  // Priority-tagged loss events are the deltas of the {rx,tx}_prio<p>_<kind> counters
  // (collectors::ParsePriorityStat) that IsLossCounter accepts: rx_prio3_discards,
  // rx_prio3_buf_discard, rx_prio3_cong_discard; not pause, bytes, packets or marked.
  LossPatterns Patterns() const;
  // The flight recordings the agents attached, newest last; node_filter empty = all nodes.
  std::vector<LinkRecording> FlightRecordings(absl::string_view node_filter) const;

  std::optional<PeriodEstimate> StepPeriod(const std::string& node) const;
  // Bytes held by the per-port utilization rings (what scales with links x history).
  uint64_t series_bytes() const;
  const LinkAnalysisOptions& options() const { return options_; }

 private:
  // A ring of values indexed by absolute bucket number (unix_ns / bucket), newest at `latest`.
  template <typename T>
  struct Ring {
    std::vector<T> v;
    int64_t latest = INT64_MIN;
    T missing{};
    void Init(size_t n, T miss) {
      v.assign(n, miss);
      missing = miss;
      latest = INT64_MIN;
    }
    // Moves the ring forward to `abs` (clearing what it skips) if needed; false when abs is too
    // old to be held.
    bool Reach(int64_t abs);
    T& operator[](int64_t abs) {
      return v[static_cast<size_t>(
          ((abs % static_cast<int64_t>(v.size())) + static_cast<int64_t>(v.size())) %
          static_cast<int64_t>(v.size()))];
    }
    T Get(int64_t abs) const;
  };
  struct PortLinks {
    v1::PortInfo info;
    Ring<uint8_t> tx, rx;
    std::deque<uint64_t> loss;  // loss events per window, newest last
    uint64_t loss_sum = 0;
  };
  struct PeerWindow {
    int64_t end_unix_ns;
    std::vector<std::pair<std::pair<std::string, std::string>, uint64_t>> bytes;
  };
  // Loss events of one port and PFC priority in one window (only nonzero ones are kept).
  struct PriorityLoss {
    uint32_t port_index;
    uint8_t priority;  // 0-7
    uint64_t events;
  };
  struct NodeLinks {
    uint64_t instance_id = 0;
    std::vector<PortLinks> ports;
    std::vector<std::string> addresses;
    Ring<double> period_bytes;
    size_t batches_since_period = 0;
    std::optional<PeriodEstimate> period;
    std::deque<double> window_bytes, window_bursts;
    std::map<std::string, uint64_t> anomalies_total;
    double imbalance[2] = {NAN, NAN};  // transmit, receive
    std::deque<PeerWindow> peers;
    std::deque<std::pair<std::pair<std::string, std::string>, int64_t>> loss_events;
    // Priority-tagged loss of the last loss_windows batches that carried port windows, newest
    // last (empty vectors for windows without any).
    std::deque<std::vector<PriorityLoss>> priority_loss;
    std::deque<LinkRecording> recordings;
    uint64_t flight_recorder_bytes = 0;
    double flight_recorder_seconds = 0;
    uint64_t flight_recorder_requests_dropped = 0;
    double window_seconds = 0;
    bool has_flight_recorder = false;
  };

  void IngestSeries(NodeLinks& n, const v1::UtilizationSeries& s, int64_t offset_ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckAnomaly(const std::string& node, NodeLinks& n, std::deque<double>& history,
                    const char* kind, double value, int64_t unix_ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const LinkAnalysisOptions options_;
  const size_t ring_buckets_;
  mutable absl::Mutex mu_;
  std::map<std::string, NodeLinks> nodes_ ABSL_GUARDED_BY(mu_);
  std::deque<LinkAnomaly> anomalies_ ABSL_GUARDED_BY(mu_);
};

}  // namespace fabricscope::exporters
