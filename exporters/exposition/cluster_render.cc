// The cluster state's /metrics: every node's ports, agent and capture series, the aggregator's own
// counters, then the link, cross-rank, peer and GPU families. Each family is named where a sample
// is added to it (FamilySet, by catalog id).
#include "exporters/exposition/cluster_render.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iterator>
#include <limits>

#include "absl/strings/str_cat.h"
#include "collectors/common/histogram_math.h"
#include "collectors/counter_meaning.h"
#include "exporters/exposition/cross_rank_render.h"
#include "exporters/exposition/fabric_render.h"
#include "exporters/exposition/gpu_render.h"
#include "exporters/exposition/link_render.h"
#include "exporters/exposition/metric_util.h"

namespace fabricscope::exporters {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using Labels = std::vector<ClientMetric::Label>;

namespace {

// Per-sample utilization above which a sample counts as saturated: a bucket bound of the agent's
// utilization histogram (agent/histogram.h UtilizationBounds), the threshold the shipped rules
// use (deploy/prometheus/fabricscope.rules.yml, fabricscope:port_saturated_samples:rate5m).
constexpr double kSaturatedSampleRatio = 0.95;

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

// `base` plus one label.
Labels With(const Labels& base, const char* key, std::string value) {
  Labels l = base;
  l.push_back({key, std::move(value)});
  return l;
}

// The node-level histograms, summed over the node's ports and directions as CollectPort meets
// them (MergeHistogram: histograms of other bounds are left out).
struct NodeHistograms {
  v1::Histogram utilization, microburst_durations;
};

// The packet capture's flow counters of one interface (agent/capture_runner.h).
void CollectCapture(const std::string& node, const v1::CaptureWindow& c, FamilySet& f) {
  const Labels cl = {{"node", node}, {"interface", c.interface()}};
  AddValue(f[Metric::kCapturePacketsTotal], cl, static_cast<double>(c.frames_total()));
  AddValue(f[Metric::kCaptureDroppedPacketsTotal], With(cl, "where", "kernel"),
           static_cast<double>(c.kernel_dropped_total()));
  AddValue(f[Metric::kCaptureDroppedPacketsTotal], With(cl, "where", "interface"),
           static_cast<double>(c.interface_dropped_total()));
  AddValue(f[Metric::kCaptureMalformedPacketsTotal], cl, static_cast<double>(c.malformed_total()));
  AddValue(f[Metric::kFlowCnpsTotal], cl, static_cast<double>(c.cnps_total()));
  AddValue(f[Metric::kFlowEcnCePacketsTotal], cl, static_cast<double>(c.ecn_ce_packets_total()));
  for (const auto& [kind, v] : c.events_total()) {
    const double value = static_cast<double>(v);
    if (kind == "nak_sequence_error") {
      AddValue(f[Metric::kFlowNaksTotal], With(cl, "kind", "sequence_error"), value);
    } else if (kind == "rnr_nak") {
      AddValue(f[Metric::kFlowNaksTotal], With(cl, "kind", "rnr"), value);
    } else if (kind == "nak_other") {
      AddValue(f[Metric::kFlowNaksTotal], With(cl, "kind", "other"), value);
    } else if (kind == "psn_gap" || kind == "out_of_order") {
      AddValue(f[Metric::kFlowLostPacketsTotal], With(cl, "kind", kind), value);
    } else {
      AddValue(f[Metric::kFlowRetransmitsTotal], With(cl, "kind", kind), value);
    }
  }
  for (const v1::PeerBytes& pb : c.top_peers()) {
    Labels l = With(cl, "src", pb.src());
    l.push_back({"dst", pb.dst()});
    AddValue(f[Metric::kPeerBytes], l, static_cast<double>(pb.bytes()));
  }
}

// The agent's spool (collectors/uplink/spool.h), when it has one.
void CollectSpool(const std::string& node, const v1::AgentStats& a, FamilySet& f) {
  if (!a.has_spool()) return;
  AddValue(f[Metric::kAgentSpoolBytes], {{"node", node}}, static_cast<double>(a.spool_bytes()));
  AddValue(f[Metric::kAgentSpoolBatches], {{"node", node}}, static_cast<double>(a.spool_batches()));
  AddValue(f[Metric::kAgentSpoolReplayedBatchesTotal], {{"node", node}},
           static_cast<double>(a.spool_replayed_batches_total()));
  for (const char* reason : {"full", "corrupt", "expired"}) {
    const auto it = a.spool_dropped_batches_total().find(reason);
    AddValue(f[Metric::kAgentSpoolDroppedBatchesTotal], {{"node", node}, {"reason", reason}},
             it == a.spool_dropped_batches_total().end() ? 0.0 : static_cast<double>(it->second));
  }
}

// The node-level TCP counters (a node_level port: node labels only).
void CollectTcp(const std::string& node, const v1::PortWindow& w, FamilySet& f) {
  if (f.on(Metric::kTcpEventsTotal)) {
    for (const v1::CounterValue& c : w.counters()) {
      AddValue(f[Metric::kTcpEventsTotal], {{"node", node}, {"counter", c.name()}},
               static_cast<double>(c.total()));
    }
  }
  const v1::DerivedSignals& d = w.derived();
  if (d.has_tcp_retransmitted_segments_total()) {
    AddValue(f[Metric::kTcpRetransmittedSegmentsTotal], {{"node", node}},
             static_cast<double>(d.tcp_retransmitted_segments_total()));
    AddValue(f[Metric::kTcpSentSegmentsTotal], {{"node", node}},
             static_cast<double>(d.tcp_sent_segments_total()));
    AddValue(f[Metric::kTcpRetransmittedSegmentsRatio], {{"node", node}},
             d.tcp_retransmitted_ratio());
  }
}

// The derived signals of a port (agent/derived.h): loss, retransmits, congestion feedback,
// pause, discards, bit errors, transmit wait.
void CollectDerived(const Labels& pl, const v1::DerivedSignals& d, FamilySet& f) {
  if (d.has_loss_ratio()) AddValue(f[Metric::kPortLossRatio], pl, d.loss_ratio());
  if (d.has_retransmits_total()) {
    AddValue(f[Metric::kPortRetransmitsTotal], pl, static_cast<double>(d.retransmits_total()));
    AddValue(f[Metric::kPortRetransmitsPerSecond], pl, d.retransmits_per_second());
  }
  if (d.has_out_of_sequence_total()) {
    AddValue(f[Metric::kPortOutOfSequencePacketsTotal], pl,
             static_cast<double>(d.out_of_sequence_total()));
  }
  if (d.has_cnp_sent_total()) {
    AddValue(f[Metric::kPortCnpSentTotal], pl, static_cast<double>(d.cnp_sent_total()));
    AddValue(f[Metric::kPortCnpSentPerSecond], pl, d.cnp_sent_per_second());
  }
  if (d.has_cnp_handled_total()) {
    AddValue(f[Metric::kPortCnpHandledTotal], pl, static_cast<double>(d.cnp_handled_total()));
    AddValue(f[Metric::kPortCnpHandledPerSecond], pl, d.cnp_handled_per_second());
  }
  if (d.has_ecn_marked_total()) {
    AddValue(f[Metric::kPortEcnMarkedPacketsTotal], pl, static_cast<double>(d.ecn_marked_total()));
    AddValue(f[Metric::kPortEcnMarkedRatio], pl, d.ecn_marked_ratio());
  }
  for (const v1::PriorityPause& p : d.pause()) {
    Labels l = With(pl, "priority", absl::StrCat(p.priority()));
    l.push_back({"direction", DirectionName(p.direction())});
    AddValue(f[Metric::kPortPauseSecondsTotal], l, p.seconds_total());
    AddValue(f[Metric::kPortPauseTimeRatio], l, p.time_ratio());
  }
  for (const v1::Discard& x : d.discards()) {
    AddValue(f[Metric::kPortDiscardsTotal], With(pl, "reason", x.reason()),
             static_cast<double>(x.total()));
  }
  if (d.has_bit_error_ratio()) AddValue(f[Metric::kPortBitErrorRatio], pl, d.bit_error_ratio());
  if (d.has_transmit_wait_seconds_total()) {
    AddValue(f[Metric::kPortTransmitWaitSecondsTotal], pl, d.transmit_wait_seconds_total());
    AddValue(f[Metric::kPortTransmitWaitRatio], pl, d.transmit_wait_ratio());
  }
}

// Link state, byte and packet totals, error counters, utilization and microbursts of a port.
void CollectPortWindow(const Labels& pl, bool rdma, const v1::PortWindow& w, FamilySet& f,
                       NodeHistograms* nh) {
  if (w.has_link()) {
    AddValue(f[Metric::kPortLinkState], pl, w.link().state());
    if (rdma) AddValue(f[Metric::kPortPhysicalState], pl, w.link().phys_state());
    if (w.link().rate_bytes_per_second() > 0) {
      AddValue(f[Metric::kPortCurrentRateBytesPerSecond], pl,
               static_cast<double>(w.link().rate_bytes_per_second()));
    }
    AddValue(f[Metric::kPortLinkFlapsTotal], pl, static_cast<double>(w.link().flaps_total()));
    AddValue(f[Metric::kPortRateChangesTotal], pl,
             static_cast<double>(w.link().rate_changes_total()));
  }
  // A counter the port does not have (or could never read) is absent, not 0.
  if (w.transmit().has_bytes()) {
    AddValue(f[Metric::kPortTransmitBytesTotal], pl,
             static_cast<double>(w.transmit().bytes_total()));
  }
  if (w.receive().has_bytes()) {
    AddValue(f[Metric::kPortReceiveBytesTotal], pl, static_cast<double>(w.receive().bytes_total()));
  }
  if (w.transmit().has_packets()) {
    AddValue(f[Metric::kPortTransmitPacketsTotal], pl,
             static_cast<double>(w.transmit().packets_total()));
  }
  if (w.receive().has_packets()) {
    AddValue(f[Metric::kPortReceivePacketsTotal], pl,
             static_cast<double>(w.receive().packets_total()));
  }
  for (const v1::ErrorCounter& e : w.errors()) {
    AddValue(f[Metric::kPortErrorsTotal], With(pl, "kind", e.kind()),
             static_cast<double>(e.total()));
    if (e.saturated()) AddValue(f[Metric::kPortErrorsSaturated], With(pl, "kind", e.kind()), 1);
  }
  if (!w.utilization_valid()) return;
  const std::pair<const char*, const v1::DirectionWindow*> dirs[] = {{"transmit", &w.transmit()},
                                                                     {"receive", &w.receive()}};
  for (const auto& [dname, d] : dirs) {
    const Labels l = With(pl, "direction", dname);
    AddValue(f[Metric::kPortUtilizationRatio], l, d->mean_utilization());
    AddValue(f[Metric::kPortPeakUtilizationRatio], l, d->peak_utilization());
    const v1::Histogram& samples = d->sample_utilization();
    if (f.on(Metric::kPortSampleUtilizationRatio)) {
      AddHistogram(f[Metric::kPortSampleUtilizationRatio], l, samples);
    }
    if (const std::optional<double> above = common::CountAbove(samples, kSaturatedSampleRatio)) {
      AddValue(f[Metric::kPortSaturatedSamplesTotal], l, *above);
    }
    common::MergeHistogram(&nh->utilization, samples);
    AddValue(f[Metric::kMicroburstsTotal], l, static_cast<double>(d->microbursts_total()));
    if (f.on(Metric::kMicroburstDurationSeconds)) {
      AddHistogram(f[Metric::kMicroburstDurationSeconds], l, d->microburst_duration_seconds());
    }
    common::MergeHistogram(&nh->microburst_durations, d->microburst_duration_seconds());
  }
}

void CollectAgent(const NodeView& n, FamilySet& f) {
  static const v1::AgentStats kNoStats;
  const v1::AgentStats& a = n.agent ? *n.agent : kNoStats;
  const std::string& node = n.node;
  const Labels nl = {{"node", node}};
  AddValue(f[Metric::kAgentInfo], {{"node", node}, {"version", n.version}, {"boot_id", n.boot_id}},
           1);
  if (n.last_batch_unix_ns != 0) {
    AddValue(f[Metric::kAgentLastBatchTimestampSeconds], nl,
             static_cast<double>(n.last_batch_unix_ns) / 1e9);
  }
  if (a.has_sample_interval_seconds()) {
    AddHistogram(f[Metric::kAgentSampleIntervalSeconds], nl, a.sample_interval_seconds());
  }
  if (a.overruns_by_sampler().empty()) {
    AddValue(f[Metric::kAgentSamplerOverrunsTotal], With(nl, "sampler", "fast"),
             static_cast<double>(a.overruns_total()));
  }
  for (const auto& [sampler, v] : a.overruns_by_sampler()) {
    AddValue(f[Metric::kAgentSamplerOverrunsTotal], With(nl, "sampler", sampler),
             static_cast<double>(v));
  }
  if (n.capture && !n.capture->interface().empty()) CollectCapture(node, *n.capture, f);
  for (const v1::GroupResolution& r : a.resolutions()) {
    AddValue(f[Metric::kAgentGroupResolutionSeconds], With(nl, "group", r.group()),
             r.effective_resolution_seconds());
  }
  AddValue(f[Metric::kAgentRingDroppedSamplesTotal], nl, static_cast<double>(a.ring_drops_total()));
  AddValue(f[Metric::kAgentUplinkDroppedBatchesTotal], nl,
           static_cast<double>(a.uplink_dropped_batches_total()));
  AddValue(f[Metric::kAgentUplinkRefusedBatchesTotal], nl,
           static_cast<double>(a.uplink_refused_batches_total()));
  CollectSpool(node, a, f);
  // Read cost per port: the mean over its counter files (per-file figures stay in the batch).
  std::vector<std::pair<double, int>> port_cost(n.ports.size(), {0.0, 0});
  for (const v1::CounterReadCost& c : a.read_costs()) {
    if (c.port_index() >= n.ports.size()) continue;
    port_cost[c.port_index()].first += c.mean_seconds();
    ++port_cost[c.port_index()].second;
  }
  for (size_t i = 0; i < n.ports.size(); ++i) {
    if (port_cost[i].second == 0) continue;
    const v1::PortInfo& pi = *n.ports[i].info;
    AddValue(f[Metric::kAgentReadCostSeconds],
             {{"node", node}, {"device", pi.device()}, {"port", absl::StrCat(pi.port())}},
             port_cost[i].first / port_cost[i].second);
  }
}

void CollectPort(const std::string& node, const PortView& ps, FamilySet& f, NodeHistograms* nh) {
  const Labels pl = {
      {"node", node}, {"device", ps.info->device()}, {"port", absl::StrCat(ps.info->port())}};
  if (ps.info->line_rate_bytes_per_second() > 0) {
    AddValue(f[Metric::kPortLineRateBytesPerSecond], pl,
             static_cast<double>(ps.info->line_rate_bytes_per_second()));
  }
  if (!ps.last) return;
  if (ps.last->has_neighbor()) {
    const v1::PortNeighbor& nb = ps.last->neighbor();
    Labels l = pl;
    l.insert(l.end(), {{"source", nb.source()},
                       {"neighbor_chassis", nb.chassis_name()},
                       {"neighbor_chassis_id", nb.chassis_id()},
                       {"neighbor_port", nb.port_id()},
                       {"neighbor_port_description", nb.port_description()},
                       {"neighbor_management_address", nb.management_address()}});
    AddValue(f[Metric::kPortNeighborInfo], l, 1);
  }
  for (const std::string& c : ps.last->saturated_counters()) {
    AddValue(f[Metric::kPortCounterSaturated], With(pl, "counter", c), 1);
  }
  AddValue(f[Metric::kPortUnavailableReadsTotal], pl, static_cast<double>(ps.unavailable_total));
  for (const auto& [kind, total] : ps.resets_total) {
    AddValue(f[Metric::kPortCounterResetsTotal], With(pl, "kind", kind),
             static_cast<double>(total));
  }
  const v1::PortWindow& w = *ps.last;
  if (ps.info->node_level()) {
    CollectTcp(node, w, f);
    return;
  }
  const bool hw = f.on(Metric::kPortHwEventsTotal);
  for (const v1::CounterValue& c : w.counters()) {
    if (hw && c.group() == "hw_counters") {
      AddValue(f[Metric::kPortHwEventsTotal], With(pl, "counter", c.name()),
               static_cast<double>(c.total()));
    } else if (c.group() == "ethtool" &&
               (hw || collectors::KeptAtBasicProfile(collectors::MeaningFromWire(c.meaning())))) {
      AddValue(f[Metric::kPortEthtoolStatTotal], With(pl, "stat", c.name()),
               static_cast<double>(c.total()));
    }
  }
  CollectDerived(pl, w.derived(), f);
  CollectPortWindow(pl, ps.info->rdma(), w, f, nh);
}

void CollectCounters(const AggregatorCounters& c, FamilySet& f) {
  AddValue(f[Metric::kAggregatorBatchesTotal], {}, static_cast<double>(c.batches));
  AddValue(f[Metric::kAggregatorDuplicateBatchesTotal], {},
           static_cast<double>(c.duplicate_batches));
  AddValue(f[Metric::kAggregatorLostBatchesTotal], {}, static_cast<double>(c.lost_batches));
  AddValue(f[Metric::kAggregatorExpiredNodesTotal], {}, static_cast<double>(c.expired_nodes));
  AddByReason(f[Metric::kAggregatorRejectedBatchesTotal], ClusterState::kRejectedBatchReasons,
              c.rejected_batches);
  AddValue(f[Metric::kAggregatorWindowGapsTotal], {}, static_cast<double>(c.window_gaps));
  AddByReason(f[Metric::kAggregatorRefusedStreamsTotal], ClusterState::kRefusedStreamReasons,
              c.refused_streams);
  AddValue(f[Metric::kAggregatorThrottledBatchesTotal], {},
           static_cast<double>(c.throttled_batches));
  AddValue(f[Metric::kAggregatorNodes], {}, static_cast<double>(c.nodes));
  for (const auto& [outcome, n] : c.recording_fetches) {
    AddValue(f[Metric::kAggregatorRecordingFetchesTotal], {{"outcome", outcome}},
             static_cast<double>(n));
  }
  AddValue(f[Metric::kAggregatorRecordingAnswersDroppedTotal], {},
           static_cast<double>(c.recording_answers_dropped));
}

// The peer inbox's and the forwarder's series (sharded aggregators).
void CollectPeers(const PeerCounters& p, FamilySet& f) {
  for (const auto& [peer, received] : p.received) {
    AddValue(f[Metric::kAggregatorReceivedForwardedRecordsTotal], {{"peer", peer}},
             static_cast<double>(received));
  }
  if (!p.forwarding) return;
  for (const Forwarder::PeerStats& s : p.forwarded) {
    AddValue(f[Metric::kAggregatorForwardedRecordsTotal], {{"peer", s.peer}},
             static_cast<double>(s.forwarded));
    AddValue(f[Metric::kAggregatorForwardQueueRecords], {{"peer", s.peer}},
             static_cast<double>(s.queued));
    AddValue(f[Metric::kAggregatorForwardDroppedRecordsTotal], {{"peer", s.peer}},
             static_cast<double>(s.dropped));
  }
  AddValue(f[Metric::kAggregatorPeers], {}, static_cast<double>(p.peers));
}

}  // namespace

std::vector<MetricFamily> RenderClusterFamilies(const ClusterSnapshot& s) {
  FamilySet families(s.profile);
  std::vector<MetricFamily> out;
  CollectCounters(s.counters, families);
  for (const NodeView& n : s.nodes) {
    const std::string& node = n.node;
    CollectAgent(n, families);
    NodeHistograms nh;
    for (const PortView& ps : n.ports) CollectPort(node, ps, families, &nh);
    if (nh.utilization.count() > 0) {
      AddHistogram(families[Metric::kNodeSampleUtilizationRatio], {{"node", node}}, nh.utilization);
    }
    if (nh.microburst_durations.bucket_counts_size() > 0) {
      AddHistogram(families[Metric::kNodeMicroburstDurationSeconds], {{"node", node}},
                   nh.microburst_durations);
    }
  }
  families.DrainInto(&out);
  AddLinkFamilies(s.links, &out);
  AddCrossRankFamilies(s.cross_rank, &out);
  FamilySet peers(s.profile);
  CollectPeers(s.peers, peers);
  peers.DrainInto(&out);
  AddGpuFamilies(s.gpu, &out);
  AddFabricFamilies(s.fabric, &out);
  // fabricscope_traffic_imbalance_ratio comes in two parts (links: rails, GPU: ranks).
  MergeFamiliesByName(&out);
  LabelCommunicatorJobs(s.gpu.jobs, &out);
  return out;
}

std::vector<MetricFamily> ClusterFamilies(const ClusterState& state) {
  return RenderClusterFamilies(state.Snapshot());
}

}  // namespace fabricscope::exporters
