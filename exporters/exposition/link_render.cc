#include "exporters/exposition/link_render.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "exporters/exposition/metric_util.h"
#include "exporters/heatmap/heatmap_svg.h"

namespace fabricscope::exporters {

void AddLinkFamilies(const LinkSnapshot& s, std::vector<prometheus::MetricFamily>* out) {
  auto period = MakeFamily(Metric::kStepPeriodSeconds);
  auto strength = MakeFamily(Metric::kStepPeriodStrengthRatio);
  auto anomalies = MakeFamily(Metric::kAnomalyEventsTotal);
  auto imbalance = MakeFamily(Metric::kTrafficImbalanceRatio);  // scope="rails"
  auto concentration = MakeFamily(Metric::kLossConcentrationRatio);
  auto recorder = MakeFamily(Metric::kFlightRecorderBytes);
  auto requests_dropped = MakeFamily(Metric::kFlightRecorderRequestsDroppedTotal);
  auto series = MakeFamily(Metric::kAggregatorLinkSeriesBytes);
  for (const LinkSnapshot::Node& n : s.nodes) {
    if (n.period) {
      AddValue(period, {{"node", n.name}}, n.period->period_seconds);
      AddValue(strength, {{"node", n.name}}, n.period->strength);
    }
    for (const auto& [kind, v] : n.anomalies_total) {
      AddValue(anomalies, {{"node", n.name}, {"kind", kind}}, static_cast<double>(v));
    }
    const char* direction[2] = {"transmit", "receive"};
    for (int d = 0; d < 2; ++d) {
      if (!std::isfinite(n.imbalance[d])) continue;
      AddValue(imbalance, {{"scope", "rails"}, {"node", n.name}, {"direction", direction[d]}},
               n.imbalance[d]);
    }
    if (n.flight_recorder_bytes) {
      AddValue(recorder, {{"node", n.name}}, static_cast<double>(*n.flight_recorder_bytes));
      AddValue(requests_dropped, {{"node", n.name}},
               static_cast<double>(n.flight_recorder_requests_dropped));
    }
  }
  for (const LinkSnapshot::PortLoss& p : s.loss_concentration) {
    AddValue(concentration,
             {{"node", p.node}, {"device", p.device}, {"port", absl::StrCat(p.port)}}, p.share);
  }
  AddValue(series, {}, static_cast<double>(s.series_bytes));
  for (prometheus::MetricFamily* f : {&period, &strength, &anomalies, &imbalance, &concentration,
                                      &recorder, &requests_dropped, &series}) {
    if (!f->metric.empty()) out->push_back(std::move(*f));
  }
}

std::string AnomaliesJson(const std::vector<LinkAnomaly>& anomalies) {
  std::string out = "{\"anomalies\":[";
  for (size_t i = 0; i < anomalies.size(); ++i) {
    const LinkAnomaly& a = anomalies[i];
    if (i > 0) out += ",";
    out += "{";
    AppendJsonField(&out, "node", a.node);
    out += ",";
    AppendJsonField(&out, "kind", a.kind);
    out += ",";
    AppendJsonField(&out, "time_unix_seconds", static_cast<double>(a.unix_ns) / 1e9);
    out += ",";
    AppendJsonField(&out, "value", a.value);
    out += ",";
    AppendJsonField(&out, "median", a.median);
    out += ",";
    AppendJsonField(&out, "scale", a.scale);
    out += ",";
    AppendJsonField(&out, "score", a.z);
    out += "}";
  }
  out += "]}";
  return out;
}

namespace {

void AppendLinks(std::string* out, const LossPatterns& p) {
  for (size_t i = 0; i < p.links.size(); ++i) {
    const LossPatterns::LinkShare& l = p.links[i];
    if (i) *out += ",";
    *out += "{";
    AppendJsonField(out, "node", l.node);
    *out += ",";
    AppendJsonField(out, "device", l.device);
    *out += ",";
    AppendJsonField(out, "port", l.port);
    *out += ",";
    AppendJsonField(out, "loss_events", static_cast<double>(l.events));
    *out += ",";
    AppendJsonField(out, "share", l.share);
    *out += "}";
  }
}

void AppendPrioritiesAndPeers(std::string* out, const LossPatterns& p) {
  *out += ",\"priorities\":[";
  for (size_t i = 0; i < p.priorities.size(); ++i) {
    if (i) *out += ",";
    *out += "{";
    AppendJsonField(out, "priority", static_cast<double>(p.priorities[i].priority));
    *out += ",";
    AppendJsonField(out, "loss_events", static_cast<double>(p.priorities[i].events));
    *out += ",";
    AppendJsonField(out, "share", p.priorities[i].share);
    *out += "}";
  }
  *out += "],\"peers\":[";
  for (size_t i = 0; i < p.peers.size(); ++i) {
    if (i) *out += ",";
    *out += "{";
    AppendJsonField(out, "src", p.peers[i].src);
    *out += ",";
    AppendJsonField(out, "dst", p.peers[i].dst);
    *out += ",";
    AppendJsonField(out, "loss_events", static_cast<double>(p.peers[i].events));
    *out += "}";
  }
  *out += "]";
}

void AppendNodes(std::string* out, const LossPatterns& p) {
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const LossPatterns::NodePhase& n = p.nodes[i];
    if (i) *out += ",";
    *out += "{";
    AppendJsonField(out, "node", n.node);
    *out += ",";
    AppendJsonField(out, "step_period_seconds", n.period_seconds ? *n.period_seconds : NAN);
    *out += ",";
    AppendJsonField(out, "captured_loss_events", static_cast<double>(n.captured_loss_events));
    if (n.rayleigh) {
      *out += ",";
      AppendJsonField(out, "phase_resultant", n.rayleigh->resultant);
      *out += ",";
      AppendJsonField(out, "rayleigh_p", n.rayleigh->p_value);
    }
    *out += "}";
  }
}

}  // namespace

std::string LossPatternsJson(const LossPatterns& p) {
  std::string out = "{";
  AppendJsonField(&out, "classification", p.classification);
  out += ",";
  AppendJsonField(&out, "rule", p.rule);
  out += ",\"reasons\":[";
  for (size_t i = 0; i < p.reasons.size(); ++i) {
    if (i) out += ",";
    AppendJsonString(&out, p.reasons[i]);
  }
  out += "],";
  AppendJsonField(&out, "total_loss_events", static_cast<double>(p.total));
  out += ",";
  AppendJsonField(&out, "gini", p.gini);
  out += ",\"links\":[";
  AppendLinks(&out, p);
  out += "],";
  AppendJsonField(&out, "total_priority_loss_events", static_cast<double>(p.priority_total));
  AppendPrioritiesAndPeers(&out, p);
  out += ",\"nodes\":[";
  AppendNodes(&out, p);
  out += "],\"node_wide\":[";
  for (size_t i = 0; i < p.node_wide.size(); ++i) {
    if (i) out += ",";
    out += "{";
    AppendJsonField(&out, "node", p.node_wide[i].node);
    out += ",";
    AppendJsonField(&out, "device", p.node_wide[i].device);
    out += ",";
    AppendJsonField(&out, "loss_events", static_cast<double>(p.node_wide[i].events));
    out += "}";
  }
  out += "]}";
  return out;
}

std::string FlightRecordingsJson(const std::vector<LinkRecording>& recordings) {
  std::string out = "{\"recordings\":[";
  for (size_t k = 0; k < recordings.size(); ++k) {
    const LinkRecording& rec = recordings[k];
    const v1::FlightRecording& r = rec.r;
    if (k > 0) out += ",";
    out += "{";
    AppendJsonField(&out, "node", rec.node);
    out += ",";
    AppendJsonField(&out, "device", rec.device);
    out += ",";
    AppendJsonField(&out, "port", rec.port);
    out += ",";
    AppendJsonField(&out, "reason", r.reason());
    out += ",";
    AppendJsonField(&out, "from_unix_seconds",
                    static_cast<double>(r.from_ns() + rec.offset_ns) / 1e9);
    out += ",";
    AppendJsonField(&out, "to_unix_seconds", static_cast<double>(r.to_ns() + rec.offset_ns) / 1e9);
    absl::StrAppend(&out, ",\"truncated\":", r.truncated() ? "true" : "false", ",\"samples\":[");
    const int count = std::min({r.time_ns_size(), r.interval_ns_size(), r.transmit_bytes_size(),
                                r.receive_bytes_size(), r.transmit_utilization_size(),
                                r.receive_utilization_size()});
    for (int i = 0; i < count; ++i) {
      if (i) out += ",";
      out += "{";
      AppendJsonField(&out, "time_unix_seconds",
                      static_cast<double>(r.time_ns(i) + rec.offset_ns) / 1e9);
      out += ",";
      AppendJsonField(&out, "interval_seconds", static_cast<double>(r.interval_ns(i)) / 1e9);
      out += ",";
      AppendJsonField(&out, "transmit_bytes", static_cast<double>(r.transmit_bytes(i)));
      out += ",";
      AppendJsonField(&out, "receive_bytes", static_cast<double>(r.receive_bytes(i)));
      out += ",";
      AppendJsonField(&out, "transmit_utilization", r.transmit_utilization(i));
      out += ",";
      AppendJsonField(&out, "receive_utilization", r.receive_utilization(i));
      out += "}";
    }
    out += "]}";
  }
  out += "]}";
  return out;
}

}  // namespace fabricscope::exporters
