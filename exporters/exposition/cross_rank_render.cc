#include "exporters/exposition/cross_rank_render.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectors/common/collective_vocabulary.h"
#include "exporters/exposition/metric_util.h"
#include "exporters/heatmap/heatmap_svg.h"

namespace fabricscope::exporters {
namespace {

// A figure that is -1 when unknown: null then.
void AppendKnown(std::string* out, double v) { AppendJsonNumber(out, v >= 0 ? v : NAN); }

// One rank of a slow instance: its figures and, when it has one, its flight recording.
void AppendRank(std::string& out, const RankEntry& r) {
  out += "{\"node\":";
  AppendJsonString(&out, r.node.str());
  absl::StrAppend(&out, ",\"rank\":", r.rank, ",\"cause\":\"", CollectiveCauseName(r.cause),
                  "\",\"port\":");
  AppendJsonString(&out, r.port.str());
  out += ",\"detail\":";
  AppendJsonString(&out, r.detail());
  out += ",\"start_unix_seconds\":";
  AppendJsonNumber(&out, static_cast<double>(r.start_unix_ns) / 1e9);
  out += ",\"duration_seconds\":";
  AppendJsonNumber(&out, static_cast<double>(r.end_unix_ns - r.start_unix_ns) / 1e9);
  absl::StrAppend(&out, ",\"slow\":", r.slow ? "true" : "false", ",\"loss_events\":", r.events);
  const PortFigures& f = r;
  absl::StrAppend(&out, ",\"port_bytes\":", f.port_bytes, ",\"own_bytes\":", f.own_bytes,
                  ",\"line_rate_bytes_per_second\":", f.line_rate,
                  ",\"transmit_busy_utilization\":");
  AppendJsonNumber(&out, f.tx_busy);
  absl::StrAppend(&out, ",\"window_loss_events\":", f.window_events, ",\"window_loss_rate\":");
  AppendJsonNumber(&out, f.window_rate);
  out += ",\"fabric_loss_median\":";
  AppendKnown(&out, f.fabric_ports > 0 ? f.fabric_median : -1.0);
  if (r.recording && (r.recording->time_ns_size() > 0 || r.recording->from_ns() != 0)) {
    const v1::FlightRecording& rec = *r.recording;
    const int64_t off = r.recording_offset_ns;
    absl::StrAppend(&out, ",\"recording\":{\"port_index\":", rec.port_index(), ",\"reason\":");
    AppendJsonString(&out, rec.reason());
    out += ",\"from_unix_seconds\":";
    AppendJsonNumber(&out, static_cast<double>(rec.from_ns() + off) / 1e9);
    out += ",\"to_unix_seconds\":";
    AppendJsonNumber(&out, static_cast<double>(rec.to_ns() + off) / 1e9);
    absl::StrAppend(&out, ",\"truncated\":", rec.truncated() ? "true" : "false", ",\"samples\":[");
    for (int s = 0; s < rec.time_ns_size(); ++s) {
      if (s > 0) out += ",";
      out += "{\"time_unix_seconds\":";
      AppendJsonNumber(&out, static_cast<double>(rec.time_ns(s) + off) / 1e9);
      out += ",\"interval_seconds\":";
      AppendJsonNumber(
          &out, s < rec.interval_ns_size() ? static_cast<double>(rec.interval_ns(s)) / 1e9 : NAN);
      absl::StrAppend(
          &out, ",\"transmit_bytes\":", s < rec.transmit_bytes_size() ? rec.transmit_bytes(s) : 0,
          ",\"receive_bytes\":", s < rec.receive_bytes_size() ? rec.receive_bytes(s) : 0,
          ",\"transmit_utilization\":");
      AppendJsonNumber(&out,
                       s < rec.transmit_utilization_size() ? rec.transmit_utilization(s) : NAN);
      out += ",\"receive_utilization\":";
      AppendJsonNumber(&out, s < rec.receive_utilization_size() ? rec.receive_utilization(s) : NAN);
      out += "}";
    }
    out += "]}";
  }
  out += "}";
}

// A job as the text names it: "8812 (llama-70b)", "8812" without a name.
std::string JobText(const v1::Job& j) {
  return j.name().empty() ? j.id() : absl::StrCat(j.id(), " (", j.name(), ")");
}

// The share of a node's proxy network bytes that another communicator moved before the sentence
// names it: a tenth; less is noise beside the collective's own traffic.
constexpr double kSharedSentenceShare = 0.1;

// ,"shared_with":[{comm, job, job_name, bytes, share}] of the communicators that shared `node`
// (its port sharers.port where that is known)
// while a collective of job `own_job` ran (PortFigures.sharers), share = bytes over the node's
// proxy network bytes then (own + every other communicator's, those not listed included:
// sharers.total); [] when none or nothing is known. Sets
// *sentence to "n3 also carried job 8812 (llama-70b): 61% of its network bytes during it" for
// the largest at a share of at least kSharedSentenceShare, "" otherwise; "n3 mlx5_2:1 also
// carried ..." when the shares are of one port (sharers.port).
void AppendSharedWith(std::string* out, std::string* sentence, const std::string& node,
                      const std::string& own_job, uint64_t own_bytes, const NodeSharers& sharers,
                      const JobOfComm& job_of) {
  sentence->clear();
  double listed = 0;
  for (const Sharer& s : sharers.top) listed += static_cast<double>(s.bytes);
  const double total =
      static_cast<double>(own_bytes) + std::max(listed, static_cast<double>(sharers.total));
  *out += ",\"shared_with\":[";
  if (own_bytes == 0 || total <= 0) {
    *out += "]";
    return;
  }
  bool first = true;
  for (const Sharer& s : sharers.top) {
    if (s.comm == 0 || s.bytes == 0) continue;
    const v1::Job j = job_of ? job_of(s.comm) : v1::Job{};
    const double share = static_cast<double>(s.bytes) / total;
    absl::StrAppend(out, first ? "" : ",", "{\"comm\":\"", common::CommLabel(s.comm),
                    "\",\"job\":");
    AppendJsonString(out, j.id());
    *out += ",\"job_name\":";
    AppendJsonString(out, j.name());
    absl::StrAppend(out, ",\"bytes\":", s.bytes, ",\"share\":");
    AppendJsonNumber(out, share);
    *out += "}";
    if (first && share >= kSharedSentenceShare) {
      const std::string label = common::CommLabel(s.comm);
      const std::string who =
          j.id().empty()      ? absl::StrCat("communicator ", label, " (job unknown)")
          : j.id() == own_job ? absl::StrCat("communicator ", label, " of the same job")
                              : absl::StrCat("job ", JobText(j));
      const std::string where =
          sharers.port.empty() ? node : absl::StrCat(node, " ", sharers.port.str());
      *sentence = absl::StrFormat("%s also carried %s: %.0f%% of its network bytes during it",
                                  where, who, 100 * share);
    }
    first = false;
  }
  *out += "]";
}

}  // namespace

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

std::string DiagnosisJson(std::vector<CommDiagnosis> v, const JobOfComm& job_of) {
  std::sort(v.begin(), v.end(), [](const CommDiagnosis& a, const CommDiagnosis& b) {
    return a.affected != b.affected ? a.affected > b.affected : a.comm < b.comm;
  });
  std::string out = "{\"communicators\":[";
  for (size_t i = 0; i < v.size(); ++i) {
    const CommDiagnosis& d = v[i];
    if (i > 0) out += ",";
    const std::string job = job_of ? job_of(d.comm).id() : std::string();
    absl::StrAppend(&out, "{\"comm\":\"", common::CommLabel(d.comm), "\",\"job\":");
    AppendJsonString(&out, job);
    absl::StrAppend(&out, ",\"cause\":\"", common::CollectiveCauseName(d.cause), "\",\"node\":");
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
    AppendKnown(&out, d.best_share);
    out += ",\"rule\":";
    AppendJsonString(&out, EvidenceRuleName(d.rule));
    out += ",\"evidence\":";
    AppendJsonString(&out, d.evidence);
    std::string shared;
    AppendSharedWith(&out, &shared, d.node, job, d.own_bytes, d.sharers, job_of);
    out += ",\"sentence\":";
    AppendJsonString(&out,
                     shared.empty()
                         ? d.sentence
                         : absl::StrCat(d.sentence, absl::EndsWith(d.sentence, ".") ? " " : ". ",
                                        "In its latest affected instance ", shared, "."));
    out += "}";
  }
  out += "]}\n";
  return out;
}

std::string SlowJson(const std::vector<CollectiveInstance>& v, const JobOfComm& job_of) {
  std::string out = "{\"collectives\":[";
  for (size_t i = 0; i < v.size(); ++i) {
    const CollectiveInstance& d = v[i];
    if (i > 0) out += ",";
    const std::string job = job_of ? job_of(d.key.comm).id() : std::string();
    absl::StrAppend(&out, "{\"comm\":\"", common::CommLabel(d.key.comm), "\",\"job\":");
    AppendJsonString(&out, job);
    out += ",\"func\":";
    AppendJsonString(&out, d.key.func.str());
    absl::StrAppend(&out, ",\"seq\":", d.key.seq, ",\"nranks\":", d.nranks, ",\"cause\":\"",
                    CollectiveCauseName(d.cause), "\",\"rule\":\"", EvidenceRuleName(d.rule),
                    "\",\"evidence\":");
    AppendJsonString(&out, d.evidence);
    out += ",\"path\":{\"busbw_bytes_per_second\":";
    AppendKnown(&out, d.busbw);
    out += ",\"line_rate_share\":";
    AppendKnown(&out, d.line_share);
    out += ",\"best_share\":";
    AppendKnown(&out, d.best_share);
    out += "}";
    out += ",\"skew_seconds\":";
    AppendJsonNumber(&out, static_cast<double>(d.skew_ns) / 1e9);
    out += ",\"duration_seconds\":";
    AppendJsonNumber(&out, static_cast<double>(d.max_duration_ns) / 1e9);
    out += ",\"bottleneck\":";
    if (d.bottleneck >= 0) {
      const RankEntry& b = d.ranks[static_cast<size_t>(d.bottleneck)];
      out += "{\"node\":";
      AppendJsonString(&out, b.node.str());
      absl::StrAppend(&out, ",\"rank\":", b.rank, ",\"port\":");
      AppendJsonString(&out, b.port.str());
      out += ",\"detail\":";
      AppendJsonString(&out, b.detail());
      std::string shared;
      AppendSharedWith(&out, &shared, b.node.str(), job, b.own_bytes, b.sharers, job_of);
      out += ",\"shared\":";
      AppendJsonString(&out, shared);
      out += "}";
    } else {
      out += "null";
    }
    out += ",\"ranks\":[";
    for (size_t k = 0; k < d.ranks.size(); ++k) {
      if (k > 0) out += ",";
      AppendRank(out, d.ranks[k]);
    }
    out += "]}";
  }
  out += "]}\n";
  return out;
}

}  // namespace fabricscope::exporters
