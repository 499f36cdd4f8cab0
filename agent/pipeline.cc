#include "agent/pipeline.h"

#include <algorithm>
#include <cmath>

#include "agent/derived.h"
#include "collectors/clock.h"
#include "collectors/common/utilization_codec.h"
#include "collectors/counter_meaning.h"
#include "glog/logging.h"

namespace fabricscope::agent {

using collectors::CounterRole;
using collectors::DeltaKind;
using collectors::ReadStatus;

namespace {

// Largest raw increment a counter can plausibly make in interval_ns: twice what the line rate
// allows (bytes), or twice that many minimum-size (64-byte) frames (packets). 0 = no bound.
uint64_t PlausibleRaw(CounterRole role, uint64_t rate_bps, int64_t interval_ns, uint32_t scale) {
  if (rate_bps == 0 || interval_ns <= 0) return 0;
  const double bytes = 2.0 * static_cast<double>(rate_bps) * static_cast<double>(interval_ns) / 1e9;
  switch (role) {
    case CounterRole::kTransmitBytes:
    case CounterRole::kReceiveBytes:
      return static_cast<uint64_t>(bytes / scale) + 1;
    case CounterRole::kTransmitPackets:
    case CounterRole::kReceivePackets:
      return static_cast<uint64_t>(bytes / 64.0) + 1;
    case CounterRole::kError:
    case CounterRole::kOther:
    case CounterRole::kState:
      return 0;
  }
  return 0;
}

void FillDirection(const Histogram& durations, const Histogram& util, uint64_t bytes,
                   uint64_t packets, uint64_t bytes_total, uint64_t packets_total, double mean,
                   double peak, uint32_t bursts, uint64_t bursts_total, uint32_t samples,
                   v1::DirectionWindow* out) {
  out->set_bytes(bytes);
  out->set_packets(packets);
  out->set_bytes_total(bytes_total);
  out->set_packets_total(packets_total);
  out->set_mean_utilization(mean);
  out->set_peak_utilization(peak);
  out->set_microbursts(bursts);
  out->set_microbursts_total(bursts_total);
  durations.ToProto(out->mutable_microburst_duration_seconds());
  util.ToProto(out->mutable_sample_utilization());
  out->set_samples(samples);
}

// Counters whose increase in a window means loss, a retransmission, a NAK or congestion
// feedback on the port: every error counter (corrupted or dropped frames), and the counters whose
// meaning (set at discovery from collectors/counter_meaning.cc) is loss or congestion feedback.
bool IsLossSignal(const collectors::CounterDescriptor& cd) {
  if (cd.role == CounterRole::kError) return true;
  if (cd.role != CounterRole::kOther) return false;
  return collectors::IsLoss(cd.meaning) || collectors::IsCongestionFeedback(cd.meaning);
}

// Node-level TCP retransmissions (Tcp: RetransSegs), which count as loss on every netdev port.
bool IsTcpRetransmission(const collectors::CounterDescriptor& cd) {
  return cd.meaning == collectors::Meaning::kTcpRetransmit;
}

}  // namespace

Pipeline::Pipeline(std::vector<collectors::PortDescriptor> ports, PipelineOptions options)
    : ports_(std::move(ports)),
      options_(std::move(options)),
      recorder_(ports_.size(), options_.flight_recorder_seconds,
                options_.nominal_period_ns > 0 ? options_.nominal_period_ns : 1'000'000) {
  if (options_.window_ns <= 0) options_.window_ns = 1'000'000'000;
  const int64_t bucket_ns =
      options_.series_bucket_ns > 0 ? options_.series_bucket_ns : options_.window_ns;
  state_.reserve(ports_.size());
  for (const collectors::PortDescriptor& p : ports_) {
    MicroburstThresholds t = options_.thresholds;
    if (auto it = options_.port_thresholds.find(p.Key()); it != options_.port_thresholds.end()) {
      t = it->second;
    } else if (auto it2 = options_.port_thresholds.find(p.device);
               it2 != options_.port_thresholds.end()) {
      t = it2->second;
    }
    PortState s(t, options_.window_ns, bucket_ns);
    s.counters.resize(p.counters.size());
    std::vector<CounterRef> refs;
    for (size_t k = 0; k < p.counters.size(); ++k) {
      const int idx = static_cast<int>(k);
      refs.push_back(CounterRef{static_cast<uint32_t>(state_.size()), static_cast<uint32_t>(k)});
      if (p.counters[k].role == CounterRole::kState) {
        if (p.counters[k].name == "state") s.state_idx = idx;
        if (p.counters[k].name == "phys_state") s.phys_idx = idx;
        if (p.counters[k].name == "rate") s.rate_idx = idx;
      }
      switch (p.counters[k].role) {
        case CounterRole::kTransmitBytes:
          s.tx_bytes = idx;
          break;
        case CounterRole::kReceiveBytes:
          s.rx_bytes = idx;
          break;
        case CounterRole::kTransmitPackets:
          s.tx_packets = idx;
          break;
        case CounterRole::kReceivePackets:
          s.rx_packets = idx;
          break;
        case CounterRole::kError:
        case CounterRole::kOther:
        case CounterRole::kState:
          break;
      }
    }
    state_.push_back(std::move(s));
    if (groups_.empty()) groups_.emplace_back();
    groups_[0].insert(groups_[0].end(), refs.begin(), refs.end());
  }
  if (groups_.empty()) groups_.emplace_back();
  touched_.reserve(ports_.size());
}

void Pipeline::StartWindow(int64_t start_ns) {
  window_start_ns_ = start_ns;
  for (PortState& ps : state_) {
    ps.tx.series.Reset(start_ns);
    ps.rx.series.Reset(start_ns);
  }
}

void Pipeline::SetGroups(std::vector<std::vector<CounterRef>> groups) {
  groups_ = std::move(groups);
}

void Pipeline::RecordBurst(size_t port_index, v1::Direction dir, DirectionState& d,
                           const MicroburstEvent& e) {
  ++d.bursts_total;
  ++d.window_bursts;
  ++microbursts_total_;
  d.burst_durations.Observe(static_cast<double>(e.duration_ns) / 1e9);
  v1::Microburst* m = current_.add_microbursts();
  m->set_port_index(static_cast<uint32_t>(port_index));
  m->set_direction(dir);
  m->set_start_ns(e.start_ns);
  m->set_duration_ns(e.duration_ns);
  m->set_peak_utilization(e.peak_utilization);
  m->set_bytes(e.bytes);
  if (observer_ != nullptr) {
    observer_->OnMicroburst(static_cast<uint32_t>(port_index), e.start_ns,
                            e.start_ns + e.duration_ns);
  }
}

void Pipeline::FeedDirection(size_t port_index, v1::Direction dir, DirectionState& d,
                             uint64_t bytes, int64_t interval_ns, int64_t t_ns, bool broken) {
  d.window_bytes += bytes;
  if (!broken && interval_ns > 0) {
    d.series.Add(t_ns, interval_ns, bytes);
    PortState& ps = state_[port_index];
    if (!ps.has_pending) {
      ps.has_pending = true;
      ps.pending = FlightSample{};
      touched_.push_back(static_cast<uint32_t>(port_index));
    }
    ps.pending.t_ns = t_ns;
    ps.pending.interval_ns = interval_ns;
    const uint64_t rate = ports_[port_index].line_rate_bytes_per_second;
    const float util = rate > 0 ? static_cast<float>(static_cast<double>(bytes) /
                                                     (static_cast<double>(rate) *
                                                      static_cast<double>(interval_ns) / 1e9))
                                : NAN;
    if (dir == v1::DIRECTION_TRANSMIT) {
      ps.pending.tx_bytes = bytes;
      ps.pending.tx_utilization = util;
    } else {
      ps.pending.rx_bytes = bytes;
      ps.pending.rx_utilization = util;
    }
  }
  if (broken || interval_ns <= 0) {
    if (auto e = d.detector.Break()) RecordBurst(port_index, dir, d, *e);
    d.carry_bytes = 0;
    d.carry_ns = 0;
    return;
  }
  d.window_covered_ns += interval_ns;
  ++d.window_samples;
  if (options_.nominal_period_ns > 0 && d.carry_ns + interval_ns < options_.nominal_period_ns / 2) {
    d.carry_bytes += bytes;
    d.carry_ns += interval_ns;
    return;
  }
  bytes += d.carry_bytes;
  interval_ns += d.carry_ns;
  d.carry_bytes = 0;
  d.carry_ns = 0;
  const uint64_t rate = ports_[port_index].line_rate_bytes_per_second;
  if (rate == 0) return;
  const double util = static_cast<double>(bytes) /
                      (static_cast<double>(rate) * static_cast<double>(interval_ns) / 1e9);
  d.window_peak = std::max(d.window_peak, util);
  d.sample_util.Observe(util);
  if (auto e = d.detector.Add(t_ns, interval_ns, util, bytes)) RecordBurst(port_index, dir, d, *e);
}

void Pipeline::AddTick(size_t group, int64_t t_ns, const uint64_t* values,
                       const ReadStatus* status) {
  const int64_t w = options_.window_ns;
  if (window_end_ns_ == 0) {
    StartWindow(t_ns);
    window_end_ns_ = (t_ns / w + 1) * w;
  }
  if (t_ns >= window_end_ns_) {
    CloseWindow(window_end_ns_);
    if (t_ns >= window_end_ns_) {  // a gap of whole windows (sampler stalled): skip them
      StartWindow((t_ns / w) * w);
      window_end_ns_ = window_start_ns_ + w;
    }
  }
  if (group == 0) ++ticks_;
  if (group >= groups_.size()) return;
  const std::vector<CounterRef>& layout = groups_[group];
  for (size_t i = 0; i < layout.size(); ++i) {
    if (status[i] == ReadStatus::kNotRead) continue;
    if (status[i] != ReadStatus::kOk) {
      ++state_[layout[i].port].window_unavailable;
      continue;  // keep the previous good read; the next delta spans the gap
    }
    UpdateCounter(layout[i].port, layout[i].counter, t_ns, values[i]);
  }
  for (uint32_t pi : touched_) {
    recorder_.Record(pi, state_[pi].pending);
    state_[pi].has_pending = false;
  }
  touched_.clear();
}

void Pipeline::UpdateCounter(size_t pi, size_t k, int64_t t_ns, uint64_t v) {
  PortState& ps = state_[pi];
  const collectors::PortDescriptor& pd = ports_[pi];
  CounterState& cs = ps.counters[k];
  const collectors::CounterDescriptor& cd = pd.counters[k];
  if (cd.role == CounterRole::kState) {
    if (cs.have_prev && v != cs.prev_raw) {
      v1::LinkEvent* e = current_.add_link_events();
      e->set_port_index(static_cast<uint32_t>(pi));
      e->set_time_ns(t_ns);
      e->set_what(cd.name);
      e->set_old_value(cs.prev_raw);
      e->set_new_value(v);
      // IB PortState 4 = ACTIVE (IBTA vol. 1 14.2.5.6); netdev operstate up maps to 4 too.
      if (static_cast<int>(k) == ps.state_idx && cs.prev_raw == 4) ++ps.link_flaps;
      if (static_cast<int>(k) == ps.rate_idx) ++ps.rate_changes;
    }
    // A link that retrained (400 -> 200 Gb/s) is judged at its new rate from this sample on:
    // utilization, microburst and saturation thresholds all divide by ports_[pi]'s rate. A
    // --line-rate override still wins; 0 (link down, "-1" speed) keeps the last known rate.
    if (static_cast<int>(k) == ps.rate_idx && v > 0 &&
        ports_[pi].line_rate_source != collectors::LineRateSource::kConfig) {
      const bool changed = ports_[pi].line_rate_bytes_per_second != v;
      ports_[pi].line_rate_bytes_per_second = v;
      ports_[pi].line_rate_source = collectors::LineRateSource::kSysfs;
      if (changed && observer_ != nullptr) {
        observer_->OnLineRate(static_cast<uint32_t>(pi), t_ns, v);
      }
    }
    cs.have_prev = true;
    cs.prev_raw = v;
    cs.prev_t_ns = t_ns;
    return;
  }
  if (!cs.have_prev) {
    cs.have_prev = true;
    cs.prev_raw = v;
    cs.prev_t_ns = t_ns;
    cs.total = v * cd.spec.scale;
    cs.saturated = cd.spec.behavior == collectors::CounterBehavior::kSaturating &&
                   v >= collectors::CounterMax(cd.spec.width_bits);
    return;
  }
  const int64_t interval = t_ns - cs.prev_t_ns;
  const collectors::Delta delta = collectors::ComputeDelta(
      cd.spec, cs.prev_raw, v,
      PlausibleRaw(cd.role, pd.line_rate_bytes_per_second, interval, cd.spec.scale));
  const uint64_t scaled = delta.raw * cd.spec.scale;
  const bool reset = delta.kind == DeltaKind::kReset;
  if (reset) {
    ++ps.window_resets;
    ++ps.window_resets_by_group[cd.group];
  }
  if (observer_ != nullptr && scaled > 0 && !reset &&
      (cd.role == CounterRole::kError || cd.role == CounterRole::kOther)) {
    observer_->OnCounterDelta(static_cast<uint32_t>(pi), static_cast<uint32_t>(k), cs.prev_t_ns,
                              t_ns, scaled);
  }
  cs.total += scaled;
  cs.window_delta += scaled;
  cs.saturated = delta.kind == DeltaKind::kSaturated;
  cs.prev_raw = v;
  cs.prev_t_ns = t_ns;
  switch (cd.role) {
    case CounterRole::kTransmitBytes:
      FeedDirection(pi, v1::DIRECTION_TRANSMIT, ps.tx, scaled, interval, t_ns, reset);
      break;
    case CounterRole::kReceiveBytes:
      FeedDirection(pi, v1::DIRECTION_RECEIVE, ps.rx, scaled, interval, t_ns, reset);
      break;
    case CounterRole::kTransmitPackets:
      ps.tx.window_packets += scaled;
      break;
    case CounterRole::kReceivePackets:
      ps.rx.window_packets += scaled;
      break;
    case CounterRole::kError:
    case CounterRole::kOther:
    case CounterRole::kState:
      break;
  }
}

std::vector<bool> Pipeline::PortsWithLoss() const {
  std::vector<bool> port_has_loss(state_.size(), false);
  bool tcp_retransmitted = false;
  for (size_t pi = 0; pi < state_.size(); ++pi) {
    for (size_t k = 0; k < ports_[pi].counters.size(); ++k) {
      if (state_[pi].counters[k].window_delta == 0) continue;
      if (IsLossSignal(ports_[pi].counters[k])) port_has_loss[pi] = true;
      if (ports_[pi].node_level && IsTcpRetransmission(ports_[pi].counters[k])) {
        tcp_retransmitted = true;
      }
    }
  }
  for (size_t pi = 0; pi < state_.size(); ++pi) {
    if (tcp_retransmitted && !ports_[pi].rdma && !ports_[pi].node_level) port_has_loss[pi] = true;
  }
  return port_has_loss;
}

void Pipeline::AddUtilizationSeries(size_t pi, int64_t end_ns) {
  PortState& ps = state_[pi];
  const uint64_t rate = ports_[pi].line_rate_bytes_per_second;
  v1::UtilizationSeries* us = current_.add_utilization_series();
  us->set_port_index(static_cast<uint32_t>(pi));
  us->set_bucket_ns(ps.tx.series.bucket_ns());
  // Both directions start at the same bucket: the lead bucket when either has it.
  DirectionState* dirs[2] = {ps.tx_bytes >= 0 ? &ps.tx : nullptr,
                             ps.rx_bytes >= 0 ? &ps.rx : nullptr};
  int64_t starts[2] = {window_start_ns_, window_start_ns_};
  std::string enc[2];
  for (int k = 0; k < 2; ++k) {
    if (dirs[k]) starts[k] = dirs[k]->series.Encode(rate, end_ns, &enc[k]);
  }
  const int64_t start = std::min(starts[0], starts[1]);
  for (int k = 0; k < 2; ++k) {
    // A direction without the lead bucket gets a "missing" byte in front.
    if (dirs[k] && starts[k] > start) {
      enc[k].insert(enc[k].begin(), static_cast<char>(common::kUtilizationMissing));
    }
  }
  us->set_start_ns(start);
  if (dirs[0]) *us->mutable_transmit() = std::move(enc[0]);
  if (dirs[1]) *us->mutable_receive() = std::move(enc[1]);
}

std::vector<CounterWindow> Pipeline::FillCounters(size_t pi, v1::PortWindow* pw) {
  PortState& ps = state_[pi];
  std::vector<CounterWindow> windows;
  for (size_t k = 0; k < ps.counters.size(); ++k) {
    const collectors::CounterDescriptor& cd = ports_[pi].counters[k];
    CounterState& cs = ps.counters[k];
    if (cs.have_prev && cd.role != CounterRole::kState) {
      windows.push_back(CounterWindow{&cd.name, cd.meaning, cs.total, cs.window_delta});
    }
    if (cd.role == CounterRole::kError && cs.have_prev) {
      v1::ErrorCounter* e = pw->add_errors();
      e->set_kind(cd.name);
      e->set_total(cs.total);
      e->set_delta(cs.window_delta);
      e->set_saturated(cs.saturated);
    } else if (cs.saturated && cd.role != CounterRole::kOther) {  // bytes or packets
      pw->add_saturated_counters(cd.name);
      if (!cs.saturation_logged) {
        cs.saturation_logged = true;
        LOG(WARNING) << ports_[pi].Key() << ": " << cd.path << " is stuck at 2^32 - 1, a "
                     << "32-bit PortCounters value that stopped counting: this port's " << cd.name
                     << " no longer moves (fabricscope_port_counter_saturated; "
                     << "no counters_ext/" << cd.name << "_64 to read instead)";
      }
    } else if (cd.role == CounterRole::kOther && cs.have_prev) {
      v1::CounterValue* c = pw->add_counters();
      c->set_group(cd.group);
      c->set_name(cd.name);
      c->set_meaning(static_cast<uint32_t>(cd.meaning));
      c->set_total(cs.total);
      c->set_delta(cs.window_delta);
    }
    cs.window_delta = 0;
  }
  if (ps.state_idx >= 0 || ps.rate_idx >= 0) {
    v1::LinkState* l = pw->mutable_link();
    auto level = [&](int idx) {
      return idx >= 0 && ps.counters[idx].have_prev ? ps.counters[idx].prev_raw : 0;
    };
    l->set_state(static_cast<uint32_t>(level(ps.state_idx)));
    l->set_phys_state(static_cast<uint32_t>(level(ps.phys_idx)));
    l->set_rate_bytes_per_second(level(ps.rate_idx));
    l->set_flaps_total(ps.link_flaps);
    l->set_rate_changes_total(ps.rate_changes);
  }
  return windows;
}

void Pipeline::ClosePortWindow(size_t pi, int64_t end_ns) {
  PortState& ps = state_[pi];
  const uint64_t rate = ports_[pi].line_rate_bytes_per_second;
  v1::PortWindow* pw = current_.add_ports();
  pw->set_port_index(static_cast<uint32_t>(pi));
  pw->set_line_rate_bytes_per_second(rate);
  pw->set_counter_resets(ps.window_resets);
  for (const auto& [group, n] : ps.window_resets_by_group) {
    (*pw->mutable_counter_resets_by_group())[group] = n;
  }
  pw->set_unavailable_reads(ps.window_unavailable);
  auto total = [&](int idx) { return idx < 0 ? uint64_t{0} : ps.counters[idx].total; };
  auto known = [&](int idx) { return idx >= 0 && ps.counters[idx].have_prev; };
  // Utilization needs a line rate and a byte counter: a port without one (irdma with
  // hw_counters only, iWARP with N/A counters and no netdev) is not an idle link.
  pw->set_utilization_valid(rate > 0 && (known(ps.tx_bytes) || known(ps.rx_bytes)));
  auto fill = [&](DirectionState& d, int bytes_idx, int packets_idx, v1::DirectionWindow* out) {
    const double mean =
        rate > 0 && d.window_covered_ns > 0
            ? static_cast<double>(d.window_bytes) /
                  (static_cast<double>(rate) * static_cast<double>(d.window_covered_ns) / 1e9)
            : 0.0;
    FillDirection(d.burst_durations, d.sample_util, d.window_bytes, d.window_packets,
                  total(bytes_idx), total(packets_idx), mean, d.window_peak, d.window_bursts,
                  d.bursts_total, d.window_samples, out);
    d.window_bytes = d.window_packets = 0;
    d.window_covered_ns = 0;
    d.window_peak = 0;
    d.window_bursts = 0;
    d.window_samples = 0;
  };
  if (rate > 0 && options_.series_bucket_ns > 0 && (ps.tx_bytes >= 0 || ps.rx_bytes >= 0)) {
    AddUtilizationSeries(pi, end_ns);
  }
  fill(ps.tx, ps.tx_bytes, ps.tx_packets, pw->mutable_transmit());
  fill(ps.rx, ps.rx_bytes, ps.rx_packets, pw->mutable_receive());
  pw->mutable_transmit()->set_has_bytes(known(ps.tx_bytes));
  pw->mutable_transmit()->set_has_packets(known(ps.tx_packets));
  pw->mutable_receive()->set_has_bytes(known(ps.rx_bytes));
  pw->mutable_receive()->set_has_packets(known(ps.rx_packets));
  const std::vector<CounterWindow> windows = FillCounters(pi, pw);
  // ps.rx.window_packets was reset by fill() above: use what went into the batch.
  ComputeDerived(windows, pw->receive().packets(),
                 static_cast<double>(end_ns - window_start_ns_) / 1e9,
                 XmitWaitTickSeconds(ports_[pi].lanes, rate), pw->mutable_derived());
  ps.window_resets = 0;
  ps.window_resets_by_group.clear();
  ps.window_unavailable = 0;
}

void Pipeline::CloseWindow(int64_t end_ns) {
  current_.set_window_start_ns(window_start_ns_);
  current_.set_window_end_ns(end_ns);
  AttachBurstsWithLoss(PortsWithLoss());
  if (std::vector<v1::RecordingRequest> asked = inbox_.Take(); !asked.empty()) {
    AnswerRecordingRequests(recorder_, asked, collectors::MeasureUnixOffsetNs(),
                            options_.requested_samples_max, &current_);
    requests_answered_ += asked.size();
  }
  for (size_t pi = 0; pi < state_.size(); ++pi) ClosePortWindow(pi, end_ns);
  v1::FlightRecorderStats* fr = current_.mutable_flight_recorder();
  fr->set_bytes(recorder_.bytes());
  fr->set_seconds(recorder_.seconds());
  fr->set_recordings_total(recordings_total_);
  fr->set_recordings_dropped_total(recordings_dropped_);
  fr->set_requests_answered_total(requests_answered_);
  fr->set_requests_dropped_total(inbox_.dropped());
  ready_.push_back(std::move(current_));
  current_ = v1::Batch();
  StartWindow(end_ns);
  window_end_ns_ = end_ns + options_.window_ns;
}

void Pipeline::AttachBurstsWithLoss(const std::vector<bool>& port_has_loss) {
  if (recorder_.capacity() == 0) return;
  // Per port, the bursts' intervals widened by the margin, merged where they overlap.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> spans(state_.size());
  for (const v1::Microburst& m : current_.microbursts()) {
    if (m.port_index() >= state_.size() || !port_has_loss[m.port_index()]) continue;
    spans[m.port_index()].emplace_back(m.start_ns() - options_.flight_margin_ns,
                                       m.start_ns() + m.duration_ns() + options_.flight_margin_ns);
  }
  size_t samples_left = options_.flight_samples_per_window;
  size_t recordings = 0;
  for (size_t pi = 0; pi < spans.size(); ++pi) {
    std::vector<std::pair<int64_t, int64_t>>& v = spans[pi];
    std::sort(v.begin(), v.end());
    std::vector<std::pair<int64_t, int64_t>> merged;
    for (const auto& s : v) {
      if (!merged.empty() && s.first <= merged.back().second) {
        merged.back().second = std::max(merged.back().second, s.second);
      } else {
        merged.push_back(s);
      }
    }
    for (const auto& [from, to] : merged) {
      if (recordings >= options_.flight_recordings_per_window || samples_left == 0) {
        ++recordings_dropped_;
        continue;
      }
      v1::FlightRecording* r = current_.add_flight_recordings();
      r->set_reason("burst_with_loss");
      samples_left -= recorder_.Fill(pi, from, to, samples_left, r);
      ++recordings;
      ++recordings_total_;
    }
  }
}

void Pipeline::Flush(int64_t end_ns) {
  if (window_end_ns_ == 0) return;  // never saw a tick
  for (size_t pi = 0; pi < state_.size(); ++pi) {
    if (auto e = state_[pi].tx.detector.Break()) {
      RecordBurst(pi, v1::DIRECTION_TRANSMIT, state_[pi].tx, *e);
    }
    if (auto e = state_[pi].rx.detector.Break()) {
      RecordBurst(pi, v1::DIRECTION_RECEIVE, state_[pi].rx, *e);
    }
  }
  CloseWindow(std::max(end_ns, window_start_ns_));
}

std::vector<v1::Batch> Pipeline::TakeReady() {
  std::vector<v1::Batch> out;
  out.swap(ready_);
  return out;
}

}  // namespace fabricscope::agent
