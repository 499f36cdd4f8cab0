#pragma once

// The cross-rank analysis's HTTP routes (exporters/exposition/cross_rank_http.cc).

#include <functional>
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
// /heatmap/ranks (?comm=, ?format=) and /api/collectives/slow (?limit=20, ?comm=). Appends the
// heat maps to *pages for the index. `analysis` must outlive the server. With `owner`, a request
// whose ?comm= another aggregator owns is answered 307 with a Location at its owner (the same
// path and query), so that a client following redirects gets the owner's answer.
void RegisterCrossRankRoutes(httplib::Server& server, const CrossRankAnalysis& analysis,
                             std::vector<HeatmapPage>* pages, OwnerOfComm owner = nullptr);

}  // namespace fabricscope::exporters
