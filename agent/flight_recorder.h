#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::agent {

// One raw sample of one port: both directions of one fast-sampler tick.
struct FlightSample {
  int64_t t_ns = 0;         // CLOCK_MONOTONIC end of the sample
  int64_t interval_ns = 0;  // measured time since the previous good read
  uint64_t tx_bytes = 0;
  uint64_t rx_bytes = 0;
  float tx_utilization = NAN;  // bytes / (line rate x interval); NaN when the rate is unknown
  float rx_utilization = NAN;
};

// The agent's flight recorder: the last `seconds` of raw sub-ms samples of every port, in one
// preallocated ring per port, so that the samples around an event (a microburst with loss, a
// slow collective) can be attached to a batch after the fact.
//
// Memory: ports x capacity x sizeof(FlightSample) (40 bytes), fixed at construction; capacity =
// ceil(seconds / sample_period) x 1.25 + 16 (the slack keeps `seconds` of history when ticks come
// early after a late one). At 1 ms that is 500 KB per port for 10 s, at 100 us 5 MB.
//
// Not thread-safe: owned by the pipeline thread. Record() does not allocate.
class FlightRecorder {
 public:
  // ports: number of ports; seconds <= 0 disables recording (capacity 0).
  FlightRecorder(size_t ports, double seconds, int64_t sample_period_ns);

  // Appends a sample of `port` (ignored for an out-of-range port), evicting the oldest when full.
  // Samples of a port must come in non-decreasing t_ns order.
  void Record(size_t port, const FlightSample& s);

  // Appends to *out the samples of `port` whose end time lies in [t0_ns, t1_ns], oldest first,
  // at most max_samples of them (the earliest ones). Returns the number of matching samples,
  // which exceeds what was appended when max_samples cut them.
  size_t Extract(size_t port, int64_t t0_ns, int64_t t1_ns, size_t max_samples,
                 std::vector<FlightSample>* out) const;

  // Fills a FlightRecording of `port` for [t0_ns, t1_ns] (port_index, reason, from/to, the
  // sample arrays, truncated). Returns the number of samples attached.
  size_t Fill(size_t port, int64_t t0_ns, int64_t t1_ns, size_t max_samples,
              v1::FlightRecording* out) const;

  size_t ports() const { return rings_.size(); }
  size_t capacity() const { return capacity_; }  // samples per port
  size_t size(size_t port) const { return port < rings_.size() ? rings_[port].count : 0; }
  double seconds() const { return seconds_; }
  // Bytes held by the rings (the preallocated sample storage).
  uint64_t bytes() const {
    return static_cast<uint64_t>(storage_.capacity()) * sizeof(FlightSample);
  }

 private:
  struct Ring {
    size_t head = 0;   // index (within the port's slice) of the oldest sample
    size_t count = 0;  // samples held
  };
  const FlightSample& At(size_t port, size_t i) const {  // i-th oldest
    return storage_[port * capacity_ + (rings_[port].head + i) % capacity_];
  }
  // First index i (oldest = 0) with At(port, i).t_ns >= t_ns.
  size_t LowerBound(size_t port, int64_t t_ns) const;

  double seconds_;
  size_t capacity_;
  std::vector<FlightSample> storage_;  // ports x capacity_, one slice per port
  std::vector<Ring> rings_;
};

}  // namespace fabricscope::agent
