#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "agent/histogram.h"
#include "agent/microburst.h"
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
// this and the previous good read of that counter, never the nominal period (DESIGN.md "Time").
// Windows are aligned to multiples of window_ns on CLOCK_MONOTONIC.
//
// Not thread-safe: owned by the pipeline thread. Allocates only when a window closes.
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

  // Closes the current window at `end_ns` (shutdown), ending open bursts.
  void Flush(int64_t end_ns);

  // Batches completed since the last call, oldest first.
  std::vector<v1::Batch> TakeReady();

  const std::vector<collectors::PortDescriptor>& ports() const { return ports_; }
  uint64_t microbursts_total() const { return microbursts_total_; }
  uint64_t ticks() const { return ticks_; }

 private:
  struct CounterState {
    uint64_t prev_raw = 0;  // for kState: the current level
    int64_t prev_t_ns = 0;
    bool have_prev = false;
    uint64_t total = 0;         // scaled, since the hardware baseline
    uint64_t window_delta = 0;  // scaled
    bool saturated = false;
  };
  struct DirectionState {
    explicit DirectionState(MicroburstThresholds t)
        : detector(t),
          burst_durations(MicroburstDurationBounds()),
          sample_util(UtilizationBounds()) {}
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
  };
  struct PortState {
    std::vector<CounterState> counters;
    uint64_t link_flaps = 0;
    uint64_t rate_changes = 0;
    int state_idx = -1, phys_idx = -1, rate_idx = -1;
    int tx_bytes = -1, rx_bytes = -1, tx_packets = -1, rx_packets = -1;
    DirectionState tx, rx;
    uint32_t window_resets = 0;
    uint32_t window_unavailable = 0;
    PortState(MicroburstThresholds t) : tx(t), rx(t) {}
  };

  void CloseWindow(int64_t end_ns);
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
};

}  // namespace fabricscope::agent
