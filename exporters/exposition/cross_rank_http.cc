// The cross-rank analysis's HTTP routes (RegisterCrossRankRoutes), exporters/analysis/cross_rank.h.
#include "exporters/exposition/cross_rank_http.h"

#include <httplib.h>

#include <algorithm>
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

// ?job=: the job's communicators in *comms, or null when the request names no job. An unknown
// job (or one without communicators yet) is answered 404; then returns false.
bool JobComms(const JobLookup& jobs, const httplib::Request& req, httplib::Response& res,
              std::set<uint64_t>* comms, const std::set<uint64_t>** filter) {
  *filter = nullptr;
  const std::string job = QueryParam(req, "job");
  if (job.empty()) return true;
  if (jobs.comms_of) *comms = jobs.comms_of(job);
  if (comms->empty()) {
    NoSuchJob(res, job);
    return false;
  }
  *filter = comms;
  return true;
}

// A heat map drawn for ?job= says so in its title.
HeatmapModel ForJob(HeatmapModel m, const httplib::Request& req) {
  if (const std::string job = QueryParam(req, "job"); !job.empty()) {
    absl::StrAppend(&m.title, " (job ", job, ")");
  }
  return m;
}

}  // namespace

void RegisterCrossRankRoutes(httplib::Server& server, const CrossRankAnalysis& analysis,
                             std::vector<HeatmapPage>* pages, OwnerOfComm owner, JobLookup jobs) {
  server.Get("/heatmap/collectives",
             [&analysis, owner, jobs](const httplib::Request& req, httplib::Response& res) {
               if (RedirectToOwner(owner, req, res)) return;
               size_t n = 100;
               if (auto v = QueryParam(req, "instances");
                   !v.empty() && (!absl::SimpleAtoi(v, &n) || n == 0 || n > 100000)) {
                 res.status = 400;
                 res.set_content("instances must be a count in [1, 100000]\n", "text/plain");
                 return;
               }
               std::set<uint64_t> comms;
               const std::set<uint64_t>* filter;
               if (!JobComms(jobs, req, res, &comms, &filter)) return;
               ServeHeatmap(req, res,
                            ForJob(analysis.CollectivesHeatmap(QueryParam(req, "comm"),
                                                               QueryParam(req, "func"), n, filter),
                                   req),
                            1'000'000);
             });
  server.Get("/heatmap/ranks", [&analysis, owner, jobs](const httplib::Request& req,
                                                        httplib::Response& res) {
    if (RedirectToOwner(owner, req, res)) return;
    std::set<uint64_t> comms;
    const std::set<uint64_t>* filter;
    if (!JobComms(jobs, req, res, &comms, &filter)) return;
    ServeHeatmap(req, res, ForJob(analysis.RanksHeatmap(QueryParam(req, "comm"), filter), req),
                 1'000'000);
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
    const std::set<uint64_t>* filter;
    if (!JobComms(jobs, req, res, &comms, &filter)) return;
    res.set_content(SlowJson(analysis.Slowest(limit, QueryParam(req, "comm"), filter), jobs.job_of),
                    "application/json");
  });
  server.Get("/api/diagnosis", [&analysis, jobs](const httplib::Request& req,
                                                 httplib::Response& res) {
    std::set<uint64_t> comms;
    const std::set<uint64_t>* filter;
    if (!JobComms(jobs, req, res, &comms, &filter)) return;
    std::vector<CommDiagnosis> v = analysis.Diagnoses();
    if (filter != nullptr) {
      v.erase(std::remove_if(v.begin(), v.end(),
                             [filter](const CommDiagnosis& d) { return !filter->count(d.comm); }),
              v.end());
    }
    res.set_content(DiagnosisJson(std::move(v), jobs.job_of), "application/json");
  });
  pages->push_back({"/heatmap/collectives",
                    "collective duration per rank x sequence number (a compute straggler is the "
                    "dark row among bright ones: the other ranks' collectives wait for it and "
                    "run long); ?comm=, ?func=, ?job=, "
                    "?instances=100, ?format=json"});
  pages->push_back({"/heatmap/ranks",
                    "rank x rank bytes of a communicator from the NCCL proxy (who talks to "
                    "whom); ?comm=, ?job=, ?format=json"});
  pages->push_back({"/api/collectives/slow",
                    "JSON: the slowest recent collective instances, their job, cause, bottleneck "
                    "rank, evidence and flight-recorder samples; ?limit=20, ?comm=, ?job="});
  pages->push_back({"/api/diagnosis",
                    "JSON: per communicator, its job, what holds it back now, since when and "
                    "what it costs, in one sentence with numbers; ?job="});
}

}  // namespace fabricscope::exporters
