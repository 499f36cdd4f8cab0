#include "exporters/exposition/link_http.h"

#include <httplib.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "exporters/analysis/link_analysis.h"
#include "exporters/exposition/link_render.h"
#include "exporters/heatmap/heatmap_svg.h"

namespace fabricscope::exporters {

std::string QueryParam(const httplib::Request& req, const char* name) {
  return req.has_param(name) ? req.get_param_value(name) : "";
}

std::string PathWithQuery(const std::string& path,
                          const std::multimap<std::string, std::string>& params) {
  std::string out = path;
  for (const auto& [key, value] : params) {
    absl::StrAppend(&out, out.size() == path.size() ? "?" : "&",
                    httplib::detail::encode_query_param(key), "=",
                    httplib::detail::encode_query_param(value));
  }
  return out;
}

namespace {

// SVG is capped lower than JSON: one rect per run of equal color is ~70 bytes, and a browser
// draws 250,000 of them (~17 MB) in about a second; 1,000,000 distinct cells make ~70 MB.
constexpr size_t kSvgMaxCells = 250'000;
// Time columns of an SVG opened in a browser: at least 1 px each, 1,000 of them with the row
// labels and legend fit a 1,400 px window (RenderHeatmapSvg; 10 s at 1 ms were 10,000 columns:
// 10,238 px wide, 1.3 s of it and no legend in view). ?full=1 keeps every column up to
// kSvgMaxCells.
constexpr size_t kSvgViewportCols = 1'000;

}  // namespace

void BadRequest(httplib::Response& res, const std::string& msg) {
  res.status = 400;
  res.set_content(msg + "\n", "text/plain");
}

void ServeHeatmap(const httplib::Request& req, httplib::Response& res, HeatmapModel model,
                  size_t max_cells) {
  const std::string format = QueryParam(req, "format");
  const std::string full = QueryParam(req, "full");
  if (!full.empty() && full != "0" && full != "1") {
    return BadRequest(res, "full must be 0 or 1");
  }
  if (format == "json") {
    DownsampleHeatmap(&model, max_cells);
    res.set_content(RenderHeatmapJson(model), "application/json");
  } else if (format.empty() || format == "svg") {
    DownsampleHeatmap(&model, std::min(max_cells, kSvgMaxCells));
    std::string href;
    if (full != "1" && model.col_labels.empty() && model.cols > kSvgViewportCols) {
      DownsampleHeatmap(&model, model.rows.size() * kSvgViewportCols);
      httplib::Params params = req.params;
      params.erase("full");
      params.emplace("full", "1");
      href = PathWithQuery(req.path, params);
    }
    res.set_content(RenderHeatmapSvg(model, href), "image/svg+xml");
  } else {
    BadRequest(res, "format must be svg or json");
  }
}

namespace {

bool ParseSeconds(const std::string& v, double* out) {
  return absl::SimpleAtod(v, out) && std::isfinite(*out) && *out > 0 && *out <= 86400;
}

}  // namespace

void RegisterLinkRoutes(httplib::Server& server, const LinkAnalysis& links,
                        std::vector<HeatmapPage>* pages, JobTransfers jobs) {
  server.Get("/heatmap/links", [&links, jobs](const httplib::Request& req, httplib::Response& res) {
    LinkAnalysis::LinkQuery q;
    q.seconds = links.options().history_seconds;
    if (auto v = QueryParam(req, "seconds"); !v.empty() && !ParseSeconds(v, &q.seconds)) {
      return BadRequest(res, "seconds must be a number in (0, 86400]");
    }
    for (const auto& [key, dst] : {std::pair<const char*, int64_t*>{"from", &q.from_unix_ns},
                                   std::pair<const char*, int64_t*>{"to", &q.to_unix_ns}}) {
      if (auto v = QueryParam(req, key); !v.empty()) {
        double s = 0;
        // At most 4e9 s (the year 2096): in nanoseconds it still fits an int64 with room for
        // the span arithmetic (converting a larger double is undefined behaviour).
        if (!absl::SimpleAtod(v, &s) || !(s > 0) || s > 4e9) {
          return BadRequest(res, absl::StrCat(key, " must be Unix seconds up to 4e9"));
        }
        *dst = static_cast<int64_t>(s * 1e9);
      }
    }
    if (q.from_unix_ns > 0 && q.to_unix_ns > 0 && q.to_unix_ns <= q.from_unix_ns) {
      return BadRequest(res, "to must be after from (Unix seconds)");
    }
    if (auto v = QueryParam(req, "bucket"); !v.empty()) {
      absl::Duration d;
      if (!absl::ParseDuration(v, &d) || d <= absl::ZeroDuration() || d > absl::Hours(1)) {
        return BadRequest(res, "bucket must be a duration such as 1ms, 100us, 1s");
      }
      q.bucket_ns = absl::ToInt64Nanoseconds(d);
    }
    q.node = QueryParam(req, "node");
    q.direction = QueryParam(req, "direction");
    if (!q.direction.empty() && q.direction != "transmit" && q.direction != "receive") {
      return BadRequest(res, "direction must be transmit or receive");
    }
    const std::string job = QueryParam(req, "job");
    if (job.empty())
      return ServeHeatmap(req, res, links.LinksHeatmap(q), links.options().max_cells);
    std::set<uint64_t> comms;
    std::map<std::string, NodeTransfers> by_node;
    if (!jobs || !jobs(job, &comms, &by_node) || by_node.empty()) {
      return NoSuchJob(res, job, "nodes");
    }
    for (const auto& [node, transfers] : by_node) q.nodes.insert(node);
    HeatmapModel m = links.LinksHeatmap(q);
    const size_t all_rows = m.rows.size();
    WeighByJob(&m, by_node, comms);
    absl::StrAppend(&m.title, ", job ", job, "'s share");
    m.value_label = "utilization x the job's share of the link's network bytes";
    absl::StrAppend(&m.note, m.note.empty() ? "" : "; ", m.rows.size(), " of ", all_rows,
                    " links of the job's nodes carried its traffic; each cell is the link's "
                    "utilization times the job's share of the NCCL network bytes on it then "
                    "(a process's bytes on the RDMA ports of its queue pairs; node-wide where "
                    "those are unknown; blank where the node's records do not reach back)");
    ServeHeatmap(req, res, std::move(m), links.options().max_cells);
  });
  server.Get("/heatmap/nodes", [&links, jobs](const httplib::Request& req, httplib::Response& res) {
    double seconds = links.options().history_seconds;
    if (auto v = QueryParam(req, "seconds"); !v.empty() && !ParseSeconds(v, &seconds)) {
      return BadRequest(res, "seconds must be a number in (0, 86400]");
    }
    const std::string job = QueryParam(req, "job");
    if (job.empty()) {
      return ServeHeatmap(req, res, links.NodesHeatmap(seconds), links.options().max_cells);
    }
    std::set<uint64_t> comms;
    std::map<std::string, NodeTransfers> by_node;
    if (!jobs || !jobs(job, &comms, &by_node) || by_node.empty()) {
      return NoSuchJob(res, job, "nodes");
    }
    std::set<std::string> nodes;
    for (const auto& [node, transfers] : by_node) nodes.insert(node);
    HeatmapModel m = links.NodesHeatmap(seconds, nodes);
    absl::StrAppend(&m.title, ", between job ", job, "'s ", nodes.size(),
                    nodes.size() == 1 ? " node" : " nodes");
    absl::StrAppend(&m.note, m.note.empty() ? "" : "; ",
                    "captured flows carry no job: these are all the bytes between the job's nodes, "
                    "its own and any other job's on them");
    ServeHeatmap(req, res, std::move(m), links.options().max_cells);
  });
  server.Get("/api/anomalies", [&links](const httplib::Request& req, httplib::Response& res) {
    res.set_content(AnomaliesJson(links.Anomalies(QueryParam(req, "node"))), "application/json");
  });
  server.Get("/api/loss_patterns", [&links](const httplib::Request&, httplib::Response& res) {
    res.set_content(LossPatternsJson(links.Patterns()), "application/json");
  });
  server.Get(
      "/api/flight_recordings", [&links](const httplib::Request& req, httplib::Response& res) {
        res.set_content(FlightRecordingsJson(links.FlightRecordings(QueryParam(req, "node"))),
                        "application/json");
      });
  pages->push_back({"/heatmap/links",
                    "link x time utilization at sub-ms resolution (?seconds=10&bucket=1ms&node="
                    "&direction=&format=json; ?job=: one job's share)"});
  pages->push_back(
      {"/heatmap/nodes",
       "node x node bytes from captured flows (?seconds=10&format=json; ?job=: between the job's "
       "nodes)"});
}

void NoSuchJob(httplib::Response& res, const std::string& job, const char* what) {
  res.status = 404;
  res.set_content(
      absl::StrCat("no job \"", job, "\" with ", what, " is known here (see /api/jobs)\n"),
      "text/plain");
}

void RegisterHeatmapIndex(httplib::Server& server, std::vector<HeatmapPage> pages) {
  std::string html =
      "<!doctype html><html><head><meta charset=\"utf-8\"><title>fabricscope heat "
      "maps</title></head><body><h1>fabricscope heat maps</h1><ul>";
  for (const HeatmapPage& p : pages) {
    absl::StrAppend(&html, "<li><a href=\"", XmlEscape(p.path), "\">", XmlEscape(p.path), "</a> ",
                    XmlEscape(p.description), " (<a href=\"", XmlEscape(p.path),
                    "?format=json\">JSON</a>)</li>");
  }
  html +=
      "</ul><p>Related JSON: <a href=\"/api/anomalies\">/api/anomalies</a>, <a "
      "href=\"/api/loss_patterns\">/api/loss_patterns</a>, <a "
      "href=\"/api/flight_recordings\">/api/flight_recordings</a>.</p></body></html>";
  server.Get("/heatmap", [html](const httplib::Request&, httplib::Response& res) {
    res.set_content(html, "text/html; charset=utf-8");
  });
}

}  // namespace fabricscope::exporters
