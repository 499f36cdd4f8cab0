// ClusterState::Collect: the /metrics snapshot of every node's ports, GPU and collective state,
// and the aggregator's own counters (split from cluster_state.cc, which ingests).
#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "exporters/cluster_state.h"
#include "exporters/metric_util.h"

namespace fabricscope::exporters {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

namespace {

// One series per reason of a bounded list, 0 for those never counted.
template <size_t N>
void AddByReason(prometheus::MetricFamily& family, const char* const (&reasons)[N],
                 const std::map<std::string, uint64_t>& counts) {
  for (const char* reason : reasons) {
    auto it = counts.find(reason);
    AddValue(family, {{"reason", reason}},
             static_cast<double>(it == counts.end() ? 0 : it->second));
  }
}

}  // namespace

std::vector<MetricFamily> ClusterState::Collect() const {
  auto tx_bytes = MakeFamily(Metric::kPortTransmitBytesTotal);
  auto rx_bytes = MakeFamily(Metric::kPortReceiveBytesTotal);
  auto tx_pkts = MakeFamily(Metric::kPortTransmitPacketsTotal);
  auto rx_pkts = MakeFamily(Metric::kPortReceivePacketsTotal);
  auto line_rate = MakeFamily(Metric::kPortLineRateBytesPerSecond);
  auto resets = MakeFamily(Metric::kPortCounterResetsTotal);
  auto xmit_wait = MakeFamily(Metric::kPortTransmitWaitSecondsTotal);
  auto xmit_wait_ratio = MakeFamily(Metric::kPortTransmitWaitRatio);
  auto counter_saturated = MakeFamily(Metric::kPortCounterSaturated);
  auto unavailable = MakeFamily(Metric::kPortUnavailableReadsTotal);
  auto util = MakeFamily(Metric::kPortUtilizationRatio);
  auto peak = MakeFamily(Metric::kPortPeakUtilizationRatio);
  auto sample_util = MakeFamily(Metric::kPortSampleUtilizationRatio);
  auto errors = MakeFamily(Metric::kPortErrorsTotal);
  auto saturated = MakeFamily(Metric::kPortErrorsSaturated);
  auto bursts = MakeFamily(Metric::kMicroburstsTotal);
  auto burst_dur = MakeFamily(Metric::kMicroburstDurationSeconds);
  auto hw = MakeFamily(Metric::kPortHwEventsTotal);
  auto eth = MakeFamily(Metric::kPortEthtoolStatTotal);
  auto tcp_events = MakeFamily(Metric::kTcpEventsTotal);
  auto loss = MakeFamily(Metric::kPortLossRatio);
  auto retrans = MakeFamily(Metric::kPortRetransmitsTotal);
  auto retrans_rate = MakeFamily(Metric::kPortRetransmitsPerSecond);
  auto oos = MakeFamily(Metric::kPortOutOfSequencePacketsTotal);
  auto cnp_sent = MakeFamily(Metric::kPortCnpSentTotal);
  auto cnp_handled = MakeFamily(Metric::kPortCnpHandledTotal);
  auto cnp_sent_rate = MakeFamily(Metric::kPortCnpSentPerSecond);
  auto cnp_handled_rate = MakeFamily(Metric::kPortCnpHandledPerSecond);
  auto ecn = MakeFamily(Metric::kPortEcnMarkedPacketsTotal);
  auto ecn_ratio = MakeFamily(Metric::kPortEcnMarkedRatio);
  auto pause = MakeFamily(Metric::kPortPauseSecondsTotal);
  auto pause_ratio = MakeFamily(Metric::kPortPauseTimeRatio);
  auto discards = MakeFamily(Metric::kPortDiscardsTotal);
  auto ber = MakeFamily(Metric::kPortBitErrorRatio);
  auto link_state = MakeFamily(Metric::kPortLinkState);
  auto phys_state = MakeFamily(Metric::kPortPhysicalState);
  auto cur_rate = MakeFamily(Metric::kPortCurrentRateBytesPerSecond);
  auto flaps = MakeFamily(Metric::kPortLinkFlapsTotal);
  auto rate_changes = MakeFamily(Metric::kPortRateChangesTotal);
  auto tcp_retrans = MakeFamily(Metric::kTcpRetransmittedSegmentsTotal);
  auto tcp_sent = MakeFamily(Metric::kTcpSentSegmentsTotal);
  auto tcp_ratio = MakeFamily(Metric::kTcpRetransmittedSegmentsRatio);
  auto flow_retrans = MakeFamily(Metric::kFlowRetransmitsTotal);
  auto flow_naks = MakeFamily(Metric::kFlowNaksTotal);
  auto flow_cnps = MakeFamily(Metric::kFlowCnpsTotal);
  auto flow_loss = MakeFamily(Metric::kFlowLostPacketsTotal);
  auto flow_ce = MakeFamily(Metric::kFlowEcnCePacketsTotal);
  auto cap_frames = MakeFamily(Metric::kCapturePacketsTotal);
  auto cap_drops = MakeFamily(Metric::kCaptureDroppedPacketsTotal);
  auto cap_bad = MakeFamily(Metric::kCaptureMalformedPacketsTotal);
  auto peer_bytes = MakeFamily(Metric::kPeerBytes);
  auto resolution = MakeFamily(Metric::kAgentGroupResolutionSeconds);
  auto interval = MakeFamily(Metric::kAgentSampleIntervalSeconds);
  auto overruns = MakeFamily(Metric::kAgentSamplerOverrunsTotal);
  auto ring_drops = MakeFamily(Metric::kAgentRingDroppedSamplesTotal);
  auto uplink_drops = MakeFamily(Metric::kAgentUplinkDroppedBatchesTotal);
  auto uplink_refused = MakeFamily(Metric::kAgentUplinkRefusedBatchesTotal);
  auto spool_bytes = MakeFamily(Metric::kAgentSpoolBytes);
  auto spool_batches = MakeFamily(Metric::kAgentSpoolBatches);
  auto spool_replayed = MakeFamily(Metric::kAgentSpoolReplayedBatchesTotal);
  auto spool_dropped = MakeFamily(Metric::kAgentSpoolDroppedBatchesTotal);
  auto read_cost = MakeFamily(Metric::kAgentReadCostSeconds);
  auto last_batch = MakeFamily(Metric::kAgentLastBatchTimestampSeconds);
  auto info = MakeFamily(Metric::kAgentInfo);

  absl::MutexLock lock(&mu_);
  for (const auto& [node, n] : nodes_) {
    AddValue(info,
             {{"node", node}, {"version", n.hello.agent_version()}, {"boot_id", n.hello.boot_id()}},
             1);
    if (n.last_batch_unix_ns != 0) {
      AddValue(last_batch, {{"node", node}}, static_cast<double>(n.last_batch_unix_ns) / 1e9);
    }
    if (n.agent.has_sample_interval_seconds()) {
      AddHistogram(interval, {{"node", node}}, n.agent.sample_interval_seconds());
    }
    if (n.agent.overruns_by_sampler().empty()) {
      AddValue(overruns, {{"node", node}, {"sampler", "fast"}},
               static_cast<double>(n.agent.overruns_total()));
    }
    for (const auto& [sampler, v] : n.agent.overruns_by_sampler()) {
      AddValue(overruns, {{"node", node}, {"sampler", sampler}}, static_cast<double>(v));
    }
    if (!n.capture.interface().empty()) {
      const v1::CaptureWindow& c = n.capture;
      const std::vector<ClientMetric::Label> cl = {{"node", node}, {"interface", c.interface()}};
      auto with = [&](const char* k, const std::string& v) {
        auto l = cl;
        l.push_back({k, v});
        return l;
      };
      AddValue(cap_frames, cl, static_cast<double>(c.frames_total()));
      AddValue(cap_drops, with("where", "kernel"), static_cast<double>(c.kernel_dropped_total()));
      AddValue(cap_drops, with("where", "interface"),
               static_cast<double>(c.interface_dropped_total()));
      AddValue(cap_bad, cl, static_cast<double>(c.malformed_total()));
      AddValue(flow_cnps, cl, static_cast<double>(c.cnps_total()));
      AddValue(flow_ce, cl, static_cast<double>(c.ecn_ce_packets_total()));
      for (const auto& [kind, v] : c.events_total()) {
        const double value = static_cast<double>(v);
        if (kind == "nak_sequence_error") {
          AddValue(flow_naks, with("kind", "sequence_error"), value);
        } else if (kind == "rnr_nak") {
          AddValue(flow_naks, with("kind", "rnr"), value);
        } else if (kind == "nak_other") {
          AddValue(flow_naks, with("kind", "other"), value);
        } else if (kind == "psn_gap" || kind == "out_of_order") {
          AddValue(flow_loss, with("kind", kind), value);
        } else {
          AddValue(flow_retrans, with("kind", kind), value);
        }
      }
      for (const v1::PeerBytes& pb : c.top_peers()) {
        auto l = cl;
        l.push_back({"src", pb.src()});
        l.push_back({"dst", pb.dst()});
        AddValue(peer_bytes, l, static_cast<double>(pb.bytes()));
      }
    }
    for (const v1::GroupResolution& r : n.agent.resolutions()) {
      AddValue(resolution, {{"node", node}, {"group", r.group()}},
               r.effective_resolution_seconds());
    }
    AddValue(ring_drops, {{"node", node}}, static_cast<double>(n.agent.ring_drops_total()));
    AddValue(uplink_drops, {{"node", node}},
             static_cast<double>(n.agent.uplink_dropped_batches_total()));
    AddValue(uplink_refused, {{"node", node}},
             static_cast<double>(n.agent.uplink_refused_batches_total()));
    if (n.agent.has_spool()) {
      AddValue(spool_bytes, {{"node", node}}, static_cast<double>(n.agent.spool_bytes()));
      AddValue(spool_batches, {{"node", node}}, static_cast<double>(n.agent.spool_batches()));
      AddValue(spool_replayed, {{"node", node}},
               static_cast<double>(n.agent.spool_replayed_batches_total()));
      for (const char* reason : {"full", "corrupt", "expired"}) {
        const auto it = n.agent.spool_dropped_batches_total().find(reason);
        AddValue(spool_dropped, {{"node", node}, {"reason", reason}},
                 it == n.agent.spool_dropped_batches_total().end()
                     ? 0.0
                     : static_cast<double>(it->second));
      }
    }
    // Read cost per port: the mean over its counter files (per-file figures stay in the batch).
    std::vector<std::pair<double, int>> port_cost(n.ports.size(), {0.0, 0});
    for (const v1::CounterReadCost& c : n.agent.read_costs()) {
      if (c.port_index() >= n.ports.size()) continue;
      port_cost[c.port_index()].first += c.mean_seconds();
      ++port_cost[c.port_index()].second;
    }
    for (size_t i = 0; i < n.ports.size(); ++i) {
      if (port_cost[i].second == 0) continue;
      const v1::PortInfo& pi = n.ports[i].info;
      AddValue(read_cost,
               {{"node", node}, {"device", pi.device()}, {"port", absl::StrCat(pi.port())}},
               port_cost[i].first / port_cost[i].second);
    }
    for (const PortSnapshot& ps : n.ports) {
      const std::string port = absl::StrCat(ps.info.port());
      auto labels = [&](std::vector<ClientMetric::Label> extra = {}) {
        std::vector<ClientMetric::Label> l = {
            {"node", node}, {"device", ps.info.device()}, {"port", port}};
        l.insert(l.end(), extra.begin(), extra.end());
        return l;
      };
      if (ps.info.line_rate_bytes_per_second() > 0) {
        AddValue(line_rate, labels(), static_cast<double>(ps.info.line_rate_bytes_per_second()));
      }
      if (ps.have) {
        for (const std::string& c : ps.last.saturated_counters()) {
          AddValue(counter_saturated, labels({{"counter", c}}), 1);
        }
        AddValue(unavailable, labels(), static_cast<double>(ps.unavailable_total));
        for (const auto& [kind, total] : ps.resets_total) {
          AddValue(resets, labels({{"kind", kind}}), static_cast<double>(total));
        }
      }
      if (!ps.have) continue;
      const v1::PortWindow& w = ps.last;
      const v1::DerivedSignals& d = w.derived();
      if (ps.info.node_level()) {  // TCP: node labels only
        for (const v1::CounterValue& c : w.counters()) {
          AddValue(tcp_events, {{"node", node}, {"counter", c.name()}},
                   static_cast<double>(c.total()));
        }
        if (d.has_tcp_retransmitted_segments_total()) {
          AddValue(tcp_retrans, {{"node", node}},
                   static_cast<double>(d.tcp_retransmitted_segments_total()));
          AddValue(tcp_sent, {{"node", node}}, static_cast<double>(d.tcp_sent_segments_total()));
          AddValue(tcp_ratio, {{"node", node}}, d.tcp_retransmitted_ratio());
        }
        continue;
      }
      for (const v1::CounterValue& c : w.counters()) {
        if (c.group() == "hw_counters") {
          AddValue(hw, labels({{"counter", c.name()}}), static_cast<double>(c.total()));
        } else if (c.group() == "ethtool") {
          AddValue(eth, labels({{"stat", c.name()}}), static_cast<double>(c.total()));
        }
      }
      if (d.has_loss_ratio()) AddValue(loss, labels(), d.loss_ratio());
      if (d.has_retransmits_total()) {
        AddValue(retrans, labels(), static_cast<double>(d.retransmits_total()));
        AddValue(retrans_rate, labels(), d.retransmits_per_second());
      }
      if (d.has_out_of_sequence_total()) {
        AddValue(oos, labels(), static_cast<double>(d.out_of_sequence_total()));
      }
      if (d.has_cnp_sent_total()) {
        AddValue(cnp_sent, labels(), static_cast<double>(d.cnp_sent_total()));
        AddValue(cnp_sent_rate, labels(), d.cnp_sent_per_second());
      }
      if (d.has_cnp_handled_total()) {
        AddValue(cnp_handled, labels(), static_cast<double>(d.cnp_handled_total()));
        AddValue(cnp_handled_rate, labels(), d.cnp_handled_per_second());
      }
      if (d.has_ecn_marked_total()) {
        AddValue(ecn, labels(), static_cast<double>(d.ecn_marked_total()));
        AddValue(ecn_ratio, labels(), d.ecn_marked_ratio());
      }
      for (const v1::PriorityPause& p : d.pause()) {
        auto l = labels({{"priority", absl::StrCat(p.priority())},
                         {"direction", DirectionName(p.direction())}});
        AddValue(pause, l, p.seconds_total());
        AddValue(pause_ratio, l, p.time_ratio());
      }
      for (const v1::Discard& x : d.discards()) {
        AddValue(discards, labels({{"reason", x.reason()}}), static_cast<double>(x.total()));
      }
      if (d.has_bit_error_ratio()) AddValue(ber, labels(), d.bit_error_ratio());
      if (d.has_transmit_wait_seconds_total()) {
        AddValue(xmit_wait, labels(), d.transmit_wait_seconds_total());
        AddValue(xmit_wait_ratio, labels(), d.transmit_wait_ratio());
      }
      if (w.has_link()) {
        AddValue(link_state, labels(), w.link().state());
        if (ps.info.rdma()) AddValue(phys_state, labels(), w.link().phys_state());
        if (w.link().rate_bytes_per_second() > 0) {
          AddValue(cur_rate, labels(), static_cast<double>(w.link().rate_bytes_per_second()));
        }
        AddValue(flaps, labels(), static_cast<double>(w.link().flaps_total()));
        AddValue(rate_changes, labels(), static_cast<double>(w.link().rate_changes_total()));
      }
      // A counter the port does not have (or could never read) is absent, not 0.
      if (w.transmit().has_bytes()) {
        AddValue(tx_bytes, labels(), static_cast<double>(w.transmit().bytes_total()));
      }
      if (w.receive().has_bytes()) {
        AddValue(rx_bytes, labels(), static_cast<double>(w.receive().bytes_total()));
      }
      if (w.transmit().has_packets()) {
        AddValue(tx_pkts, labels(), static_cast<double>(w.transmit().packets_total()));
      }
      if (w.receive().has_packets()) {
        AddValue(rx_pkts, labels(), static_cast<double>(w.receive().packets_total()));
      }
      for (const v1::ErrorCounter& e : w.errors()) {
        AddValue(errors, labels({{"kind", e.kind()}}), static_cast<double>(e.total()));
        if (e.saturated()) AddValue(saturated, labels({{"kind", e.kind()}}), 1);
      }
      const std::pair<const char*, const v1::DirectionWindow*> dirs[] = {
          {"transmit", &w.transmit()}, {"receive", &w.receive()}};
      for (const auto& [dname, d] : dirs) {
        if (w.utilization_valid()) {
          AddValue(util, labels({{"direction", dname}}), d->mean_utilization());
          AddValue(peak, labels({{"direction", dname}}), d->peak_utilization());
          AddHistogram(sample_util, labels({{"direction", dname}}), d->sample_utilization());
          AddValue(bursts, labels({{"direction", dname}}),
                   static_cast<double>(d->microbursts_total()));
          AddHistogram(burst_dur, labels({{"direction", dname}}), d->microburst_duration_seconds());
        }
      }
    }
  }

  auto self_batches = MakeFamily(Metric::kAggregatorBatchesTotal);
  AddValue(self_batches, {}, static_cast<double>(batches_total_));
  auto self_dups = MakeFamily(Metric::kAggregatorDuplicateBatchesTotal);
  AddValue(self_dups, {}, static_cast<double>(duplicate_batches_total_));
  auto self_lost = MakeFamily(Metric::kAggregatorLostBatchesTotal);
  AddValue(self_lost, {}, static_cast<double>(lost_batches_total_));
  auto self_expired = MakeFamily(Metric::kAggregatorExpiredNodesTotal);
  AddValue(self_expired, {}, static_cast<double>(expired_nodes_total_));
  auto self_rej = MakeFamily(Metric::kAggregatorRejectedBatchesTotal);
  AddByReason(self_rej, kRejectedBatchReasons, rejected_batches_);
  auto self_gaps = MakeFamily(Metric::kAggregatorWindowGapsTotal);
  AddValue(self_gaps, {}, static_cast<double>(window_gaps_total_));
  auto self_refused = MakeFamily(Metric::kAggregatorRefusedStreamsTotal);
  AddByReason(self_refused, kRefusedStreamReasons, refused_streams_);
  auto self_throttled = MakeFamily(Metric::kAggregatorThrottledBatchesTotal);
  AddValue(self_throttled, {}, static_cast<double>(throttled_batches_total_.load()));
  auto self_nodes = MakeFamily(Metric::kAggregatorNodes);
  AddValue(self_nodes, {}, static_cast<double>(nodes_.size()));

  std::vector<MetricFamily> out;
  for (MetricFamily* f : {&tx_bytes,
                          &rx_bytes,
                          &tx_pkts,
                          &rx_pkts,
                          &line_rate,
                          &resets,
                          &unavailable,
                          &counter_saturated,
                          &xmit_wait,
                          &xmit_wait_ratio,
                          &util,
                          &peak,
                          &sample_util,
                          &errors,
                          &saturated,
                          &bursts,
                          &burst_dur,
                          &hw,
                          &eth,
                          &tcp_events,
                          &loss,
                          &retrans,
                          &retrans_rate,
                          &oos,
                          &cnp_sent,
                          &cnp_handled,
                          &cnp_sent_rate,
                          &cnp_handled_rate,
                          &ecn,
                          &ecn_ratio,
                          &pause,
                          &pause_ratio,
                          &discards,
                          &ber,
                          &link_state,
                          &phys_state,
                          &cur_rate,
                          &flaps,
                          &rate_changes,
                          &tcp_retrans,
                          &tcp_sent,
                          &tcp_ratio,
                          &flow_retrans,
                          &flow_naks,
                          &flow_cnps,
                          &flow_loss,
                          &flow_ce,
                          &cap_frames,
                          &cap_drops,
                          &cap_bad,
                          &peer_bytes,
                          &resolution,
                          &interval,
                          &overruns,
                          &ring_drops,
                          &uplink_drops,
                          &uplink_refused,
                          &spool_bytes,
                          &spool_batches,
                          &spool_replayed,
                          &spool_dropped,
                          &read_cost,
                          &last_batch,
                          &info,
                          &self_batches,
                          &self_dups,
                          &self_lost,
                          &self_expired,
                          &self_rej,
                          &self_gaps,
                          &self_refused,
                          &self_throttled,
                          &self_nodes}) {
    if (!f->metric.empty()) out.push_back(std::move(*f));
  }
  links_.Collect(&out);
  cross_rank_.Collect(&out);
  gpu_.Collect(&out);
  // fabricscope_traffic_imbalance_ratio comes in two parts (links_: rails, gpu_: ranks).
  MergeFamiliesByName(&out);
  return out;
}

}  // namespace fabricscope::exporters
