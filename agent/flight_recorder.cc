#include "agent/flight_recorder.h"

#include <algorithm>

namespace fabricscope::agent {

FlightRecorder::FlightRecorder(size_t ports, double seconds, int64_t sample_period_ns)
    : seconds_(seconds > 0 ? seconds : 0), capacity_(0), rings_(ports) {
  if (seconds_ > 0 && sample_period_ns > 0) {
    const double per_port = std::ceil(seconds_ * 1e9 / static_cast<double>(sample_period_ns));
    capacity_ = static_cast<size_t>(per_port * 1.25) + 16;
  }
  storage_.resize(ports * capacity_);
  storage_.shrink_to_fit();
}

void FlightRecorder::Record(size_t port, const FlightSample& s) {
  if (port >= rings_.size() || capacity_ == 0) return;
  Ring& r = rings_[port];
  if (r.count == capacity_) {
    storage_[port * capacity_ + r.head] = s;
    r.head = (r.head + 1) % capacity_;
    return;
  }
  storage_[port * capacity_ + (r.head + r.count) % capacity_] = s;
  ++r.count;
}

size_t FlightRecorder::LowerBound(size_t port, int64_t t_ns) const {
  size_t lo = 0, hi = rings_[port].count;
  while (lo < hi) {
    const size_t mid = lo + (hi - lo) / 2;
    if (At(port, mid).t_ns < t_ns) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

size_t FlightRecorder::Extract(size_t port, int64_t t0_ns, int64_t t1_ns, size_t max_samples,
                               std::vector<FlightSample>* out) const {
  if (port >= rings_.size() || t1_ns < t0_ns) return 0;
  const size_t first = LowerBound(port, t0_ns);
  size_t matching = 0;
  for (size_t i = first; i < rings_[port].count; ++i) {
    const FlightSample& s = At(port, i);
    if (s.t_ns > t1_ns) break;
    if (matching < max_samples) out->push_back(s);
    ++matching;
  }
  return matching;
}

size_t FlightRecorder::Fill(size_t port, int64_t t0_ns, int64_t t1_ns, size_t max_samples,
                            v1::FlightRecording* out) const {
  std::vector<FlightSample> samples;
  const size_t matching = Extract(port, t0_ns, t1_ns, max_samples, &samples);
  out->set_port_index(static_cast<uint32_t>(port));
  out->set_from_ns(t0_ns);
  out->set_to_ns(t1_ns);
  out->set_truncated(matching > samples.size());
  for (const FlightSample& s : samples) {
    out->add_time_ns(s.t_ns);
    out->add_interval_ns(s.interval_ns);
    out->add_transmit_bytes(s.tx_bytes);
    out->add_receive_bytes(s.rx_bytes);
    out->add_transmit_utilization(s.tx_utilization);
    out->add_receive_utilization(s.rx_utilization);
  }
  return samples.size();
}

}  // namespace fabricscope::agent
