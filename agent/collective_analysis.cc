#include "agent/collective_analysis.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "agent/derived.h"
#include "collectors/common/collective_vocabulary.h"
#include "collectors/pcap/flow.h"

namespace fabricscope::agent {

using collectors::CounterRole;
using collectors::PortDescriptor;

bool MatchesRail(const PortDescriptor& p, const std::string& name) {
  return p.device == name || p.Key() == name || (!p.netdev.empty() && p.netdev == name);
}

namespace {

// A capture event kind that means a lost packet (the names are collectors/pcap/flow.h's):
// not spurious retransmissions, RNR NAKs, other NAKs or reordering.
bool IsCapturedLoss(const std::string& kind) {
  using collectors::pcap::LossKind;
  for (LossKind k : {LossKind::kRocePsnGap, LossKind::kRoceRetransmission,
                     LossKind::kRoceAckTimeout, LossKind::kRoceNakSequence,
                     LossKind::kTcpRetransmission, LossKind::kTcpFastRetransmission}) {
    if (kind == collectors::pcap::LossKindName(k)) return true;
  }
  return false;
}

// PortActivity.transmit_busy_utilization: the upper median of the utilizations >= peak / 4
// (*u is reordered); 0 when there are none.
double BusyMedian(std::vector<double>* u, double peak) {
  if (peak <= 0) return 0;
  const auto busy_end =
      std::partition(u->begin(), u->end(), [peak](double x) { return x >= peak / 4; });
  const auto n = busy_end - u->begin();
  if (n == 0) return 0;
  const auto mid = u->begin() + n / 2;
  std::nth_element(u->begin(), mid, busy_end);
  return *mid;
}

}  // namespace

CollectiveAnalyzer::Signal CollectiveAnalyzer::SignalOf(collectors::Meaning m,
                                                        bool port_has_discards_phy) {
  using collectors::Meaning;
  if (m == Meaning::kRetransmit || m == Meaning::kTcpRetransmit) return Signal::kRetransmit;
  if (collectors::IsLossBreakdown(m, port_has_discards_phy)) return Signal::kNone;
  if (collectors::IsLoss(m)) return Signal::kLoss;
  if (collectors::IsCongestionFeedback(m)) return Signal::kCnp;
  if (m == Meaning::kPauseMicroseconds) return Signal::kPause;
  if (m == Meaning::kTransmitWait) return Signal::kXmitWait;
  return Signal::kNone;
}

CollectiveAnalyzer::CollectiveAnalyzer(const std::vector<PortDescriptor>& ports,
                                       const FlightRecorder& recorder,
                                       CollectiveAnalysisOptions options)
    : ports_(ports), recorder_(recorder), options_(std::move(options)) {
  bool any_rdma = false;
  for (const PortDescriptor& p : ports_) any_rdma = any_rdma || p.rdma;
  signals_.resize(ports_.size());
  netdev_.resize(ports_.size());
  for (uint32_t i = 0; i < ports_.size(); ++i) {
    const PortDescriptor& p = ports_[i];
    netdev_[i] = !p.rdma && !p.node_level;
    bool candidate;
    if (!options_.rails.empty()) {
      candidate = std::any_of(options_.rails.begin(), options_.rails.end(),
                              [&](const std::string& n) { return MatchesRail(p, n); });
    } else {
      candidate = !p.node_level && (any_rdma ? p.rdma : true);
    }
    if (candidate) candidates_.push_back(i);
    const bool has_phy = std::any_of(p.counters.begin(), p.counters.end(), [](const auto& cd) {
      return cd.name == collectors::kPortDiscardsCounter;
    });
    for (const collectors::CounterDescriptor& cd : p.counters) {
      Signal s = Signal::kNone;
      if (cd.role == CounterRole::kError) {
        s = Signal::kLoss;
      } else if (cd.role == CounterRole::kOther) {
        s = SignalOf(cd.meaning, has_phy);
      }
      signals_[i].push_back(s);
    }
  }
}

void CollectiveAnalyzer::OnCounterDelta(uint32_t port, uint32_t counter, int64_t from_ns,
                                        int64_t to_ns, uint64_t delta) {
  if (port >= signals_.size() || counter >= signals_[port].size()) return;
  const Signal s = signals_[port][counter];
  if (s == Signal::kNone || delta == 0) return;
  events_.push_back(CounterEvent{port, s, from_ns, to_ns, delta});
  while (events_.size() > options_.history_events) events_.pop_front();
}

void CollectiveAnalyzer::OnMicroburst(uint32_t port, int64_t start_ns, int64_t end_ns) {
  bursts_.push_back(Burst{port, start_ns, end_ns});
  while (bursts_.size() > options_.history_events) bursts_.pop_front();
}

void CollectiveAnalyzer::OnLineRate(uint32_t port, int64_t /*t_ns*/, uint64_t bytes_per_second) {
  if (port < ports_.size() && bytes_per_second > 0) {
    ports_[port].line_rate_bytes_per_second = bytes_per_second;
  }
}

size_t CollectiveAnalyzer::AddCaptureLoss(const v1::CaptureWindow& window, int64_t unix_offset_ns) {
  return AddCaptureLoss(
      window.interface(),
      std::vector<v1::PacketLossEvent>(window.loss_events().begin(), window.loss_events().end()),
      unix_offset_ns);
}

size_t CollectiveAnalyzer::AddCaptureLoss(const std::string& interface,
                                          const std::vector<v1::PacketLossEvent>& events,
                                          int64_t unix_offset_ns) {
  std::vector<uint32_t> ports;
  for (uint32_t pi : candidates_) {
    if (!interface.empty() && MatchesRail(ports_[pi], interface)) ports.push_back(pi);
  }
  if (ports.empty()) return 0;
  size_t kept = 0;
  for (const v1::PacketLossEvent& e : events) {
    if (!IsCapturedLoss(e.kind())) continue;
    for (uint32_t pi : ports)
      captured_.push_back(CapturedLoss{pi, e.time_unix_ns() - unix_offset_ns});
    ++kept;
  }
  while (captured_.size() > options_.history_events) captured_.pop_front();
  return kept;
}

void AnalyzerOutput::MoveInto(v1::Batch* batch) {
  for (v1::Collective& c : collectives) *batch->add_collectives() = std::move(c);
  for (v1::FlightRecording& r : recordings) *batch->add_flight_recordings() = std::move(r);
  if (stats) *batch->mutable_collective_analysis() = std::move(*stats);
  collectives.clear();
  recordings.clear();
  stats.reset();
}

void AnalyzerOutput::Append(AnalyzerOutput&& other) {
  for (v1::Collective& c : other.collectives) collectives.push_back(std::move(c));
  for (v1::FlightRecording& r : other.recordings) recordings.push_back(std::move(r));
  if (!stats && other.stats) stats = std::move(other.stats);
  other.collectives.clear();
  other.recordings.clear();
  other.stats.reset();
}

void CollectiveAnalyzer::AddCollective(v1::Collective c, v1::Batch* batch) {
  AnalyzerOutput out;
  AddCollective(std::move(c), &out);
  out.MoveInto(batch);
}

void CollectiveAnalyzer::Process(int64_t data_until_ns, v1::Batch* batch, bool close_window) {
  AnalyzerOutput out;
  Process(data_until_ns, batch->window_start_ns(), batch->window_end_ns(), &out, close_window);
  out.MoveInto(batch);
}

size_t CollectiveAnalyzer::Release(v1::Batch* batch) {
  AnalyzerOutput out;
  const size_t n = Release(&out);
  out.MoveInto(batch);
  return n;
}

void CollectiveAnalyzer::AddCollective(v1::Collective c, AnalyzerOutput* out) {
  // Without a completion signal (enqueue_only, copy_engine) the interval is host enqueue work of
  // microseconds, not the collective: joining port samples over it would be noise.
  const bool timed = c.start_ns() > 0 && c.end_ns() >= c.start_ns() &&
                     (c.timing_source() == v1::TIMING_SOURCE_KERNEL_CHANNEL ||
                      c.timing_source() == v1::TIMING_SOURCE_PROXY_OP);
  if (timed && pending_.size() >= options_.max_pending) ++dropped_;
  if (!timed || pending_.size() >= options_.max_pending) {
    out->collectives.push_back(std::move(c));
    return;
  }
  transfers_.Remember(c, ScopeOf(RankPorts(c)).mask);
  pending_.push_back(Pending{std::move(c), last_data_ns_});
}

size_t CollectiveAnalyzer::Release(AnalyzerOutput* out) {
  const size_t n = pending_.size();
  for (Pending& p : pending_) out->collectives.push_back(std::move(p.c));
  pending_.clear();
  return n;
}

std::vector<uint32_t> CollectiveAnalyzer::RankPorts(const v1::Collective& c) const {
  std::vector<uint32_t> out;
  if (process_ports_ == nullptr) return out;
  const auto it = process_ports_->find(c.pid());
  if (it == process_ports_->end()) return out;
  for (uint32_t pi : it->second) {
    // The ledger's port sets are 64-bit masks: a port past them leaves the rank node-wide.
    if (pi >= 64) return {};
    if (std::find(candidates_.begin(), candidates_.end(), pi) != candidates_.end()) {
      out.push_back(pi);
    }
  }
  return out;
}

TransferLedger::Scope CollectiveAnalyzer::ScopeOf(const std::vector<uint32_t>& ports) const {
  TransferLedger::Scope scope;
  for (uint32_t pi : ports) {
    if (pi >= 64) return TransferLedger::Scope{};  // beyond the mask: node-wide
    scope.mask |= uint64_t{1} << pi;
  }
  if (scope.mask != 0 && !candidates_.empty()) {
    scope.unknown_share =
        static_cast<double>(ports.size()) / static_cast<double>(candidates_.size());
  }
  return scope;
}

TransferLedger::Scope CollectiveAnalyzer::ScopeOf(const v1::CollectiveAnalysis& a) const {
  std::vector<uint32_t> own;
  if (a.ports_from_qps()) {
    for (const v1::PortActivity& pa : a.ports()) own.push_back(pa.port_index());
  }
  return ScopeOf(own);
}

v1::CollectiveAnalysis CollectiveAnalyzer::Analyze(const v1::Collective& c) const {
  v1::CollectiveAnalysis a;
  a.set_port_index(-1);
  const int64_t t0 = c.start_ns(), t1 = c.end_ns();
  std::vector<FlightSample> samples;
  std::vector<double> tx_utils;  // each judged sample's transmit utilization
  const std::vector<uint32_t> own = RankPorts(c);
  a.set_ports_from_qps(!own.empty());
  for (uint32_t pi : own.empty() ? candidates_ : own) {
    v1::PortActivity* pa = a.add_ports();
    pa->set_port_index(pi);
    const uint64_t rate = ports_[pi].line_rate_bytes_per_second;
    samples.clear();
    // Sample i covers (t - interval, t]: the ones overlapping [t0, t1] end in (t0, t1 + one
    // interval]; 1 s is more than any sample interval the pipeline accepts.
    recorder_.Extract(pi, t0 + 1, t1 + 1'000'000'000, SIZE_MAX, &samples);
    double tx = 0, rx = 0, covered = 0, saturated = 0, peak_tx = 0, peak_rx = 0;
    tx_utils.clear();
    uint32_t n = 0;
    // A short sample (< half the period) is judged together with the next one.
    uint64_t carry_tx = 0, carry_rx = 0;
    int64_t carry_ns = 0;
    for (const FlightSample& s : samples) {
      const int64_t from = s.t_ns - s.interval_ns;
      if (from >= t1 || s.interval_ns <= 0) continue;
      const double overlap = static_cast<double>(std::min(s.t_ns, t1) - std::max(from, t0)) /
                             static_cast<double>(s.interval_ns);
      if (overlap <= 0) continue;
      ++n;
      tx += overlap * static_cast<double>(s.tx_bytes);
      rx += overlap * static_cast<double>(s.rx_bytes);
      const double ns = overlap * static_cast<double>(s.interval_ns);
      covered += ns;
      if (rate == 0) continue;
      if (carry_ns + s.interval_ns < options_.sample_period_ns / 2) {
        carry_tx += s.tx_bytes;
        carry_rx += s.rx_bytes;
        carry_ns += s.interval_ns;
        continue;
      }
      const double capacity =
          static_cast<double>(rate) * static_cast<double>(s.interval_ns + carry_ns) / 1e9;
      const double u_tx = static_cast<double>(s.tx_bytes + carry_tx) / capacity;
      const double u_rx = static_cast<double>(s.rx_bytes + carry_rx) / capacity;
      const double judged_ns = ns + static_cast<double>(carry_ns) * overlap;
      carry_tx = carry_rx = 0;
      carry_ns = 0;
      peak_tx = std::max(peak_tx, u_tx);
      tx_utils.push_back(u_tx);
      peak_rx = std::max(peak_rx, u_rx);
      if (std::max(u_tx, u_rx) >= options_.saturation_utilization) saturated += judged_ns;
    }
    saturated = std::min(saturated, covered);
    pa->set_samples(n);
    pa->set_transmit_bytes(static_cast<uint64_t>(std::llround(tx)));
    pa->set_receive_bytes(static_cast<uint64_t>(std::llround(rx)));
    pa->set_line_rate_bytes_per_second(rate);
    if (rate > 0 && covered > 0) {
      pa->set_mean_utilization(std::max(tx, rx) / (static_cast<double>(rate) * covered / 1e9));
      pa->set_peak_utilization(std::max(peak_tx, peak_rx));
      pa->set_transmit_peak_utilization(peak_tx);
      pa->set_transmit_busy_utilization(BusyMedian(&tx_utils, peak_tx));
      pa->set_receive_peak_utilization(peak_rx);
      pa->set_saturated_ratio(saturated / covered);
    }
    uint32_t bursts = 0;
    int64_t burst_ns = 0;
    for (const Burst& b : bursts_) {
      if (b.port != pi || b.end_ns <= t0 || b.start_ns >= t1) continue;
      ++bursts;
      burst_ns += std::min(b.end_ns, t1) - std::max(b.start_ns, t0);
    }
    pa->set_microbursts(bursts);
    pa->set_microburst_seconds(static_cast<double>(burst_ns) / 1e9);
    uint64_t loss = 0, retx = 0, cnp = 0, wait_ticks = 0;
    double pause_us = 0;
    for (const CounterEvent& e : events_) {
      const bool mine = e.port == pi || (netdev_[pi] && ports_[e.port].node_level &&
                                         e.signal == Signal::kRetransmit);
      if (!mine || e.to_ns <= t0 || e.from_ns >= t1) continue;
      switch (e.signal) {
        case Signal::kLoss:
          loss += e.delta;
          break;
        case Signal::kRetransmit:
          retx += e.delta;
          break;
        case Signal::kCnp:
          cnp += e.delta;
          break;
        case Signal::kPause:
          pause_us += static_cast<double>(e.delta);
          break;
        case Signal::kXmitWait:
          wait_ticks += e.delta;
          break;
        case Signal::kNone:
          break;
      }
    }
    uint64_t captured = 0;
    for (const CapturedLoss& e : captured_) {
      if (e.port == pi && e.t_ns >= t0 && e.t_ns <= t1) ++captured;
    }
    pa->set_captured_loss_events(captured);
    pa->set_loss_events(loss);
    pa->set_retransmits(retx);
    pa->set_cnps(cnp);
    pa->set_pause_seconds(pause_us / 1e6);
    pa->set_transmit_wait_seconds(static_cast<double>(wait_ticks) *
                                  XmitWaitTickSeconds(ports_[pi].lanes, rate));
  }
  Classify(&a, t1 - t0);
  return a;
}

void CollectiveAnalyzer::Classify(v1::CollectiveAnalysis* a, int64_t duration_ns) const {
  const double duration_s = static_cast<double>(duration_ns) / 1e9;
  int lossy = -1, saturated = -1, busiest = -1;
  uint64_t worst_loss = 0;
  double worst_pause = 0, worst_sat = 0, best_util = -1;
  uint32_t total_samples = 0;
  for (int i = 0; i < a->ports_size(); ++i) {
    const v1::PortActivity& p = a->ports(i);
    total_samples += p.samples();
    const uint64_t events = LossEvents(p);
    const double packets =
        static_cast<double>(p.transmit_bytes() + p.receive_bytes()) / 1500.0;  // estimate
    const bool pause = duration_s > 0 &&
                       p.pause_seconds() >= options_.lossy_min_pause_ratio * duration_s &&
                       p.pause_seconds() > 0;
    const bool many = events > 0 && events >= options_.lossy_min_events &&
                      static_cast<double>(events) >= options_.lossy_min_ratio * packets;
    if (many || pause) {
      if (lossy < 0 || events > worst_loss ||
          (events == worst_loss && p.pause_seconds() > worst_pause)) {
        lossy = i;
        worst_loss = events;
        worst_pause = p.pause_seconds();
      }
    }
    // Saturated samples, microbursts, or time waiting for credits with data to send: the fabric
    // behind the port could not take the traffic (an InfiniBand link shows no ECN or CNP).
    const double sat = common::SaturatedShare(p, duration_s);
    if (sat >= options_.saturated_min_ratio && sat > worst_sat) {
      saturated = i;
      worst_sat = sat;
    }
    if (p.samples() > 0 && p.mean_utilization() > best_util) {
      busiest = i;
      best_util = p.mean_utilization();
    }
  }
  auto port_name = [&](int i) { return PortLabel(ports_[a->ports(i).port_index()]); };
  if (lossy >= 0) {
    const v1::PortActivity& p = a->ports(lossy);
    a->set_cause(v1::COLLECTIVE_CAUSE_NETWORK_LOSSY);
    a->set_port_index(static_cast<int32_t>(p.port_index()));
    std::string captured;
    if (p.captured_loss_events() > 0) {
      captured = absl::StrFormat(", %d loss events in the capture", p.captured_loss_events());
    }
    std::string paused = absl::StrFormat("%.3g s paused during it", p.pause_seconds());
    if (p.pause_seconds() > 0 && duration_s > 0) {
      paused +=
          absl::StrFormat(" (PFC, %.0f%% of its duration)", 100 * p.pause_seconds() / duration_s);
    }
    a->set_detail(absl::StrFormat("%s: %d lost, %d retransmitted%s, %s", port_name(lossy),
                                  p.loss_events(), p.retransmits(), captured, paused));
  } else if (saturated >= 0) {
    const v1::PortActivity& p = a->ports(saturated);
    a->set_cause(v1::COLLECTIVE_CAUSE_NETWORK_SATURATED);
    a->set_port_index(static_cast<int32_t>(p.port_index()));
    std::string waited;
    if (p.transmit_wait_seconds() > 0 && duration_s > 0) {
      waited = absl::StrFormat(", waited for credits %.0f%% of it (port_xmit_wait)",
                               100 * p.transmit_wait_seconds() / duration_s);
    }
    a->set_detail(absl::StrFormat(
        "%s: saturated %.0f%% of the time, %d microbursts (%.3g s), peak %.2f of line rate%s",
        port_name(saturated), 100 * p.saturated_ratio(), p.microbursts(), p.microburst_seconds(),
        p.peak_utilization(), waited));
  } else if (total_samples == 0 || busiest < 0) {
    a->set_cause(v1::COLLECTIVE_CAUSE_UNKNOWN);
    a->set_detail("no port samples cover it");
  } else if (duration_ns >= options_.waiting_min_ns && best_util < options_.idle_max_utilization) {
    a->set_cause(v1::COLLECTIVE_CAUSE_WAITING_ON_PEERS);
    a->set_port_index(static_cast<int32_t>(a->ports(busiest).port_index()));
    a->set_detail(absl::StrFormat("busiest port %s at %.2f of line rate: waiting on peers",
                                  port_name(busiest), best_util));
  } else {
    a->set_cause(v1::COLLECTIVE_CAUSE_NORMAL);
    a->set_port_index(static_cast<int32_t>(a->ports(busiest).port_index()));
    a->set_detail(
        absl::StrFormat("busiest port %s at %.2f of line rate", port_name(busiest), best_util));
  }
}

double CollectiveAnalyzer::NetworkShare(int64_t window_start_ns, int64_t window_end_ns,
                                        bool* marker, double* seconds) const {
  int64_t from = window_start_ns, to = window_end_ns;
  *marker = false;
  if (!options_.step_marker.empty() && marker_starts_.size() >= 2) {
    from = marker_starts_.front();
    to = marker_starts_.back();
    *marker = true;
  }
  if (to <= from) {
    *seconds = 0;
    return 0;
  }
  std::vector<std::pair<int64_t, int64_t>> v;
  for (const auto& [s, e] : intervals_) {
    const int64_t a = std::max(s, from), b = std::min(e, to);
    if (b > a) v.emplace_back(a, b);
  }
  std::sort(v.begin(), v.end());
  int64_t covered = 0, cur_s = 0, cur_e = INT64_MIN;
  for (const auto& [s, e] : v) {
    if (s > cur_e) {
      if (cur_e > cur_s) covered += cur_e - cur_s;
      cur_s = s;
      cur_e = e;
    } else {
      cur_e = std::max(cur_e, e);
    }
  }
  if (cur_e > cur_s) covered += cur_e - cur_s;
  *seconds = static_cast<double>(to - from) / 1e9;
  return static_cast<double>(covered) / static_cast<double>(to - from);
}

void CollectiveAnalyzer::Process(int64_t data_until_ns, int64_t window_start_ns,
                                 int64_t window_end_ns, AnalyzerOutput* out, bool close_window) {
  last_data_ns_ = std::max(last_data_ns_, data_until_ns);
  for (Pending& p : pending_) {
    if (p.queued_data_ns == 0) p.queued_data_ns = data_until_ns;
  }
  while (!pending_.empty()) {
    const Pending& p = pending_.front();
    // Its samples are in, and so are the transfers of the node's other communicators that
    // overlap it (TransferLedger::Settled), or it waited for them long enough.
    const bool in =
        p.c.end_ns() + options_.delay_ns <= data_until_ns &&
        (transfers_.Settled(p.c) || data_until_ns - p.c.end_ns() > TransferLedger::kSettleWaitNs);
    const bool waited = data_until_ns - p.queued_data_ns > options_.max_wait_ns;
    if (!in && !waited) break;  // later ones completed later (arrival order), wait for them too
    v1::Collective c = std::move(pending_.front().c);
    pending_.pop_front();
    v1::CollectiveAnalysis a = Analyze(c);
    const TransferLedger::Scope scope = ScopeOf(a);
    a.set_own_bytes(transfers_.OwnBytes(c, scope));
    transfers_.AddSharers(c, &a, scope);
    const int64_t duration_ns = c.end_ns() - c.start_ns();
    const Kind kind{c.comm_hash(), c.func(), common::CollectiveSizeClass(c.bytes())};
    auto it = kinds_.find(kind);
    if (it == kinds_.end() && kinds_.size() < options_.max_kinds) {
      it = kinds_.emplace(kind, KindStats{}).first;
    }
    if (it != kinds_.end()) {
      KindStats& k = it->second;
      if (k.p99.count() >= options_.min_history) {
        a.set_p99_seconds(k.p99.Value() / 1e9);
        a.set_slow(static_cast<double>(duration_ns) > k.p99.Value());
      }
      UpdateLossRates(a);
      // The rate rule first: a persistently lossy port is the stronger evidence.
      if (!RateLossy(&a) && !TailLossy(k, duration_ns, &a)) {
        // Clean: no loss event, no saturation, and no other flow's bytes on its ports; a
        // fault that lasts must not become the baseline it is judged against.
        const bool shared = Contended(k, c, &a) >= options_.contention_ratio;
        bool any_loss = false;
        for (const v1::PortActivity& pa : a.ports()) {
          any_loss = any_loss || LossEvents(pa) > 0;
        }
        if (!any_loss && !shared && a.cause() != v1::COLLECTIVE_CAUSE_NETWORK_SATURATED) {
          k.clean_median.Add(static_cast<double>(duration_ns));
        }
      }
      k.p99.Add(static_cast<double>(duration_ns));
    }
    if (a.slow()) {
      ++slow_;
      const int64_t from = c.start_ns() - options_.recording_margin_ns;
      const int64_t to = c.end_ns() + options_.recording_margin_ns;
      std::vector<uint32_t> ports;
      if (a.port_index() >= 0) {
        ports.push_back(static_cast<uint32_t>(a.port_index()));
      } else {
        ports = candidates_;
      }
      for (uint32_t pi : ports) {
        if (recorder_.capacity() == 0) break;
        if (window_recordings_ >= options_.recordings_per_window ||
            window_samples_ >= options_.samples_per_window) {
          ++recordings_dropped_;
          continue;
        }
        v1::FlightRecording* r = &out->recordings.emplace_back();
        window_samples_ +=
            recorder_.Fill(pi, from, to, options_.samples_per_window - window_samples_, r);
        r->set_reason("slow_collective");
        ++window_recordings_;
      }
    }
    ++analyzed_;
    ++by_cause_[common::CollectiveCauseName(a.cause())];
    intervals_.emplace_back(c.start_ns(), c.end_ns());
    if (!options_.step_marker.empty() && c.func() == options_.step_marker) {
      if (!have_marker_comm_) {
        have_marker_comm_ = true;
        marker_comm_ = c.comm_hash();
      }
      if (c.comm_hash() == marker_comm_ &&
          (marker_starts_.empty() || c.start_ns() > marker_starts_.back())) {
        marker_starts_.push_back(c.start_ns());
      }
    }
    *c.mutable_analysis() = std::move(a);
    out->collectives.push_back(std::move(c));
  }
  // Keep ~10 s of intervals and iteration starts, and the events and bursts the pending
  // collectives may still need.
  const int64_t keep_from = data_until_ns - 10'000'000'000;
  while (!intervals_.empty() && intervals_.front().second < keep_from) intervals_.pop_front();
  while (marker_starts_.size() > 2 && marker_starts_[1] < keep_from) marker_starts_.pop_front();
  int64_t oldest = data_until_ns - options_.max_wait_ns - 1'000'000'000;
  if (!pending_.empty()) oldest = std::min(oldest, pending_.front().c.start_ns());
  while (!events_.empty() && events_.front().to_ns < oldest) events_.pop_front();
  while (!bursts_.empty() && bursts_.front().end_ns < oldest) bursts_.pop_front();
  while (!captured_.empty() && captured_.front().t_ns < oldest) captured_.pop_front();
  if (!close_window) return;
  window_recordings_ = 0;
  window_samples_ = 0;

  v1::CollectiveAnalysisStats* s = &out->stats.emplace();
  bool marker = false;
  double seconds = 0;
  const int64_t len = window_end_ns - window_start_ns;
  const double share = NetworkShare(window_start_ns - len, window_start_ns, &marker, &seconds);
  s->set_network_share_ratio(share);
  s->set_step_marker(marker);
  s->set_share_seconds(seconds);
  for (const auto& [cause, n] : by_cause_) (*s->mutable_by_cause_total())[cause] = n;
  s->set_analyzed_total(analyzed_);
  s->set_slow_total(slow_);
  s->set_pending(pending_.size());
  s->set_dropped_total(dropped_);
  s->set_recordings_dropped_total(recordings_dropped_);
}

}  // namespace fabricscope::agent
