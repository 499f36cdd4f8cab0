// The cluster state's JSON: /api/status and /api/ports (the live page's, written by hand with
// bounded output: top-K by what a person looks for first), /api/nodes, /api/microbursts,
// /api/loss.
#include "exporters/exposition/cluster_json.h"

#include <google/protobuf/struct.pb.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "collectors/common/histogram_math.h"
#include "exporters/exposition/metric_util.h"
#include "exporters/exposition/struct_json.h"
#include "exporters/heatmap/heatmap_svg.h"

namespace fabricscope::exporters {
namespace {

// "key": value or null when the optional field is absent.
template <typename T>
void AppendOptional(std::string* out, const char* key, bool has, T value) {
  if (has) {
    AppendJsonField(out, key, static_cast<double>(value));
  } else {
    absl::StrAppend(out, "\"", key, "\":null");
  }
}

// A node is reporting while its last Hello or batch is at most this old (a few 1 s windows).
constexpr int kReportingSeconds = 10;

struct StatusRow {
  std::string node;
  size_t ports = 0;
  double samples_per_second = -1, p99 = 0;
  bool have_p99 = false, p99_above = false, reporting = false;
  uint64_t samples = 0, bursts = 0, overruns = 0, ring_drops = 0, uplink_dropped = 0, lost = 0;
  double last_seen = 0;
};

struct PortRow {
  std::string node;
  std::shared_ptr<const v1::PortInfo> info;
  std::shared_ptr<const v1::PortWindow> last;
  double loss = 0, retrans = 0, util = 0;  // the sort keys
};

}  // namespace

std::string StatusJson(const ClusterState& state, size_t limit) {
  std::vector<StatusRow> rows;
  size_t reporting = 0;
  {
    const absl::Time now = state.Now();
    const std::vector<NodeView> nodes = state.Nodes();
    rows.reserve(nodes.size());
    for (const NodeView& n : nodes) {
      StatusRow r;
      r.node = n.node;
      r.ports = n.ports.size();
      r.samples_per_second = n.samples_per_second;
      r.lost = n.lost_batches;
      r.reporting = now - n.last_seen <= absl::Seconds(kReportingSeconds);
      if (r.reporting) ++reporting;
      r.last_seen = absl::ToDoubleSeconds(n.last_seen - absl::UnixEpoch());
      if (n.agent) {
        r.have_p99 = common::HistogramQuantileBound(n.agent->sample_interval_seconds(), 0.99,
                                                    &r.p99, &r.p99_above);
        r.samples = n.agent->ticks_total();
        r.overruns = n.agent->overruns_total();
        r.ring_drops = n.agent->ring_drops_total();
        r.uplink_dropped = n.agent->uplink_dropped_batches_total();
      }
      for (const PortView& ps : n.ports) {
        if (!ps.last) continue;
        r.bursts +=
            ps.last->transmit().microbursts_total() + ps.last->receive().microbursts_total();
      }
      rows.push_back(std::move(r));
    }
  }
  double sps = 0;
  uint64_t ports = 0, samples = 0, bursts = 0, overruns = 0, drops = 0;
  for (const StatusRow& r : rows) {
    if (r.reporting) sps += std::max(0.0, r.samples_per_second);
    ports += r.ports;
    samples += r.samples;
    bursts += r.bursts;
    overruns += r.overruns;
    drops += r.ring_drops;
  }
  std::sort(rows.begin(), rows.end(), [](const StatusRow& a, const StatusRow& b) {
    return std::make_tuple(-static_cast<double>(a.overruns + a.ring_drops), a.node) <
           std::make_tuple(-static_cast<double>(b.overruns + b.ring_drops), b.node);
  });
  const size_t nodes_total = rows.size();
  if (rows.size() > limit) rows.resize(limit);
  std::string out = "{";
  AppendJsonField(&out, "nodes_total", static_cast<double>(nodes_total));
  for (const auto& [key, v] : {std::pair<const char*, double>{"nodes_reporting", reporting},
                               {"ports_total", ports},
                               {"samples_per_second_total", sps},
                               {"samples_total", samples},
                               {"microbursts_total", bursts},
                               {"overruns_total", overruns},
                               {"ring_drops_total", drops}}) {
    out += ",";
    AppendJsonField(&out, key, v);
  }
  out += ",\"nodes\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const StatusRow& r = rows[i];
    if (i > 0) out += ",";
    out += "{";
    AppendJsonField(&out, "node", r.node);
    out += ",";
    AppendJsonField(&out, "ports", static_cast<double>(r.ports));
    out += ",";
    AppendOptional(&out, "samples_per_second", r.samples_per_second >= 0, r.samples_per_second);
    out += ",";
    AppendOptional(&out, "p99_interval_seconds", r.have_p99, r.p99);
    absl::StrAppend(&out, ",\"p99_interval_above\":", r.p99_above ? "true" : "false");
    for (const auto& [key, v] : {std::pair<const char*, double>{"samples_total", r.samples},
                                 {"microbursts_total", r.bursts},
                                 {"overruns_total", r.overruns},
                                 {"ring_drops_total", r.ring_drops},
                                 {"uplink_dropped_batches_total", r.uplink_dropped},
                                 {"lost_batches", r.lost},
                                 {"last_seen_unix_seconds", r.last_seen}}) {
      out += ",";
      AppendJsonField(&out, key, v);
    }
    out += "}";
  }
  out += "]}";
  return out;
}

std::string PortsJson(const ClusterState& state, absl::string_view node_filter, size_t limit) {
  std::vector<PortRow> rows;
  for (const NodeView& n : state.Nodes(node_filter)) {
    for (const PortView& ps : n.ports) {
      if (!ps.last) continue;
      rows.push_back(PortRow{n.node, ps.info, ps.last});
    }
  }
  const size_t total = rows.size();
  // The sort keys, finite (an agent's NaN would break the strict weak order std::sort needs).
  auto finite = [](double v) { return std::isfinite(v) ? v : 0.0; };
  for (PortRow& r : rows) {
    const v1::DerivedSignals& d = r.last->derived();
    r.loss = finite(d.has_loss_ratio() ? d.loss_ratio() : 0);
    r.retrans = finite(d.has_retransmits_per_second() ? d.retransmits_per_second() : 0);
    r.util = finite(
        std::max(r.last->transmit().mean_utilization(), r.last->receive().mean_utilization()));
  }
  const auto before = [](const PortRow& a, const PortRow& b) {
    if (a.loss != b.loss) return a.loss > b.loss;
    if (a.retrans != b.retrans) return a.retrans > b.retrans;
    if (a.util != b.util) return a.util > b.util;
    if (a.node != b.node) return a.node < b.node;
    if (a.info->device() != b.info->device()) return a.info->device() < b.info->device();
    return a.info->port() < b.info->port();
  };
  const size_t shown = std::min(limit, rows.size());
  std::partial_sort(rows.begin(), rows.begin() + static_cast<long>(shown), rows.end(), before);
  rows.resize(shown);
  std::string out = "{";
  AppendJsonField(&out, "ports_total", static_cast<double>(total));
  out += ",\"ports\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const PortRow& r = rows[i];
    const v1::PortInfo& pi = *r.info;
    const v1::PortWindow& w = *r.last;
    const v1::DerivedSignals& d = w.derived();
    if (i > 0) out += ",";
    out += "{";
    AppendJsonField(&out, "node", r.node);
    out += ",";
    AppendJsonField(&out, "device", pi.device());
    out += ",";
    AppendJsonField(&out, "port", static_cast<double>(pi.port()));
    out += ",";
    AppendJsonField(&out, "kind", pi.node_level() ? "node" : (pi.rdma() ? "rdma" : "netdev"));
    out += ",";
    // 0 in both is an unknown rate (a virtual NIC without --line-rate, the tcp pseudo-port).
    const uint64_t rate = w.line_rate_bytes_per_second() > 0 ? w.line_rate_bytes_per_second()
                                                             : pi.line_rate_bytes_per_second();
    AppendOptional(&out, "line_rate_bytes_per_second", rate > 0, static_cast<double>(rate));
    out += ",";
    AppendOptional(&out, "transmit_utilization", w.utilization_valid(),
                   w.transmit().mean_utilization());
    out += ",";
    AppendOptional(&out, "receive_utilization", w.utilization_valid(),
                   w.receive().mean_utilization());
    out += ",";
    AppendOptional(&out, "loss_ratio", d.has_loss_ratio(), d.loss_ratio());
    out += ",";
    AppendOptional(&out, "retransmits_per_second", d.has_retransmits_per_second(),
                   d.retransmits_per_second());
    out += ",";
    AppendOptional(&out, "tcp_retransmitted_ratio", d.has_tcp_retransmitted_ratio(),
                   d.tcp_retransmitted_ratio());
    out += ",";
    AppendOptional(&out, "cnp_sent_per_second", d.has_cnp_sent_per_second(),
                   d.cnp_sent_per_second());
    out += ",";
    AppendOptional(&out, "ecn_marked_ratio", d.has_ecn_marked_ratio(), d.ecn_marked_ratio());
    double pause = 0;
    for (const v1::PriorityPause& p : d.pause()) pause = std::max(pause, p.time_ratio());
    out += ",";
    AppendOptional(&out, "pause_time_ratio", d.pause_size() > 0, pause);
    if (w.has_neighbor()) {  // the switch port at the cable's other end (LLDP), when known
      const v1::PortNeighbor& nb = w.neighbor();
      out += ",\"neighbor\":{";
      AppendJsonField(&out, "source", nb.source());
      out += ",";
      AppendJsonField(&out, "chassis", nb.chassis_name());
      out += ",";
      AppendJsonField(&out, "chassis_id", nb.chassis_id());
      out += ",";
      AppendJsonField(&out, "port", nb.port_id());
      out += ",";
      AppendJsonField(&out, "port_description", nb.port_description());
      out += ",";
      AppendJsonField(&out, "management_address", nb.management_address());
      out += "}";
    }
    out += "}";
  }
  out += "]}";
  return out;
}

std::string NodesJson(const ClusterState& state) {
  google::protobuf::Struct root;
  google::protobuf::ListValue* list = (*root.mutable_fields())["nodes"].mutable_list_value();
  for (const NodeView& n : state.Nodes()) {
    auto& f = *list->add_values()->mutable_struct_value()->mutable_fields();
    f["node"].set_string_value(n.node);
    // As a string: a 64-bit id does not fit a JSON number exactly.
    f["instance_id"].set_string_value(absl::StrCat(n.instance_id));
    f["acked_seq"].set_number_value(static_cast<double>(n.acked_seq));
    f["batches"].set_number_value(static_cast<double>(n.batches));
    f["duplicate_batches"].set_number_value(static_cast<double>(n.duplicate_batches));
    f["lost_batches"].set_number_value(static_cast<double>(n.lost_batches));
    f["last_seen_unix_seconds"].set_number_value(
        absl::ToDoubleSeconds(n.last_seen - absl::UnixEpoch()));
  }
  return StructToJson(root);
}

std::string MicroburstsJson(const std::vector<MicroburstRecord>& records) {
  google::protobuf::Struct root;
  google::protobuf::ListValue* list = (*root.mutable_fields())["microbursts"].mutable_list_value();
  for (const MicroburstRecord& b : records) {
    auto& f = *list->add_values()->mutable_struct_value()->mutable_fields();
    f["node"].set_string_value(b.node);
    f["device"].set_string_value(b.device);
    f["port"].set_number_value(b.port);
    f["direction"].set_string_value(DirectionName(b.direction));
    f["start_unix_seconds"].set_number_value(static_cast<double>(b.start_unix_ns) / 1e9);
    f["duration_seconds"].set_number_value(static_cast<double>(b.duration_ns) / 1e9);
    f["peak_utilization"].set_number_value(b.peak_utilization);
    f["bytes"].set_number_value(static_cast<double>(b.bytes));
  }
  return StructToJson(root);
}

std::string LossEventsJson(const std::vector<LossEventRecord>& records) {
  google::protobuf::Struct root;
  google::protobuf::ListValue* list = (*root.mutable_fields())["loss_events"].mutable_list_value();
  for (const LossEventRecord& r : records) {
    const v1::PacketLossEvent& e = r.event;
    auto& f = *list->add_values()->mutable_struct_value()->mutable_fields();
    f["node"].set_string_value(r.node);
    f["src"].set_string_value(e.src());
    f["dst"].set_string_value(e.dst());
    f["proto"].set_string_value(e.proto() == 6 ? "tcp" : "rocev2");
    f["sport"].set_number_value(e.sport());
    f["dport"].set_number_value(e.dport());
    f["qp"].set_number_value(e.qp());
    f["kind"].set_string_value(e.kind());
    f["time_unix_seconds"].set_number_value(static_cast<double>(e.time_unix_ns()) / 1e9);
    f["first"].set_number_value(e.first());
    f["last"].set_number_value(e.last());
  }
  return StructToJson(root);
}

}  // namespace fabricscope::exporters
