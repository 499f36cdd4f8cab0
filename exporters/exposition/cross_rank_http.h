#pragma once

// The cross-rank analysis's HTTP routes (exporters/exposition/cross_rank_http.cc).

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "exporters/analysis/cross_rank.h"
#include "exporters/exposition/cross_rank_render.h"
#include "exporters/exposition/link_http.h"

namespace httplib {
class Server;
}

namespace fabricscope::exporters {

// Where a request naming a communicator by its label (?comm=, 8 hex digits) must go: the
// owner's base URL ("http://HOST:PORT") when another aggregator owns it (sharded aggregators,
// issue 18), "" when this one answers.
using OwnerOfComm = std::function<std::string(const std::string& comm_label)>;

// /heatmap/collectives (?comm=, ?func=, ?instances=100, ?format=svg|json, ?job=),
// /heatmap/ranks (?comm=, ?format=, ?job=), /api/collectives/slow (?limit=20, ?comm=, ?job=) and
// /api/diagnosis (?job=). Appends the heat maps to *pages for the index. `analysis` must outlive
// the server. With `owner`, a request whose ?comm= another aggregator owns is answered 307 with a
// Location at its owner (the same path and query), so that a client following redirects gets the
// owner's answer. With `jobs`, the JSON names each communicator's job and ?job= keeps that job's
// communicators only (a heat map picks among them and says the job in its title); a job this
// aggregator does not know is a 404 that says so. Without `jobs` every ?job= is such a 404.
struct JobLookup {
  JobOfComm job_of;  // exporters/exposition/cross_rank_render.h
  std::function<std::set<uint64_t>(const std::string& job)> comms_of;  // empty: unknown job
};
void RegisterCrossRankRoutes(httplib::Server& server, const CrossRankAnalysis& analysis,
                             std::vector<HeatmapPage>* pages, OwnerOfComm owner = nullptr,
                             JobLookup jobs = {});

}  // namespace fabricscope::exporters
