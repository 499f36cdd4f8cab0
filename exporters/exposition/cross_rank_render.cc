#include "exporters/exposition/cross_rank_render.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "exporters/exposition/metric_util.h"
#include "exporters/heatmap/heatmap_svg.h"

namespace fabricscope::exporters {

void AddCrossRankFamilies(const CrossRankSnapshot& s, std::vector<prometheus::MetricFamily>* out) {
  auto skew = MakeFamily(Metric::kCollectiveArrivalSkewSeconds);
  if (s.instances > 0) {
    v1::Histogram h;
    for (double bound : ArrivalSkewBounds()) h.add_upper_bounds(bound);
    for (uint64_t c : s.skew_buckets) h.add_bucket_counts(c);
    h.set_sum(s.skew_sum);
    h.set_count(s.instances);
    AddHistogram(skew, {}, h);
  }
  auto causes = MakeFamily(Metric::kCollectivesByCauseTotal);
  for (const common::CollectiveCauseInfo& c : common::CollectiveCauses()) {
    if (!c.aggregator) continue;
    AddValue(causes, {{"cause", c.name}}, static_cast<double>(s.by_cause[c.cause]));
  }
  auto score = MakeFamily(Metric::kStragglerScore);
  for (const CrossRankSnapshot::Score& sc : s.scores) {
    AddValue(score, {{"node", sc.node}, {"rank", absl::StrCat(sc.rank)}}, sc.score);
  }
  auto share = MakeFamily(Metric::kCollectiveNetworkShareRatio);
  for (const auto& [node, v] : s.network_shares) AddValue(share, {{"node", node}}, v);
  auto overlap = MakeFamily(Metric::kPortMicroburstOverlapRatio);
  for (const CrossRankSnapshot::Overlap& o : s.overlaps) {
    AddValue(overlap, {{"node", o.node}, {"device", o.device}, {"port", absl::StrCat(o.port)}},
             o.ratio);
  }
  static_assert(kMaxRanksPerInstance == 131072,
                "the help of kCollectiveAnalysesDroppedTotal in metric_catalog.inc names it");
  auto dropped = MakeFamily(Metric::kCollectiveAnalysesDroppedTotal);
  AddValue(dropped, {}, static_cast<double>(s.dropped_analyses));
  auto evicted = MakeFamily(Metric::kCollectiveInstancesEvictedTotal);
  AddValue(evicted, {}, static_cast<double>(s.evicted));
  auto pending = MakeFamily(Metric::kCollectiveInstancesPending);
  AddValue(pending, {}, static_cast<double>(s.pending));
  for (auto* f : {&skew, &causes, &score, &share, &overlap, &evicted, &dropped, &pending}) {
    if (!f->metric.empty()) out->push_back(std::move(*f));
  }
  AddDiagnosisFamilies(s.diagnoses, out);
}

void AddDiagnosisFamilies(const std::vector<CommDiagnosis>& v,
                          std::vector<prometheus::MetricFamily>* out) {
  auto info = MakeFamily(Metric::kDiagnosisInfo);
  auto cost = MakeFamily(Metric::kDiagnosisCostRatio);
  for (const CommDiagnosis& d : v) {
    const std::string label = common::CommLabel(d.comm);
    AddValue(info,
             {{"comm", label},
              {"cause", common::CollectiveCauseName(d.cause)},
              {"node", d.node},
              {"rank", d.rank >= 0 ? absl::StrCat(d.rank) : ""},
              {"port", d.port}},
             1.0);
    if (d.affected > 0 && d.baseline_p90_s > 0) {
      AddValue(cost, {{"comm", label}}, d.p90_s / d.baseline_p90_s - 1);
    }
  }
  for (auto* f : {&info, &cost}) {
    if (!f->metric.empty()) out->push_back(std::move(*f));
  }
}

std::string DiagnosisJson(std::vector<CommDiagnosis> v) {
  std::sort(v.begin(), v.end(), [](const CommDiagnosis& a, const CommDiagnosis& b) {
    return a.affected != b.affected ? a.affected > b.affected : a.comm < b.comm;
  });
  std::string out = "{\"communicators\":[";
  for (size_t i = 0; i < v.size(); ++i) {
    const CommDiagnosis& d = v[i];
    if (i > 0) out += ",";
    absl::StrAppend(&out, "{\"comm\":\"", common::CommLabel(d.comm), "\",\"cause\":\"",
                    common::CollectiveCauseName(d.cause), "\",\"node\":");
    AppendJsonString(&out, d.node);
    absl::StrAppend(&out, ",\"rank\":", d.rank, ",\"port\":");
    AppendJsonString(&out, d.port);
    out += ",\"func\":";
    AppendJsonString(&out, d.func);
    out += ",\"since_unix_seconds\":";
    if (d.affected > 0) {
      AppendJsonNumber(&out, static_cast<double>(d.since_unix_ns) / 1e9);
    } else {
      out += "null";
    }
    absl::StrAppend(&out, ",\"affected\":", d.affected, ",\"instances\":", d.instances,
                    ",\"p90_seconds\":");
    AppendJsonNumber(&out, d.p90_s);
    out += ",\"baseline_p90_seconds\":";
    if (d.baseline_p90_s > 0) {
      AppendJsonNumber(&out, d.baseline_p90_s);
      out += ",\"cost_ratio\":";
      AppendJsonNumber(&out, d.p90_s / d.baseline_p90_s - 1);
    } else {
      out += "null,\"cost_ratio\":null";
    }
    out += ",\"best_share\":";
    AppendJsonNumber(&out, d.best_share >= 0 ? d.best_share : NAN);
    out += ",\"rule\":";
    AppendJsonString(&out, EvidenceRuleName(d.rule));
    out += ",\"evidence\":";
    AppendJsonString(&out, d.evidence);
    out += ",\"sentence\":";
    AppendJsonString(&out, d.sentence);
    out += "}";
  }
  out += "]}\n";
  return out;
}

}  // namespace fabricscope::exporters
