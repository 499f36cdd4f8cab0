#include "exporters/exposition/fabric_render.h"

#include <httplib.h>

#include <cmath>

#include "collectors/common/collective_vocabulary.h"
#include "collectors/common/json_text.h"
#include "exporters/exposition/metric_util.h"
#include "exporters/state/cluster_state.h"

namespace fabricscope::exporters {

using common::AppendJsonField;
using common::AppendJsonString;

void AddFabricFamilies(const FabricSnapshot& s, std::vector<prometheus::MetricFamily>* out) {
  auto demand = MakeFamily(Metric::kLeafUplinkDemandRatio);
  auto rate = MakeFamily(Metric::kLeafUplinkBytesPerSecond);
  auto local = MakeFamily(Metric::kTrafficLocalRatio);
  auto disagreements = MakeFamily(Metric::kTopologyDisagreements);
  for (const FabricSnapshot::Leaf& l : s.leaves) {
    if (std::isfinite(l.demand_ratio)) AddValue(demand, {{"leaf", l.name}}, l.demand_ratio);
    AddValue(rate, {{"leaf", l.name}, {"direction", "transmit"}}, l.egress_bytes_per_second);
    AddValue(rate, {{"leaf", l.name}, {"direction", "receive"}}, l.ingress_bytes_per_second);
  }
  for (const FabricSnapshot::Local& c : s.comms) {
    AddValue(local, {{"scope", "leaf"}, {"comm", common::CommLabel(c.comm)}}, c.ratio);
    if (c.rail_total_bytes > 0) {
      AddValue(local, {{"scope", "rail"}, {"comm", common::CommLabel(c.comm)}}, c.rail_ratio);
    }
  }
  for (const FabricSnapshot::Local& j : s.jobs) {
    AddValue(local, {{"scope", "leaf"}, {"job_id", j.job}}, j.ratio);
    if (j.rail_total_bytes > 0)
      AddValue(local, {{"scope", "rail"}, {"job_id", j.job}}, j.rail_ratio);
  }
  AddValue(disagreements, {}, static_cast<double>(s.disagreements.size()));
  for (prometheus::MetricFamily* f : {&demand, &rate, &local, &disagreements}) {
    if (!f->metric.empty()) out->push_back(std::move(*f));
  }
}

namespace {

void AppendStrings(std::string* out, const char* key, const std::vector<std::string>& v) {
  out->append("\"").append(key).append("\":[");
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out->append(",");
    AppendJsonString(out, v[i]);
  }
  out->append("]");
}

void AppendLocal(std::string* out, const FabricSnapshot::Local& l) {
  out->append("{\"scope\":\"leaf\",");
  if (l.job.empty()) {
    AppendJsonField(out, "comm", common::CommLabel(l.comm));
  } else {
    AppendJsonField(out, "job", l.job);
  }
  out->append(",");
  AppendJsonField(out, "local_bytes", static_cast<double>(l.local_bytes));
  out->append(",");
  AppendJsonField(out, "total_bytes", static_cast<double>(l.total_bytes));
  out->append(",");
  AppendJsonField(out, "ratio", l.ratio);
  out->append(",");
  AppendJsonField(out, "rail_local_bytes", static_cast<double>(l.rail_local_bytes));
  out->append(",");
  AppendJsonField(out, "rail_total_bytes", static_cast<double>(l.rail_total_bytes));
  out->append(",");
  AppendJsonField(out, "rail_ratio", l.rail_ratio);  // null: no rail known
  out->append("}");
}

}  // namespace

std::string FabricJson(const FabricSnapshot& s) {
  std::string out = "{";
  AppendJsonField(&out, "seconds", s.seconds);
  out += ",\"leaves\":[";
  for (size_t i = 0; i < s.leaves.size(); ++i) {
    const FabricSnapshot::Leaf& l = s.leaves[i];
    if (i > 0) out += ",";
    out += "{";
    AppendJsonField(&out, "name", l.name);
    out += ",";
    AppendJsonField(&out, "source", l.source);
    out += ",";
    AppendJsonField(&out, "rail", l.rail);
    out += ",";
    AppendStrings(&out, "nodes", l.nodes);
    for (const auto& [key, v] : {std::pair<const char*, double>{"uplink_capacity_bytes_per_second",
                                                                l.uplink_bytes_per_second},
                                 {"egress_bytes_per_second", l.egress_bytes_per_second},
                                 {"ingress_bytes_per_second", l.ingress_bytes_per_second},
                                 {"demand_ratio", l.demand_ratio}}) {
      out += ",";
      AppendJsonField(&out, key, v);  // null when not finite (no capacity)
    }
    out += "}";
  }
  out += "],\"local\":[";
  bool first = true;
  for (const auto* list : {&s.comms, &s.jobs}) {
    for (const FabricSnapshot::Local& l : *list) {
      if (!first) out += ",";
      first = false;
      AppendLocal(&out, l);
    }
  }
  out += "],\"disagreements\":[";
  for (size_t i = 0; i < s.disagreements.size(); ++i) {
    const FabricSnapshot::Disagreement& d = s.disagreements[i];
    if (i > 0) out += ",";
    out += "{";
    AppendJsonField(&out, "node", d.node);
    out += ",";
    AppendJsonField(&out, "file_leaf", d.file_leaf);
    out += ",";
    AppendJsonField(&out, "cable_leaf", d.cable_leaf);
    out += ",";
    AppendJsonField(&out, "cable_switch", d.cable_switch);
    out += ",";
    AppendJsonField(&out, "cable_source", d.cable_source);
    out += "}";
  }
  out += "],";
  AppendStrings(&out, "multi_leaf_nodes", s.multi_leaf_nodes);
  out += ",";
  AppendJsonField(&out, "unplaced_bytes", static_cast<double>(s.unplaced_bytes));
  out += ",";
  AppendJsonField(&out, "dropped_bytes", static_cast<double>(s.dropped_bytes));
  out += ",";
  AppendJsonField(&out, "late_bytes", static_cast<double>(s.late_bytes));
  out += ",";
  AppendJsonField(&out, "clock_ahead_batches", static_cast<double>(s.clock_ahead_batches));
  out += "}";
  return out;
}

void RegisterFabricRoutes(httplib::Server& server, const ClusterState& state,
                          std::vector<HeatmapPage>* pages) {
  server.Get("/heatmap/leaves", [&state](const httplib::Request& req, httplib::Response& res) {
    // A leaf x leaf matrix: at most 1,024 x 1,024 cells (kMaxLeaves), no time columns to merge.
    ServeHeatmap(req, res, LeavesHeatmap(state.Fabric()), kMaxLeaves * kMaxLeaves);
  });
  server.Get("/api/fabric", [&state](const httplib::Request&, httplib::Response& res) {
    res.set_content(FabricJson(state.Fabric()), "application/json");
  });
  pages->push_back({"/heatmap/leaves",
                    "leaf x leaf: NCCL bytes per second between leaves over the last 10 s "
                    "(the topology file and LLDP place nodes on leaves)"});
}

}  // namespace fabricscope::exporters
