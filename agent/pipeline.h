#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/derived.h"
#include "agent/flight_recorder.h"
#include "agent/histogram.h"
#include "agent/microburst.h"
#include "agent/recording_requests.h"
#include "agent/utilization_series.h"
#include "collectors/counter.h"
#include "collectors/port.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::agent {

struct PipelineOptions {
  int64_t window_ns = 1'000'000'000;  // summary window length
  // The sampler's nominal period. A sample shorter than half of it (the tick after a late one:
  // deadlines stay on a fixed grid) holds too few frames to give a meaningful utilization, so
  // it is merged into the next sample before utilization and microbursts are computed. Bytes
  // and window totals are never affected. 0 = no merging.
  int64_t nominal_period_ns = 0;
  MicroburstThresholds thresholds;  // default for every port
  // Per-port override, keyed by PortDescriptor::Key() ("mlx5_0:1") or by device name alone.
  std::map<std::string, MicroburstThresholds> port_thresholds;
  // Bucket width of the per-port utilization series sent in every batch (the aggregator's link
  // x time heat map); 0 = no series.
  int64_t series_bucket_ns = 1'000'000;
  // Flight recorder: raw samples kept per port (0 = off), and what a window may attach when a
  // microburst overlaps loss: the samples from margin before the burst to margin after it, at
  // most recordings_per_window recordings and samples_per_window samples in all.
  double flight_recorder_seconds = 10;
  int64_t flight_margin_ns = 20'000'000;
  size_t flight_recordings_per_window = 8;
  size_t flight_samples_per_window = 4096;
  // What one answer to the aggregator's RecordingRequest may hold (agent/recording_requests.h):
  // 65,536 samples are about 2 MB on the wire, an eighth of the aggregator's 16 MiB message
  // limit (exporters/ingest/telemetry_service.h), and 4 s of 8 ports at 1 ms.
  size_t requested_samples_max = 65536;
};

// Sees every non-zero increase of a port's error or other (kError/kOther) counter, with the
// read interval it happened in. Called on the pipeline thread from AddTick; must not block.
class CounterDeltaObserver {
 public:
  virtual ~CounterDeltaObserver() = default;
  // delta is scaled (base units), read over (from_ns, to_ns].
  virtual void OnCounterDelta(uint32_t port, uint32_t counter, int64_t from_ns, int64_t to_ns,
                              uint64_t delta) = 0;
  // A microburst of port `port` over [start_ns, end_ns], when it ended (before its window
  // closes, so that an early analysis sees it).
  virtual void OnMicroburst(uint32_t /*port*/, int64_t /*start_ns*/, int64_t /*end_ns*/) {}
  // Port `port`'s line rate became `bytes_per_second` (> 0) at the sample read at `t_ns`: a
  // link that retrained. Not called for a port whose rate is a --line-rate override.
  virtual void OnLineRate(uint32_t /*port*/, int64_t /*t_ns*/, uint64_t /*bytes_per_second*/) {}
};

// Turns raw counter ticks into per-port rates, utilization, microbursts and window summaries.
//
// Input: ticks of one or more sampler groups (a fast group for byte and packet counters, a slow
// one for errors, hw_counters, ethtool, TCP and link state), each tick carrying one value and
// status per counter of its group in the group's layout order. Without SetGroups there is one
// group holding every counter of `ports`, port by port, counter by counter. Output: one Batch
// per window (seq and agent stats left for the caller to fill), collected by TakeReady().
//
// Utilization of a sample = bytes / (line rate x measured interval), using the time between
// this and the previous good read of that counter, never the nominal period (agent/README.md "The
// agent"). Windows are aligned to multiples of window_ns on CLOCK_MONOTONIC.
//
// Every sample of a port's byte counters also goes to the utilization series of the window
// (Batch.utilization_series) and to the flight recorder (its last flight_recorder_seconds).
// When a window closes with a microburst on a port that also shows loss in that window (a delta
// of an error counter, of an RDMA loss/retransmit/NAK/CNP hw_counter, of a discard/drop counter,
// or for netdevs of the node's TCP RetransSegs; see IsLossSignal in pipeline.cc), the recorder's
// samples around the burst are attached (Batch.flight_recordings, reason "burst_with_loss").
//
// When a window closes, the aggregator's requests for samples waiting in recording_inbox() are
// answered into its batch (Batch.flight_recordings, reason "requested").
//
// Not thread-safe (recording_inbox() aside): owned by the pipeline thread. Allocates only when
// a window closes.
class Pipeline {
 public:
  Pipeline(std::vector<collectors::PortDescriptor> ports, PipelineOptions options);

  // Where the i-th value of a group's tick goes: ports[port].counters[counter].
  struct CounterRef {
    uint32_t port;
    uint32_t counter;
  };
  // Replaces the default single group. Every ref must name an existing counter.
  void SetGroups(std::vector<std::vector<CounterRef>> groups);

  // A tick of group 0 (the default group).
  void AddTick(int64_t t_ns, const uint64_t* values, const collectors::ReadStatus* status) {
    AddTick(0, t_ns, values, status);
  }
  void AddTick(size_t group, int64_t t_ns, const uint64_t* values,
               const collectors::ReadStatus* status);

  // Borrowed; null = none. The collective analysis (agent/collective_analysis.h) uses it.
  void set_counter_observer(CounterDeltaObserver* observer) { observer_ = observer; }

  // Closes the current window at `end_ns` (shutdown), ending open bursts.
  void Flush(int64_t end_ns);

  // Batches completed since the last call, oldest first.
  std::vector<v1::Batch> TakeReady();

  const std::vector<collectors::PortDescriptor>& ports() const { return ports_; }
  uint64_t microbursts_total() const { return microbursts_total_; }
  uint64_t ticks() const { return ticks_; }
  // The pipeline thread may read it (e.g. to attach samples around a slow collective); its
  // bytes() never changes after construction and may be read from any thread.
  const FlightRecorder& flight_recorder() const { return recorder_; }
  // Any thread may push requests; they are answered at the next window's close.
  RecordingInbox& recording_inbox() { return inbox_; }

 private:
  struct CounterState {
    uint64_t prev_raw = 0;  // for kState: the current level
    int64_t prev_t_ns = 0;
    bool have_prev = false;
    uint64_t total = 0;         // scaled, since the hardware baseline
    uint64_t window_delta = 0;  // scaled
    bool saturated = false;
    bool saturation_logged = false;  // a stuck byte or packet counter is logged once
  };
  struct DirectionState {
    DirectionState(MicroburstThresholds t, int64_t window_ns, int64_t bucket_ns)
        : detector(t),
          burst_durations(MicroburstDurationBounds()),
          sample_util(UtilizationBounds()),
          series(window_ns, bucket_ns) {}
    MicroburstDetector detector;
    Histogram burst_durations;
    Histogram sample_util;
    uint64_t bursts_total = 0;
    uint32_t window_bursts = 0;
    uint64_t window_bytes = 0;
    uint64_t window_packets = 0;
    int64_t window_covered_ns = 0;
    double window_peak = 0;
    uint32_t window_samples = 0;
    uint64_t carry_bytes = 0;  // a short sample waiting to be merged into the next
    int64_t carry_ns = 0;
    UtilizationSeriesBuilder series;
  };
  struct PortState {
    std::vector<CounterState> counters;
    uint64_t link_flaps = 0;
    uint64_t rate_changes = 0;
    int state_idx = -1, phys_idx = -1, rate_idx = -1;
    int tx_bytes = -1, rx_bytes = -1, tx_packets = -1, rx_packets = -1;
    DirectionState tx, rx;
    uint32_t window_resets = 0;
    std::map<std::string, uint32_t> window_resets_by_group;  // rare: a reset or re-plug
    uint32_t window_unavailable = 0;
    FlightSample pending;  // this tick's sample for the flight recorder
    bool has_pending = false;
    PortState(MicroburstThresholds t, int64_t window_ns, int64_t bucket_ns)
        : tx(t, window_ns, bucket_ns), rx(t, window_ns, bucket_ns) {}
  };

  void CloseWindow(int64_t end_ns);
  // CloseWindow's parts: which ports had a loss signal in the window (and every non-RDMA port
  // when the node's TCP retransmitted), one port's PortWindow, its utilization series, and its
  // counters (errors, other counters, link state) with the windows ComputeDerived reads.
  std::vector<bool> PortsWithLoss() const;
  void ClosePortWindow(size_t pi, int64_t end_ns);
  void AddUtilizationSeries(size_t pi, int64_t end_ns);
  std::vector<CounterWindow> FillCounters(size_t pi, v1::PortWindow* pw);
  void StartWindow(int64_t start_ns);
  // Attaches flight-recorder samples around this window's microbursts on ports with loss.
  void AttachBurstsWithLoss(const std::vector<bool>& port_has_loss);
  void UpdateCounter(size_t port_index, size_t counter_index, int64_t t_ns, uint64_t value);
  void RecordBurst(size_t port_index, v1::Direction dir, DirectionState& d,
                   const MicroburstEvent& e);
  void FeedDirection(size_t port_index, v1::Direction dir, DirectionState& d, uint64_t bytes,
                     int64_t interval_ns, int64_t t_ns, bool broken);

  std::vector<collectors::PortDescriptor> ports_;
  PipelineOptions options_;
  std::vector<PortState> state_;
  std::vector<std::vector<CounterRef>> groups_;
  int64_t window_start_ns_ = 0;
  int64_t window_end_ns_ = 0;  // 0 until the first tick
  uint64_t ticks_ = 0;
  uint64_t microbursts_total_ = 0;
  v1::Batch current_;
  std::vector<v1::Batch> ready_;
  FlightRecorder recorder_;
  std::vector<uint32_t> touched_;  // ports with a pending flight sample in this tick
  RecordingInbox inbox_;
  uint64_t requests_answered_ = 0;
  uint64_t recordings_total_ = 0;
  uint64_t recordings_dropped_ = 0;
  CounterDeltaObserver* observer_ = nullptr;
};

}  // namespace fabricscope::agent
