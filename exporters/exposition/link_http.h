#pragma once

#include <string>
#include <vector>

namespace httplib {
class Server;
}

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
//                    direction=transmit|receive, format=svg|json (default svg).
//   /heatmap/nodes   node x node bytes from captured flows. Query: seconds=10, format=svg|json.
//   /api/anomalies   (?node=), /api/loss_patterns, /api/flight_recordings (?node=): JSON.
// Appends its heat maps to *pages for the index. `links` must outlive the server.
void RegisterLinkRoutes(httplib::Server& server, const LinkAnalysis& links,
                        std::vector<HeatmapPage>* pages);

// /heatmap: an HTML index of `pages` (the collective analysis adds /heatmap/ranks and
// /heatmap/collectives to the list when it registers them).
void RegisterHeatmapIndex(httplib::Server& server, std::vector<HeatmapPage> pages);

}  // namespace fabricscope::exporters
