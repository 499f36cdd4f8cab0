// The cross-rank analysis's HTTP routes (RegisterCrossRankRoutes), exporters/analysis/cross_rank.h.
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

// 307 to the owner of ?comm= when another aggregator owns it; true when answered so.
bool RedirectToOwner(const OwnerOfComm& owner, const httplib::Request& req,
                     httplib::Response& res) {
  const std::string comm = QueryParam(req, "comm");
  if (!owner || comm.empty()) return false;
  const std::string base = owner(comm);
  if (base.empty()) return false;
  res.status = 307;  // RFC 9110 15.4.8: the client repeats the same request there
  res.set_header("Location", base + PathWithQuery(req.path, req.params));
  res.set_content("communicator " + comm + " is owned by " + base + "\n", "text/plain");
  return true;
}

}  // namespace

void RegisterCrossRankRoutes(httplib::Server& server, const CrossRankAnalysis& analysis,
                             std::vector<HeatmapPage>* pages, OwnerOfComm owner, JobLookup jobs) {
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
  server.Get("/api/collectives/slow", [&analysis, owner, jobs](const httplib::Request& req,
                                                               httplib::Response& res) {
    if (RedirectToOwner(owner, req, res)) return;
    size_t limit = 20;
    if (auto v = QueryParam(req, "limit"); !v.empty() && !absl::SimpleAtoi(v, &limit)) {
      res.status = 400;
      res.set_content("limit must be a count\n", "text/plain");
      return;
    }
    std::set<uint64_t> comms;
    const std::string job = QueryParam(req, "job");
    if (!job.empty()) {
      if (jobs.comms_of) comms = jobs.comms_of(job);
      if (comms.empty()) {
        res.status = 404;
        res.set_content("no job \"" + job + "\" with communicators is known here (see /api/jobs)\n",
                        "text/plain");
        return;
      }
    }
    res.set_content(
        SlowJson(analysis.Slowest(limit, QueryParam(req, "comm"), job.empty() ? nullptr : &comms),
                 jobs.job_of),
        "application/json");
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
                    "rank, evidence and flight-recorder samples; ?limit=20, ?comm=, ?job="});
  pages->push_back({"/api/diagnosis",
                    "JSON: per communicator, what holds it back now, since when and what it "
                    "costs, in one sentence with numbers"});
}

}  // namespace fabricscope::exporters
