#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "agent/collective_options.h"
#include "agent/flight_recorder.h"
#include "agent/p2_quantile.h"
#include "agent/pipeline.h"
#include "agent/qp_ports.h"
#include "agent/transfer_ledger.h"
#include "collectors/common/port_activity.h"
#include "collectors/counter_meaning.h"
#include "collectors/port.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::agent {

// What the collective analysis hands on for one batch, as typed records: the agent's batch
// assembler (agent/batch_assembler.h) writes them into the v1::Batch, once.
struct AnalyzerOutput {
  // Completed collectives, each with its analysis (Collective.analysis) or, for one that could
  // not be analysed, none; in the order one Process call analysed them (Append puts another
  // output's after them, whenever those were analysed).
  std::vector<v1::Collective> collectives;
  std::vector<v1::FlightRecording> recordings;       // the samples around slow ones
  std::optional<v1::CollectiveAnalysisStats> stats;  // set when a window closed

  bool empty() const { return collectives.empty() && recordings.empty() && !stats; }
  // Appends everything to *batch (collectives, flight_recordings, collective_analysis) and
  // leaves this empty.
  void MoveInto(v1::Batch* batch);
  // Appends another output's collectives and recordings after this one's and leaves it empty.
  // Stats: this one's when set (a window's output receiving an early batch's carry, which has
  // none), else the other's.
  void Append(AnalyzerOutput&& other);
};

// The loss events of a port during a collective (collectors/common/port_activity.h, one rule for
// the agent and the aggregator).
using common::LossEvents;

// True when `name` (a --collective-rails entry or a captured interface) names port p: its device
// ("mlx5_0", "eth0"), its "device:port" key, or its network interface.
bool MatchesRail(const collectors::PortDescriptor& p, const std::string& name);

// The per-collective correlation of the agent: each collective record (from the GPU timeline,
// agent/gpu_timeline.h) is joined with what the node's ports did during its [start_ns, end_ns]:
// the flight recorder's raw samples (bytes, utilization, saturated time), the microbursts the
// pipeline reported, and the deltas of the slow sampler's loss, retransmit, CNP and pause
// counters (OnCounterDelta). A collective is analysed only once the samples covering it are in
// (delay_ns past its end), then classified:
//
//   1. network_lossy      some candidate port had loss/retransmit events >= lossy_min_events
//                         and >= lossy_min_ratio of its packets, or paused >=
//                         lossy_min_pause_ratio of the duration; or (the slow tail) had any
//                         such events while the collective took >= lossy_tail_ratio x the
//                         median of its kind's clean instances; or had such events on a port
//                         whose recent loss rate is >= lossy_min_rate;
//   2. network_saturated  some candidate port was saturated (samples >= saturation_utilization)
//                         or inside a microburst for >= saturated_min_ratio of the time; or
//                         the ports moved >= contention_ratio x its own proxy bytes while it
//                         took >= lossy_tail_ratio x its kind's clean median (another flow);
//   3. waiting_on_peers   it lasted >= waiting_min_ns and every candidate port's mean
//                         utilization stayed below idle_max_utilization: this rank had
//                         nothing to move, so it waited for a peer (a straggler elsewhere);
//   4. normal             otherwise; "unknown" when no sample covered it.
//
// A counter delta counts for a collective when its read interval (previous read, this read]
// overlaps the collective's; node-level TCP retransmissions count on every network interface.
// Packet-capture loss events (AddCaptureLoss) count when their time falls in [start, end]; as
// they see the same losses as the counters, the lossy rule takes the larger of the two counts
// (loss + retransmit counters, or captured events) per port.
//
// Not thread-safe: owned by the pipeline thread (as the Pipeline and the FlightRecorder).
class CollectiveAnalyzer : public CounterDeltaObserver {
 public:
  // ports: the pipeline's port list (indices as in Batch records). recorder: the pipeline's.
  CollectiveAnalyzer(const std::vector<collectors::PortDescriptor>& ports,
                     const FlightRecorder& recorder, CollectiveAnalysisOptions options);

  // A non-zero delta of counter `counter` of port `port` read over (from_ns, to_ns].
  void OnCounterDelta(uint32_t port, uint32_t counter, int64_t from_ns, int64_t to_ns,
                      uint64_t delta) override;
  // A microburst as the pipeline ends it.
  void OnMicroburst(uint32_t port, int64_t start_ns, int64_t end_ns) override;
  // A link that retrained (the pipeline, as the port's rate file changes): the collectives
  // analysed from now on are judged at the new rate, also one still pending from before.
  void OnLineRate(uint32_t port, int64_t t_ns, uint64_t bytes_per_second) override;
  // The packet capture's loss events of one window (v1::CaptureWindow.loss_events, unix time;
  // unix = monotonic + unix_offset_ns as in Batch.unix_offset_ns). Those that mean a lost packet
  // (kinds psn_gap, go_back_n, ack_timeout, nak_sequence_error, retransmission,
  // fast_retransmission; not spurious retransmissions, RNR NAKs or reordering) count on the
  // candidate ports whose interface is window.interface. Returns how many were kept.
  size_t AddCaptureLoss(const v1::CaptureWindow& window, int64_t unix_offset_ns);
  // The same for events of `interface` taken before their window closed
  // (CaptureRunner::NewLossEvents).
  size_t AddCaptureLoss(const std::string& interface,
                        const std::vector<v1::PacketLossEvent>& events, int64_t unix_offset_ns);
  // A completed collective, to be sent with its analysis (Collective.analysis) once its samples
  // are in. One that cannot be analysed (no start or end time, a timing source without a
  // completion signal) or that finds the queue full (max_pending; counted in dropped_total) is
  // appended to out->collectives at once, without an analysis.
  void AddCollective(v1::Collective c, AnalyzerOutput* out);
  // Analyses every queued collective whose samples are in (the pipeline has seen the ticks up
  // to data_until_ns) and appends it, its analysis inside, to out->collectives, with the
  // flight recordings of slow ones (out->recordings). close_window: this is the window
  // [window_start_ns, window_end_ns) closing: out->stats is set and the recording budget
  // (recordings_per_window, samples_per_window) starts again; false for an early batch, which
  // spends the same budget, sets no stats and ignores the window bounds.
  void Process(int64_t data_until_ns, int64_t window_start_ns, int64_t window_end_ns,
               AnalyzerOutput* out, bool close_window = true);
  // Appends every queued collective to out->collectives without an analysis (at shutdown:
  // their samples will not come). Returns how many.
  size_t Release(AnalyzerOutput* out);
  // The same three onto a batch (out.MoveInto(batch); Process takes the batch's window bounds),
  // for tests.
  void AddCollective(v1::Collective c, v1::Batch* batch);
  void Process(int64_t data_until_ns, v1::Batch* batch, bool close_window = true);
  size_t Release(v1::Batch* batch);

  // Which ports each producer process has RDMA queue pairs on (QpPortWatcher::Latest): a
  // collective whose process is in it is analysed on those of its candidate ports only
  // (CollectiveAnalysis.ports_from_qps), and its own and sharers' bytes are those of these ports
  // (TransferLedger::Scope). Null or a process not in it: every candidate port, node-wide.
  void SetProcessPorts(std::shared_ptr<const ProcessPorts> ports) {
    process_ports_ = std::move(ports);
  }

  // Exposed for tests: the analysis of one collective with what is known now.
  v1::CollectiveAnalysis Analyze(const v1::Collective& c) const;
  const std::vector<uint32_t>& candidate_ports() const { return candidates_; }

 private:
  enum class Signal : uint8_t { kNone, kLoss, kRetransmit, kCnp, kPause, kXmitWait };
  // The evidence a counter of the given meaning gives (collectors/counter_meaning.h). A
  // per-priority discard of a port with rx_discards_phy gives none: its drops are counted there.
  static Signal SignalOf(collectors::Meaning m, bool port_has_discards_phy);
  struct CounterEvent {
    uint32_t port;
    Signal signal;
    int64_t from_ns, to_ns;
    uint64_t delta;
  };
  struct Burst {
    uint32_t port;
    int64_t start_ns, end_ns;
  };
  struct CapturedLoss {
    uint32_t port;
    int64_t t_ns;  // monotonic
  };
  struct Pending {
    v1::Collective c;
    int64_t queued_data_ns;  // data_until_ns when it arrived (0 before the first Process)
  };
  using Kind = std::tuple<uint64_t, std::string, int>;

  void Classify(v1::CollectiveAnalysis* a, int64_t duration_ns) const;
  double NetworkShare(int64_t window_start_ns, int64_t window_end_ns, bool* marker,
                      double* seconds) const;

  std::vector<collectors::PortDescriptor> ports_;
  const FlightRecorder& recorder_;
  CollectiveAnalysisOptions options_;
  std::vector<uint32_t> candidates_;
  std::shared_ptr<const ProcessPorts> process_ports_;
  // The candidate ports c's process has queue pairs on (process_ports_); empty when unknown.
  std::vector<uint32_t> RankPorts(const v1::Collective& c) const;
  // The TransferLedger scope of those ports (mask 0 when there are none).
  TransferLedger::Scope ScopeOf(const std::vector<uint32_t>& ports) const;
  // The scope of the ports an analysis was restricted to (none unless ports_from_qps).
  TransferLedger::Scope ScopeOf(const v1::CollectiveAnalysis& a) const;
  std::vector<std::vector<Signal>> signals_;  // per port, per counter
  std::vector<bool> netdev_;                  // a network interface (gets TCP retransmits)
  std::deque<CounterEvent> events_;
  std::deque<Burst> bursts_;
  std::deque<CapturedLoss> captured_;  // by arrival, roughly by time
  std::deque<Pending> pending_;
  struct KindStats {
    P2Quantile p99{0.99};
    P2Quantile clean_median{0.5};  // durations of the instances without loss events
  };
  // The slow-tail lossy rule (CollectiveAnalysisOptions::lossy_tail_ratio); true when it named
  // the collective network_lossy.
  bool TailLossy(const KindStats& k, int64_t duration_ns, v1::CollectiveAnalysis* a) const;
  // The persistent-loss rule (CollectiveAnalysisOptions::lossy_min_rate), after
  // UpdateLossRates(*a); true when the collective is (now) network_lossy.
  bool RateLossy(v1::CollectiveAnalysis* a) const;
  // "mlx5_0:1" for an RDMA port, the interface name otherwise.
  static std::string PortLabel(const collectors::PortDescriptor& p);
  // The competing-flow rule (CollectiveAnalysisOptions::contention_ratio).
  // Returns the ports' bytes over the collective's own proxy bytes (0 when unknown).
  double Contended(const KindStats& k, const v1::Collective& c, v1::CollectiveAnalysis* a) const;
  void UpdateLossRates(const v1::CollectiveAnalysis& a);
  struct PortLoss {
    std::deque<std::pair<uint64_t, double>> recent;  // (events, packets) per collective
  };
  // The port's events recur (CollectiveAnalysisOptions::lossy_min_hits): the suffix of its
  // recent collectives where the binomial test is strongest, and whether it passes.
  struct Recurrence {
    bool recurring = false;
    size_t hits = 0, window = 0;  // collectives with an event, of the last `window`
    double p_value = 1;
    uint64_t events = 0;  // over the suffix
    double packets = 0;
  };
  Recurrence Recur(uint32_t port) const;
  std::map<Kind, KindStats> kinds_;
  // Each communicator's transfers (CollectiveAnalysis.own_bytes and .sharers), at most
  // max_kinds communicators.
  TransferLedger transfers_{options_.max_kinds};
  std::vector<PortLoss> port_loss_;                    // per port index
  std::deque<std::pair<int64_t, int64_t>> intervals_;  // analysed, by end time, last ~10 s
  std::deque<int64_t> marker_starts_;                  // iteration starts, last ~10 s
  uint64_t marker_comm_ = 0;
  bool have_marker_comm_ = false;
  int64_t last_data_ns_ = 0;
  size_t window_recordings_ = 0;  // spent of this window's budget
  size_t window_samples_ = 0;
  std::map<std::string, uint64_t> by_cause_;
  uint64_t analyzed_ = 0, slow_ = 0, dropped_ = 0, recordings_dropped_ = 0;
};

}  // namespace fabricscope::agent
