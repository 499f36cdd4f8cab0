#include "exporters/history/history_details.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectors/common/collective_vocabulary.h"
#include "collectors/common/json_text.h"

namespace fabricscope::exporters {

using common::AppendJsonField;
using common::AppendJsonString;

namespace {

std::string HistoryObject(const std::string& body) { return absl::StrCat("{", body, "}"); }

void HistoryInt(std::string* out, const char* key, int64_t v) {
  absl::StrAppend(out, out->empty() ? "" : ",", "\"", key, "\":", v);
}
void HistoryUint(std::string* out, const char* key, uint64_t v) {
  absl::StrAppend(out, out->empty() ? "" : ",", "\"", key, "\":", v);
}
void HistoryNum(std::string* out, const char* key, double v) {
  if (!out->empty()) out->push_back(',');
  AppendJsonField(out, key, v);  // null when not finite
}
void HistoryStr(std::string* out, const char* key, absl::string_view v) {
  if (!out->empty()) out->push_back(',');
  AppendJsonField(out, key, v.substr(0, kMaxDetailStringBytes));
}

}  // namespace

HistoryEvent MakeHistoryEvent(int64_t unix_ns, int64_t end_unix_ns, std::string kind,
                              std::string node, uint64_t comm, std::string job,
                              std::string detail_json) {
  HistoryEvent e;
  e.unix_ns = unix_ns;
  e.end_unix_ns = end_unix_ns;
  e.kind = std::move(kind);
  e.node = std::move(node);
  e.comm = comm;
  e.job = std::move(job);
  e.detail_json = std::move(detail_json);
  return e;
}

std::string WithSimilar(std::string detail, uint32_t n) {
  if (detail.size() < 2 || detail.back() != '}') return detail;
  detail.pop_back();
  absl::StrAppend(&detail, detail.size() > 1 ? "," : "", "\"similar_in_second\":", n, "}");
  return detail;
}

std::string HistoryCollectiveDetail(const v1::Collective& c, const std::vector<std::string>& labels,
                                    int64_t unix_offset_ns) {
  const v1::CollectiveAnalysis& a = c.analysis();
  std::string d;
  HistoryStr(&d, "func", c.func());
  HistoryUint(&d, "seq", c.seq());
  HistoryInt(&d, "rank", c.rank());
  HistoryInt(&d, "nranks", c.nranks());
  HistoryInt(&d, "pid", c.pid());
  HistoryUint(&d, "bytes", c.bytes());
  HistoryNum(&d, "busbw_bytes_per_second", c.busbw_bytes_per_second());
  HistoryNum(&d, "duration_seconds", c.duration_seconds());
  HistoryStr(&d, "cause", common::CollectiveCauseName(a.cause()));
  HistoryStr(&d, "evidence", a.detail());
  const bool known = a.port_index() >= 0 && static_cast<size_t>(a.port_index()) < labels.size();
  HistoryStr(&d, "port", known ? labels[static_cast<size_t>(a.port_index())] : "");
  absl::StrAppend(&d, ",\"slow\":", a.slow() ? "true" : "false");
  HistoryNum(&d, "p99_seconds", a.p99_seconds());
  HistoryUint(&d, "own_bytes", a.own_bytes());
  HistoryUint(&d, "sharers_bytes", a.sharers_bytes_total());
  if (c.channel_spans_size() > 0) {
    d += ",\"channels\":[";
    bool first = true;
    for (int i = 0; i < c.channel_spans_size() && i < 64; ++i) {
      const v1::ChannelSpan& ch = c.channel_spans(i);
      int64_t start = 0, end = 0;
      if (!HistoryAdd(ch.start_ns(), unix_offset_ns, &start) ||
          !HistoryAdd(ch.end_ns(), unix_offset_ns, &end)) {
        continue;
      }
      absl::StrAppend(&d, first ? "" : ",", "[", ch.channel(), ",", start, ",", end, "]");
      first = false;
    }
    d += "]";
  }
  return HistoryObject(d);
}

std::string HistoryInstanceDetail(const CollectiveInstance& inst) {
  std::string d;
  HistoryStr(&d, "func", inst.key.func.str());
  HistoryUint(&d, "seq", inst.key.seq);
  HistoryInt(&d, "nranks", inst.nranks);
  HistoryStr(&d, "cause", common::CollectiveCauseName(inst.cause));
  HistoryStr(&d, "rule", EvidenceRuleName(inst.rule));
  HistoryStr(&d, "evidence", inst.evidence);
  HistoryNum(&d, "busbw_bytes_per_second", inst.busbw);
  HistoryInt(&d, "skew_ns", inst.skew_ns);
  HistoryInt(&d, "max_duration_ns", inst.max_duration_ns);
  const bool has = inst.bottleneck >= 0 && static_cast<size_t>(inst.bottleneck) < inst.ranks.size();
  const RankEntry* b = has ? &inst.ranks[static_cast<size_t>(inst.bottleneck)] : nullptr;
  HistoryInt(&d, "bottleneck_rank", b != nullptr ? b->rank : -1);
  HistoryStr(&d, "bottleneck_node", b != nullptr ? b->node.str() : "");
  HistoryStr(&d, "bottleneck_port", b != nullptr ? b->port.str() : "");
  d += ",\"ranks\":[";
  const size_t n = std::min(inst.ranks.size(), kMaxInstanceRanks);
  for (size_t i = 0; i < n; ++i) {
    const RankEntry& r = inst.ranks[i];
    absl::StrAppend(&d, i > 0 ? "," : "", "[", r.rank, ",");
    AppendJsonString(&d, r.node.str());
    absl::StrAppend(&d, ",", r.start_unix_ns, ",", r.end_unix_ns, "]");
  }
  d += "]";
  HistoryUint(&d, "ranks_omitted", inst.ranks.size() - n);
  return HistoryObject(d);
}

std::string HistoryDiagnosisDetail(const CommDiagnosis& g, bool ended) {
  std::string d;
  HistoryStr(&d, "cause", common::CollectiveCauseName(g.cause));
  HistoryStr(&d, "rule", EvidenceRuleName(g.rule));
  HistoryStr(&d, "port", g.port);
  HistoryInt(&d, "rank", g.rank);
  HistoryStr(&d, "func", g.func);
  HistoryStr(&d, "sentence", g.sentence);
  HistoryUint(&d, "affected", g.affected);
  HistoryUint(&d, "instances", g.instances);
  HistoryNum(&d, "p90_seconds", g.p90_s);
  HistoryNum(&d, "baseline_p90_seconds", g.baseline_p90_s);
  // The cost as the diagnosis states it (exporters/analysis/diagnosis.h): p90 over the baseline's
  // p90, minus 1; null without a baseline.
  HistoryNum(&d, "cost_ratio", g.baseline_p90_s > 0 ? g.p90_s / g.baseline_p90_s - 1 : NAN);
  if (ended) absl::StrAppend(&d, ",\"ended\":true");
  return HistoryObject(d);
}

std::string HistoryMicroburstDetail(const std::string& port, const char* direction,
                                    double peak_utilization, uint64_t bytes) {
  std::string d;
  HistoryStr(&d, "port", port);
  HistoryStr(&d, "direction", direction);
  HistoryNum(&d, "peak_utilization", peak_utilization);
  HistoryUint(&d, "bytes", bytes);
  return HistoryObject(d);
}

std::string HistoryLinkDetail(const std::string& port, const std::string& what, uint64_t old_value,
                              uint64_t new_value) {
  std::string d;
  HistoryStr(&d, "port", port);
  HistoryStr(&d, "what", what);
  HistoryUint(&d, "old", old_value);
  HistoryUint(&d, "new", new_value);
  return HistoryObject(d);
}

std::string HistoryLossDetail(const std::string& port, uint64_t events, uint64_t captured) {
  std::string d;
  HistoryStr(&d, "port", port);
  HistoryUint(&d, "loss_events", events);
  HistoryUint(&d, "captured_loss_events", captured);
  return HistoryObject(d);
}

std::string HistoryJoinedDetail(const v1::Hello& hello) {
  std::string d;
  HistoryStr(&d, "agent_version", hello.agent_version());
  HistoryStr(&d, "instance", absl::StrFormat("%016x", hello.instance_id()));
  HistoryInt(&d, "ports", hello.ports_size());
  return HistoryObject(d);
}

}  // namespace fabricscope::exporters
