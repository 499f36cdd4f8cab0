#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "exporters/analysis/heatmap_model.h"
#include "exporters/analysis/job_share.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace fabricscope::exporters {

class LinkAnalysis;

// A page listed by the heat-map index at /heatmap.
struct HeatmapPage {
  std::string path;
  std::string description;
};

// The heat maps and analysis endpoints of LinkAnalysis:
//   /heatmap/links   link x time utilization. Query: seconds=10 (window length, ending at the
//                    newest data) or from=/to= (Unix seconds, fractions allowed), bucket=1ms
//                    (any absl duration, rounded up to the stored resolution), node=NAME,
//                    direction=transmit|receive, format=svg|json (default svg), full=0|1 (an
//                    SVG keeps every column instead of fitting a browser window), job=ID (with
//                    `jobs`: the links of the job's nodes only, each cell the link's
//                    utilization times the job's share of its node's network bytes then,
//                    exporters/analysis/job_share.h; an unknown job is a 404).
//   /heatmap/nodes   node x node bytes from captured flows. Query: seconds=10, format=svg|json.
//   /api/anomalies   (?node=), /api/loss_patterns, /api/flight_recordings (?node=): JSON.
// Appends its heat maps to *pages for the index. `links` must outlive the server.
// The job's communicators and the recent transfers of each node it ran on (every
// communicator's there: the share's denominator); false when no such job is known.
using JobTransfers = std::function<bool(const std::string& job, std::set<uint64_t>* comms,
                                        std::map<std::string, NodeTransfers>* by_node)>;
void RegisterLinkRoutes(httplib::Server& server, const LinkAnalysis& links,
                        std::vector<HeatmapPage>* pages, JobTransfers jobs = nullptr);

// 400 with `msg` (and a newline) as plain text: a request parameter this server cannot take.
void BadRequest(httplib::Response& res, const std::string& msg);

// The query parameter `name` of req, "" when absent.
std::string QueryParam(const httplib::Request& req, const char* name);

// path?k=v&... with every key and value percent-encoded (a hostile key cannot break out of
// the link it is written into), in the order of `params`; just `path` without any.
std::string PathWithQuery(const std::string& path,
                          const std::multimap<std::string, std::string>& params);

// Answers with the model as SVG (the default) or JSON per ?format= (400 otherwise), its time
// columns merged (maximum) down to max_cells (SVG: at most 250,000, what a browser draws in about
// a second). An SVG's time columns are further merged to 1,000, a plot that fits a browser
// window, with a link to the same query plus full=1, which keeps them; full must be 0 or 1.
void ServeHeatmap(const httplib::Request& req, httplib::Response& res, HeatmapModel model,
                  size_t max_cells);

// 404 for a ?job= this server cannot answer: "no job "ID" with `what` is known here (see
// /api/jobs)", the same on every endpoint that takes ?job=.
void NoSuchJob(httplib::Response& res, const std::string& job, const char* what = "communicators");

// /heatmap: an HTML index of `pages` (the collective analysis adds /heatmap/ranks and
// /heatmap/collectives to the list when it registers them).
void RegisterHeatmapIndex(httplib::Server& server, std::vector<HeatmapPage> pages);

}  // namespace fabricscope::exporters
