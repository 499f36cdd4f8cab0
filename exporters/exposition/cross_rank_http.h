#pragma once

// The cross-rank analysis's HTTP routes (exporters/exposition/cross_rank_http.cc).

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "exporters/analysis/cross_rank.h"
#include "exporters/exposition/link_http.h"

namespace httplib {
class Server;
}

namespace fabricscope::exporters {

// Where a request naming a communicator by its label (?comm=, 8 hex digits) must go: the
// owner's base URL ("http://HOST:PORT") when another aggregator owns it (sharded aggregators,
// issue 18), "" when this one answers.
using OwnerOfComm = std::function<std::string(const std::string& comm_label)>;

// /heatmap/collectives (?comm=, ?func=, ?instances=100, ?format=svg|json),
// /heatmap/ranks (?comm=, ?format=) and /api/collectives/slow (?limit=20, ?comm=, ?job=). Appends
// the heat maps to *pages for the index. `analysis` must outlive the server. With `owner`, a
// request whose ?comm= another aggregator owns is answered 307 with a Location at its owner (the
// same path and query), so that a client following redirects gets the owner's answer. With `jobs`,
// /api/collectives/slow names each instance's job and takes ?job= (only that job's communicators;
// an unknown job is a 404 that says so).
struct JobLookup {
  std::function<std::string(uint64_t comm_hash)> job_of;
  std::function<std::set<uint64_t>(const std::string& job)> comms_of;  // empty: unknown job
};
void RegisterCrossRankRoutes(httplib::Server& server, const CrossRankAnalysis& analysis,
                             std::vector<HeatmapPage>* pages, OwnerOfComm owner = nullptr,
                             JobLookup jobs = {});

}  // namespace fabricscope::exporters
