// The cross-rank analysis's HTTP routes (exporters/cross_rank.h RegisterCrossRankRoutes).

#include <httplib.h>

#include "absl/strings/numbers.h"
#include "exporters/cross_rank.h"
#include "exporters/heatmap_http.h"

namespace fabricscope::exporters {

namespace {

std::string Param(const httplib::Request& req, const char* name) {
  return req.has_param(name) ? req.get_param_value(name) : "";
}

void ServeModel(const httplib::Request& req, httplib::Response& res, HeatmapModel model) {
  DownsampleHeatmap(&model, 1'000'000);
  const std::string format = Param(req, "format");
  if (format == "json") {
    res.set_content(RenderHeatmapJson(model), "application/json");
  } else if (format.empty() || format == "svg") {
    res.set_content(RenderHeatmapSvg(model), "image/svg+xml");
  } else {
    res.status = 400;
    res.set_content("format must be svg or json\n", "text/plain");
  }
}

}  // namespace

void RegisterCrossRankRoutes(httplib::Server& server, const CrossRankAnalysis& analysis,
                             std::vector<HeatmapPage>* pages) {
  server.Get("/heatmap/collectives", [&analysis](const httplib::Request& req,
                                                 httplib::Response& res) {
    size_t n = 100;
    if (auto v = Param(req, "instances");
        !v.empty() && (!absl::SimpleAtoi(v, &n) || n == 0 || n > 100000)) {
      res.status = 400;
      res.set_content("instances must be a count in [1, 100000]\n", "text/plain");
      return;
    }
    ServeModel(req, res, analysis.CollectivesHeatmap(Param(req, "comm"), Param(req, "func"), n));
  });
  server.Get("/heatmap/ranks", [&analysis](const httplib::Request& req, httplib::Response& res) {
    ServeModel(req, res, analysis.RanksHeatmap(Param(req, "comm")));
  });
  server.Get("/api/collectives/slow",
             [&analysis](const httplib::Request& req, httplib::Response& res) {
               size_t limit = 20;
               if (auto v = Param(req, "limit"); !v.empty() && !absl::SimpleAtoi(v, &limit)) {
                 res.status = 400;
                 res.set_content("limit must be a count\n", "text/plain");
                 return;
               }
               res.set_content(analysis.SlowJson(limit), "application/json");
             });
  server.Get("/api/diagnosis", [&analysis](const httplib::Request&, httplib::Response& res) {
    res.set_content(analysis.DiagnosisJson(), "application/json");
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
                    "rank, evidence and flight-recorder samples; ?limit=20"});
  pages->push_back({"/api/diagnosis",
                    "JSON: per communicator, what holds it back now, since when and what it "
                    "costs, in one sentence with numbers"});
}

}  // namespace fabricscope::exporters
