// The cross-rank analysis's JSON (CrossRankAnalysis::SlowJson) and HTTP routes
// (RegisterCrossRankRoutes), exporters/analysis/cross_rank.h.
#include "exporters/exposition/cross_rank_http.h"

#include <httplib.h>

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "exporters/analysis/cross_rank.h"
#include "exporters/exposition/cross_rank_render.h"
#include "exporters/exposition/link_http.h"
#include "exporters/heatmap/heatmap_svg.h"

namespace fabricscope::exporters {
namespace {

// A figure that is -1 when unknown: null then.
void AppendKnown(std::string* out, double v) { AppendJsonNumber(out, v >= 0 ? v : NAN); }

}  // namespace

std::vector<CrossRankAnalysis::Done> CrossRankAnalysis::SlowestRecent(
    size_t limit, const std::string& comm) const {
  auto longer = [](const Done& a, const Done& b) { return a.max_duration_ns > b.max_duration_ns; };
  std::vector<Done> v;
  for (const auto& sp : shards_) {
    // Each shard's `limit` longest (copied under its lock), then the longest of those.
    std::vector<const Done*> mine;
    absl::MutexLock lock(&sp->mu);
    for (const Done& d : sp->recent) {
      if (comm.empty() || common::CommLabel(d.key.comm) == comm) mine.push_back(&d);
    }
    std::stable_sort(mine.begin(), mine.end(),
                     [&](const Done* a, const Done* b) { return longer(*a, *b); });
    if (limit > 0 && mine.size() > limit) mine.resize(limit);
    for (const Done* d : mine) v.push_back(*d);
  }
  std::stable_sort(v.begin(), v.end(), longer);
  if (limit > 0 && v.size() > limit) v.resize(limit);
  return v;
}

std::string CrossRankAnalysis::SlowJson(size_t limit, const std::string& comm) const {
  const std::vector<Done> slowest = SlowestRecent(limit, comm);
  std::vector<const Done*> v;
  for (const Done& d : slowest) v.push_back(&d);
  std::string out = "{\"collectives\":[";
  for (size_t i = 0; i < v.size(); ++i) {
    const Done& d = *v[i];
    if (i > 0) out += ",";
    absl::StrAppend(&out, "{\"comm\":\"", common::CommLabel(d.key.comm), "\",\"func\":");
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
      out += "}";
    } else {
      out += "null";
    }
    out += ",\"ranks\":[";
    for (size_t k = 0; k < d.ranks.size(); ++k) {
      const RankEntry& r = d.ranks[k];
      if (k > 0) out += ",";
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
        absl::StrAppend(&out, ",\"truncated\":", rec.truncated() ? "true" : "false",
                        ",\"samples\":[");
        for (int s = 0; s < rec.time_ns_size(); ++s) {
          if (s > 0) out += ",";
          out += "{\"time_unix_seconds\":";
          AppendJsonNumber(&out, static_cast<double>(rec.time_ns(s) + off) / 1e9);
          out += ",\"interval_seconds\":";
          AppendJsonNumber(&out, s < rec.interval_ns_size()
                                     ? static_cast<double>(rec.interval_ns(s)) / 1e9
                                     : NAN);
          absl::StrAppend(
              &out,
              ",\"transmit_bytes\":", s < rec.transmit_bytes_size() ? rec.transmit_bytes(s) : 0,
              ",\"receive_bytes\":", s < rec.receive_bytes_size() ? rec.receive_bytes(s) : 0,
              ",\"transmit_utilization\":");
          AppendJsonNumber(&out,
                           s < rec.transmit_utilization_size() ? rec.transmit_utilization(s) : NAN);
          out += ",\"receive_utilization\":";
          AppendJsonNumber(&out,
                           s < rec.receive_utilization_size() ? rec.receive_utilization(s) : NAN);
          out += "}";
        }
        out += "]}";
      }
      out += "}";
    }
    out += "]}";
  }
  out += "]}\n";
  return out;
}

namespace {

// 307 to the owner of ?comm= when another aggregator owns it; true when answered so.
bool RedirectToOwner(const OwnerOfComm& owner, const httplib::Request& req,
                     httplib::Response& res) {
  const std::string comm = QueryParam(req, "comm");
  if (!owner || comm.empty()) return false;
  const std::string base = owner(comm);
  if (base.empty()) return false;
  std::string query;
  for (const auto& [key, value] : req.params) {
    absl::StrAppend(&query, query.empty() ? "?" : "&", httplib::detail::encode_query_param(key),
                    "=", httplib::detail::encode_query_param(value));
  }
  res.status = 307;  // RFC 9110 15.4.8: the client repeats the same request there
  res.set_header("Location", base + req.path + query);
  res.set_content("communicator " + comm + " is owned by " + base + "\n", "text/plain");
  return true;
}

}  // namespace

void RegisterCrossRankRoutes(httplib::Server& server, const CrossRankAnalysis& analysis,
                             std::vector<HeatmapPage>* pages, OwnerOfComm owner) {
  server.Get("/heatmap/collectives", [&analysis, owner](const httplib::Request& req,
                                                        httplib::Response& res) {
    if (RedirectToOwner(owner, req, res)) return;
    size_t n = 100;
    if (auto v = QueryParam(req, "instances");
        !v.empty() && (!absl::SimpleAtoi(v, &n) || n == 0 || n > 100000)) {
      res.status = 400;
      res.set_content("instances must be a count in [1, 100000]\n", "text/plain");
      return;
    }
    ServeHeatmap(req, res,
                 analysis.CollectivesHeatmap(QueryParam(req, "comm"), QueryParam(req, "func"), n),
                 1'000'000);
  });
  server.Get("/heatmap/ranks",
             [&analysis, owner](const httplib::Request& req, httplib::Response& res) {
               if (RedirectToOwner(owner, req, res)) return;
               ServeHeatmap(req, res, analysis.RanksHeatmap(QueryParam(req, "comm")), 1'000'000);
             });
  server.Get("/api/collectives/slow", [&analysis, owner](const httplib::Request& req,
                                                         httplib::Response& res) {
    if (RedirectToOwner(owner, req, res)) return;
    size_t limit = 20;
    if (auto v = QueryParam(req, "limit"); !v.empty() && !absl::SimpleAtoi(v, &limit)) {
      res.status = 400;
      res.set_content("limit must be a count\n", "text/plain");
      return;
    }
    res.set_content(analysis.SlowJson(limit, QueryParam(req, "comm")), "application/json");
  });
  server.Get("/api/diagnosis", [&analysis](const httplib::Request&, httplib::Response& res) {
    res.set_content(DiagnosisJson(analysis.Diagnoses()), "application/json");
  });
  pages->push_back({"/heatmap/collectives",
                    "collective duration per rank x sequence number (a compute straggler is the "
                    "dark row among bright ones: the other ranks' collectives wait for it and "
                    "run long); ?comm=, ?func=, "
                    "?instances=100, ?format=json"});
  pages->push_back({"/heatmap/ranks",
                    "rank x rank bytes of a communicator from the NCCL proxy (who talks to "
                    "whom); ?comm=, ?format=json"});
  pages->push_back({"/api/collectives/slow",
                    "JSON: the slowest recent collective instances, their cause, bottleneck "
                    "rank, evidence and flight-recorder samples; ?limit=20, ?comm="});
  pages->push_back({"/api/diagnosis",
                    "JSON: per communicator, what holds it back now, since when and what it "
                    "costs, in one sentence with numbers"});
}

}  // namespace fabricscope::exporters
