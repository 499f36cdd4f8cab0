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
  auto tx_bytes = MakeFamily("fabricscope_port_transmit_bytes_total",
                             "Bytes transmitted by the port (hardware counter, 4-octet words x 4 "
                             "for RDMA ports).",
                             MetricType::Counter);
  auto rx_bytes = MakeFamily("fabricscope_port_receive_bytes_total",
                             "Bytes received by the port (hardware counter).", MetricType::Counter);
  auto tx_pkts = MakeFamily("fabricscope_port_transmit_packets_total",
                            "Packets transmitted by the port.", MetricType::Counter);
  auto rx_pkts = MakeFamily("fabricscope_port_receive_packets_total",
                            "Packets received by the port.", MetricType::Counter);
  auto line_rate =
      MakeFamily("fabricscope_port_line_rate_bytes_per_second",
                 "Line rate of the port (sysfs rate/speed, or configured).", MetricType::Gauge);
  auto resets = MakeFamily(
      "fabricscope_port_counter_resets_total",
      "Counter reads that went backwards without a plausible wrap (device reset, re-plug, "
      "counters cleared), by the group of the counter (kind: counters, hw_counters, statistics, "
      "ethtool, pma, tcp); totals continue across them. Only kinds that reset appear.",
      MetricType::Counter);
  auto xmit_wait = MakeFamily(
      "fabricscope_port_transmit_wait_seconds_total",
      "Time the port had data to send and sent none, waiting for credits (PortXmitWait ticks x "
      "one symbol time = lanes / line rate; agent/derived.h XmitWaitTickSeconds).",
      MetricType::Counter);
  auto xmit_wait_ratio = MakeFamily(
      "fabricscope_port_transmit_wait_ratio",
      "Share of the last window the port waited to transmit (PortXmitWait): congestion behind "
      "the link.",
      MetricType::Gauge);
  auto counter_saturated = MakeFamily(
      "fabricscope_port_counter_saturated",
      "1 for a byte or packet counter stuck at its maximum (a 32-bit PortCounters value at "
      "2^32 - 1): the port's bytes or packets stop counting and its utilization reads low.",
      MetricType::Gauge);
  auto unavailable = MakeFamily(
      "fabricscope_port_unavailable_reads_total",
      "Counter reads of the port that failed or said N/A (the previous good value is kept and "
      "the next delta spans the gap).",
      MetricType::Counter);
  auto util = MakeFamily("fabricscope_port_utilization_ratio",
                         "Mean utilization of line rate over the last window.", MetricType::Gauge);
  auto peak = MakeFamily("fabricscope_port_peak_utilization_ratio",
                         "Highest single-sample (sub-ms) utilization in the last window.",
                         MetricType::Gauge);
  auto sample_util = MakeFamily(
      "fabricscope_port_sample_utilization_ratio",
      "Distribution of per-sample (sub-ms) utilization since agent start.", MetricType::Histogram);
  auto errors =
      MakeFamily("fabricscope_port_errors_total",
                 "Port error counters by kind (the sysfs counter name).", MetricType::Counter);
  auto saturated = MakeFamily("fabricscope_port_errors_saturated",
                              "1 while an error counter is stuck at its maximum and no longer "
                              "counts (IB PMA counters saturate); absent otherwise.",
                              MetricType::Gauge);
  auto bursts = MakeFamily("fabricscope_microbursts_total",
                           "Microbursts: runs of samples at or above the enter threshold of line "
                           "rate, ended below the exit threshold.",
                           MetricType::Counter);
  auto burst_dur = MakeFamily("fabricscope_microburst_duration_seconds", "Duration of microbursts.",
                              MetricType::Histogram);
  auto hw = MakeFamily("fabricscope_port_hw_events_total",
                       "RDMA driver hw_counters by name (mlx5: out_of_sequence, packet_seq_err, "
                       "np_cnp_sent, ...).",
                       MetricType::Counter);
  auto eth = MakeFamily("fabricscope_port_ethtool_stat_total",
                        "SIOCETHTOOL statistics by name (RoCE priority, pause, PHY counters).",
                        MetricType::Counter);
  auto tcp_events = MakeFamily("fabricscope_tcp_events_total",
                               "TCP counters of /proc/net/snmp (Tcp:) and /proc/net/netstat "
                               "(TcpExt:) by column name.",
                               MetricType::Counter);
  auto loss = MakeFamily("fabricscope_port_loss_ratio",
                         "Packets lost over packets received in the last window (RDMA: "
                         "out_of_sequence / port_rcv_packets; netdev: drops / received).",
                         MetricType::Gauge);
  auto retrans = MakeFamily("fabricscope_port_retransmits_total",
                            "packet_seq_err + local_ack_timeout_err + duplicate_request + "
                            "roce_adp_retrans.",
                            MetricType::Counter);
  auto retrans_rate = MakeFamily("fabricscope_port_retransmits_per_second",
                                 "Retransmits per second over the last window.", MetricType::Gauge);
  auto oos = MakeFamily("fabricscope_port_out_of_sequence_packets_total",
                        "Packets the responder received out of sequence (loss upstream).",
                        MetricType::Counter);
  auto cnp_sent =
      MakeFamily("fabricscope_port_cnp_sent_total",
                 "Congestion notification packets sent (np_cnp_sent).", MetricType::Counter);
  auto cnp_handled =
      MakeFamily("fabricscope_port_cnp_handled_total",
                 "CNPs that throttled this sender (rp_cnp_handled).", MetricType::Counter);
  auto cnp_sent_rate = MakeFamily("fabricscope_port_cnp_sent_per_second",
                                  "CNPs sent per second over the last window.", MetricType::Gauge);
  auto cnp_handled_rate =
      MakeFamily("fabricscope_port_cnp_handled_per_second",
                 "CNPs handled per second over the last window.", MetricType::Gauge);
  auto ecn = MakeFamily("fabricscope_port_ecn_marked_packets_total",
                        "Received RoCE packets with ECN CE (np_ecn_marked_roce_packets).",
                        MetricType::Counter);
  auto ecn_ratio =
      MakeFamily("fabricscope_port_ecn_marked_ratio",
                 "ECN-marked packets over packets received in the last window.", MetricType::Gauge);
  auto pause = MakeFamily("fabricscope_port_pause_seconds_total",
                          "Time paused by PFC per priority and direction "
                          "({rx,tx}_prio<p>_pause_duration, us / 1e6).",
                          MetricType::Counter);
  auto pause_ratio =
      MakeFamily("fabricscope_port_pause_time_ratio",
                 "Share of the last window paused by PFC, per priority.", MetricType::Gauge);
  auto discards = MakeFamily("fabricscope_port_discards_total",
                             "Packets discarded by the NIC, by reason (the source counter).",
                             MetricType::Counter);
  auto ber = MakeFamily("fabricscope_port_bit_error_ratio",
                        "Raw (pre-FEC) bit error ratio over the last window: "
                        "rx_corrected_bits_phy / rx_bits_phy.",
                        MetricType::Gauge);
  auto link_state = MakeFamily("fabricscope_port_link_state",
                               "IB PortState (1 DOWN, 2 INIT, 3 ARMED, 4 ACTIVE); netdevs: 4 up, "
                               "1 down, 0 other.",
                               MetricType::Gauge);
  auto phys_state =
      MakeFamily("fabricscope_port_physical_state",
                 "IB PortPhysicalState (5 LinkUp, 3 Disabled, 2 Polling, ...).", MetricType::Gauge);
  auto cur_rate =
      MakeFamily("fabricscope_port_current_rate_bytes_per_second",
                 "Rate the port reports now (changes are speed changes).", MetricType::Gauge);
  auto flaps = MakeFamily("fabricscope_port_link_flaps_total",
                          "Transitions of the port out of ACTIVE/up since agent start.",
                          MetricType::Counter);
  auto rate_changes =
      MakeFamily("fabricscope_port_rate_changes_total",
                 "Changes of the port's rate since agent start.", MetricType::Counter);
  auto tcp_retrans =
      MakeFamily("fabricscope_tcp_retransmitted_segments_total",
                 "TCP segments retransmitted (Tcp: RetransSegs).", MetricType::Counter);
  auto tcp_sent = MakeFamily("fabricscope_tcp_sent_segments_total",
                             "TCP segments sent (Tcp: OutSegs).", MetricType::Counter);
  auto tcp_ratio =
      MakeFamily("fabricscope_tcp_retransmitted_segments_ratio",
                 "Retransmitted over sent TCP segments in the last window.", MetricType::Gauge);
  auto flow_retrans = MakeFamily("fabricscope_flow_retransmits_total",
                                 "Retransmissions seen in captured packets, by kind (RoCE "
                                 "go_back_n, ack_timeout; TCP retransmission, "
                                 "fast_retransmission, spurious_retransmission).",
                                 MetricType::Counter);
  auto flow_naks = MakeFamily("fabricscope_flow_naks_total",
                              "RoCE NAKs seen in captured packets, by kind (sequence_error, rnr, "
                              "other).",
                              MetricType::Counter);
  auto flow_cnps =
      MakeFamily("fabricscope_flow_cnps_total",
                 "RoCEv2 CNPs (opcode 0x81) seen in captured packets.", MetricType::Counter);
  auto flow_loss = MakeFamily("fabricscope_flow_lost_packets_total",
                              "Packets inferred lost from captured traffic, by kind (psn_gap, "
                              "out_of_order).",
                              MetricType::Counter);
  auto flow_ce = MakeFamily("fabricscope_flow_ecn_ce_packets_total",
                            "Captured RoCE packets with ECN CE.", MetricType::Counter);
  auto cap_frames = MakeFamily("fabricscope_capture_packets_total", "Frames the capture delivered.",
                               MetricType::Counter);
  auto cap_drops = MakeFamily("fabricscope_capture_dropped_packets_total",
                              "Frames the capture lost (pcap_stats: kernel ring full, or the "
                              "interface).",
                              MetricType::Counter);
  auto cap_bad =
      MakeFamily("fabricscope_capture_malformed_packets_total",
                 "Truncated or malformed frames skipped by the parser.", MetricType::Counter);
  auto peer_bytes = MakeFamily("fabricscope_peer_bytes",
                               "Bytes between the top peer pairs in the last window (captured "
                               "traffic).",
                               MetricType::Gauge);
  auto resolution = MakeFamily("fabricscope_agent_group_resolution_seconds",
                               "Effective time resolution of a counter group (sampling period, "
                               "or the driver's cache lifetime when longer).",
                               MetricType::Gauge);
  auto interval = MakeFamily("fabricscope_agent_sample_interval_seconds",
                             "Achieved time between sampler ticks.", MetricType::Histogram);
  auto overruns = MakeFamily("fabricscope_agent_sampler_overruns_total",
                             "Sampler ticks that started more than one period late, by sampler "
                             "thread (fast: byte counters; slow; pma).",
                             MetricType::Counter);
  auto ring_drops =
      MakeFamily("fabricscope_agent_ring_dropped_samples_total",
                 "Samples dropped because the agent pipeline fell behind.", MetricType::Counter);
  auto uplink_drops =
      MakeFamily("fabricscope_agent_uplink_dropped_batches_total",
                 "Batches the agent dropped from its full uplink queue.", MetricType::Counter);
  auto uplink_refused = MakeFamily("fabricscope_agent_uplink_refused_batches_total",
                                   "Batches an aggregator refused as invalid or too large, which "
                                   "the agent dropped instead of sending again.",
                                   MetricType::Counter);
  auto spool_bytes =
      MakeFamily("fabricscope_agent_spool_bytes",
                 "Bytes of unacked batches in the agent's spool (--spool-dir).", MetricType::Gauge);
  auto spool_batches = MakeFamily("fabricscope_agent_spool_batches",
                                  "Unacked batches in the agent's spool.", MetricType::Gauge);
  auto spool_replayed = MakeFamily("fabricscope_agent_spool_replayed_batches_total",
                                   "Batches of earlier agent processes the spool sent again "
                                   "after a restart.",
                                   MetricType::Counter);
  auto spool_dropped = MakeFamily("fabricscope_agent_spool_dropped_batches_total",
                                  "Batches the spool dropped, by reason: full (past "
                                  "--spool-max-bytes or the disk), corrupt (a torn or damaged "
                                  "record), expired (older than the spool's maximum age).",
                                  MetricType::Counter);
  auto read_cost = MakeFamily("fabricscope_agent_read_cost_seconds",
                              "Mean cost of one read of one of the port's counter files (pread + "
                              "parse).",
                              MetricType::Gauge);
  auto last_batch = MakeFamily("fabricscope_agent_last_batch_timestamp_seconds",
                               "Unix time of the end of the last window received from the agent.",
                               MetricType::Gauge);
  auto info =
      MakeFamily("fabricscope_agent_info", "Agent identity; value is always 1.", MetricType::Gauge);

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

  auto self_batches = MakeFamily("fabricscope_aggregator_batches_total",
                                 "Batches stored by this aggregator.", MetricType::Counter);
  AddValue(self_batches, {}, static_cast<double>(batches_total_));
  auto self_dups = MakeFamily("fabricscope_aggregator_duplicate_batches_total",
                              "Batches received again after a reconnect (acked, not applied).",
                              MetricType::Counter);
  AddValue(self_dups, {}, static_cast<double>(duplicate_batches_total_));
  auto self_lost = MakeFamily("fabricscope_aggregator_lost_batches_total",
                              "Batches an agent dropped before this aggregator stored them.",
                              MetricType::Counter);
  AddValue(self_lost, {}, static_cast<double>(lost_batches_total_));
  auto self_expired = MakeFamily("fabricscope_aggregator_expired_nodes_total",
                                 "Nodes forgotten after sending nothing for node_expiry (their "
                                 "series left /metrics).",
                                 MetricType::Counter);
  AddValue(self_expired, {}, static_cast<double>(expired_nodes_total_));
  auto self_rej = MakeFamily("fabricscope_aggregator_rejected_batches_total",
                             "Batches dropped whole, by reason (before_hello, seq_jump, "
                             "port_index, series, histogram, communicator_limit, "
                             "rank_pair_limit).",
                             MetricType::Counter);
  AddByReason(self_rej, kRejectedBatchReasons, rejected_batches_);
  auto self_gaps = MakeFamily("fabricscope_aggregator_window_gaps_total",
                              "Batches whose window does not start where the node's previous one "
                              "ended.",
                              MetricType::Counter);
  AddValue(self_gaps, {}, static_cast<double>(window_gaps_total_));
  auto self_refused = MakeFamily("fabricscope_aggregator_refused_streams_total",
                                 "Agent streams refused, by reason (identity: the node is not its "
                                 "client certificate's; token: no token or a wrong one; "
                                 "duplicate: another agent instance streams for the node; "
                                 "invalid_hello: a field out of bounds; node_limit: one node "
                                 "more than limits: max_nodes).",
                                 MetricType::Counter);
  AddByReason(self_refused, kRefusedStreamReasons, refused_streams_);
  auto self_throttled =
      MakeFamily("fabricscope_aggregator_throttled_batches_total",
                 "Batches after which a stream's next read was delayed, its rate over limits: "
                 "max_batches_per_second (the sender slows down; nothing is dropped).",
                 MetricType::Counter);
  AddValue(self_throttled, {}, static_cast<double>(throttled_batches_total_.load()));
  auto self_nodes = MakeFamily("fabricscope_aggregator_nodes", "Nodes known to this aggregator.",
                               MetricType::Gauge);
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
