#include "exporters/exposition/history_http.h"

#include <httplib.h>

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectors/common/collective_vocabulary.h"
#include "collectors/common/json_text.h"
#include "exporters/exposition/link_http.h"
#include "exporters/exposition/timeline_fetch.h"
#include "exporters/exposition/timeline_gather.h"
#include "exporters/exposition/timeline_json.h"
#include "exporters/history/history_jsonl.h"
#include "exporters/history/history_store.h"
#include "exporters/state/cluster_state.h"

namespace fabricscope::exporters {

namespace {

// Decimal digits, with one '.' among them when `point`: no sign, blank, exponent or hex (which
// SimpleAtod and SimpleAtoi would take).
bool IsHistoryDecimal(const std::string& text, bool point) {
  size_t points = 0, digits = 0;
  for (char c : text) {
    if (c == '.' && point) {
      ++points;
    } else if (absl::ascii_isdigit(c)) {
      ++digits;
    } else {
      return false;
    }
  }
  return digits > 0 && points <= 1;
}

// A count in [1, max] written in decimal digits. False otherwise.
bool ParseHistoryCount(const std::string& text, size_t max, size_t* out) {
  return IsHistoryDecimal(text, false) && text.size() <= 9 && absl::SimpleAtoi(text, out) &&
         *out >= 1 && *out <= max;
}

// Unix seconds (decimal, fractions allowed, up to 4e9) or an RFC 3339 time. False when neither.
bool ParseHistoryWhen(const std::string& text, int64_t* ns) {
  double s = 0;
  if (IsHistoryDecimal(text, true)) {
    if (!absl::SimpleAtod(text, &s)) return false;
    if (!(s >= 0) || s > 4e9) return false;
    *ns = static_cast<int64_t>(s * 1e9);
    return true;
  }
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, text, &t, &err)) return false;
  if (t < absl::UnixEpoch() || t > absl::FromUnixSeconds(4'000'000'000)) return false;
  *ns = absl::ToUnixNanos(t);
  return true;
}

// comm=: the 8-hex-digit label (CommLabel) or the whole 16-digit hash.
bool ParseHistoryComm(const std::string& text, HistoryQuery* q) {
  if ((text.size() != 8 && text.size() != 16) ||
      !std::all_of(text.begin(), text.end(), [](char c) { return absl::ascii_isxdigit(c); })) {
    return false;
  }
  uint64_t v = 0;
  if (!absl::SimpleHexAtoi(text, &v)) return false;
  if (text.size() == 8) {
    q->comm_label = static_cast<int64_t>(v);
  } else {
    q->comm = v;
    if (v == 0) return false;
  }
  return true;
}

// Why the request's parameters cannot be taken: one that `allowed` does not name, or one given
// twice (which value would count?); "" when they can. The name is echoed only as far as it is
// a plain identifier.
std::string UnknownHistoryParam(const httplib::Request& req,
                                std::initializer_list<const char*> allowed) {
  auto shown = [](const std::string& key) {
    std::string out;
    for (char c : key.substr(0, 32)) out.push_back(absl::ascii_isalnum(c) || c == '_' ? c : '?');
    return out.empty() ? std::string("(empty)") : out;
  };
  for (const auto& [key, value] : req.params) {
    if (std::none_of(allowed.begin(), allowed.end(), [&](const char* a) { return key == a; })) {
      return absl::StrCat("unknown parameter ", shown(key));
    }
    if (req.params.count(key) > 1) return absl::StrCat("parameter ", key, " given twice");
  }
  return "";
}

// The filters shared by /api/history and /api/timeline into *q. False when the request is
// answered (a 400 naming the parameter).
bool ParseHistoryFilters(const httplib::Request& req, HistoryQuery* q, httplib::Response& res) {
  q->job = QueryParam(req, "job");
  q->node = QueryParam(req, "node");
  if (q->job.size() > 128) return BadRequest(res, "job: at most 128 bytes"), false;
  if (q->node.size() > 256) return BadRequest(res, "node: at most 256 bytes"), false;
  if (auto c = QueryParam(req, "comm"); !c.empty() && !ParseHistoryComm(c, q)) {
    BadRequest(res, "comm must be a communicator's 8-hex-digit label or 16-digit hash");
    return false;
  }
  for (const auto& [key, dst] : {std::pair<const char*, int64_t*>{"from", &q->from_unix_ns},
                                 std::pair<const char*, int64_t*>{"to", &q->to_unix_ns}}) {
    if (auto v = QueryParam(req, key); !v.empty() && !ParseHistoryWhen(v, dst)) {
      BadRequest(res, absl::StrCat(key,
                                   " must be Unix seconds (up to 4e9) or an RFC 3339 "
                                   "time such as 2026-12-06T02:13:00Z"));
      return false;
    }
  }
  if (q->to_unix_ns <= q->from_unix_ns) {
    BadRequest(res, QueryParam(req, "to").empty() ? "to (by default now) must be after from"
                                                  : "to must be after from");
    return false;
  }
  return true;
}

void HistoryStatsJson(std::string* out, const HistoryStore& h) {
  const HistoryStore::Stats s = h.stats();
  absl::StrAppend(out, "{\"written\":", s.written, ",\"queued\":", s.queued,
                  ",\"dropped_queue_full\":", s.dropped_queue_full,
                  ",\"dropped_write_error\":", s.dropped_write_error, ",\"refused\":", s.refused,
                  ",\"deleted_retention\":", s.deleted_retention,
                  ",\"deleted_size\":", s.deleted_size, ",\"used_bytes\":", s.used_bytes, "}");
}

void ServeHistoryPage(const HistoryStore* history, const httplib::Request& req,
                      httplib::Response& res) {
  if (const std::string bad = UnknownHistoryParam(
          req, {"job", "comm", "node", "kind", "from", "to", "limit", "cursor", "order"});
      !bad.empty()) {
    return BadRequest(res, absl::StrCat(bad,
                                        " (job, comm, node, kind, from, to, limit, cursor, "
                                        "order)"));
  }
  if (history == nullptr || !history->has_database()) {
    res.status = 503;
    return res.set_content(
        "the event history is off: start with --history-path=FILE (or under systemd, whose "
        "StateDirectory= gives it one)\n",
        "text/plain; charset=utf-8");
  }
  HistoryQuery q;
  if (!ParseHistoryFilters(req, &q, res)) return;
  q.kind = QueryParam(req, "kind");
  if (!q.kind.empty() && !IsHistoryKind(q.kind)) {
    std::vector<std::string> kinds(std::begin(kHistoryKinds), std::end(kHistoryKinds));
    return BadRequest(res, absl::StrCat("kind must be one of ", absl::StrJoin(kinds, ", ")));
  }
  if (auto v = QueryParam(req, "limit"); !v.empty()) {
    if (!ParseHistoryCount(v, kMaxHistoryPage, &q.limit)) {
      return BadRequest(res, absl::StrCat("limit must be a count in 1..", kMaxHistoryPage));
    }
  }
  q.cursor = QueryParam(req, "cursor");
  if (const std::string order = QueryParam(req, "order"); !order.empty()) {
    if (order != "asc" && order != "desc") {
      return BadRequest(res, "order must be asc (oldest first, the default) or desc");
    }
    q.newest_first = order == "desc";
  }
  absl::StatusOr<HistoryPage> page = history->Query(q);
  if (!page.ok()) {
    const bool bad = page.status().code() == absl::StatusCode::kInvalidArgument;
    if (bad) return BadRequest(res, std::string(page.status().message()));
    res.status = 503;
    return res.set_content(std::string(page.status().message()) + "\n", "text/plain");
  }
  std::string out = "{\"events\":[";
  for (size_t i = 0; i < page->events.size(); ++i) {
    if (i > 0) out.push_back(',');
    out += HistoryEventJson(page->events[i]);
  }
  out += "],\"next_cursor\":";
  common::AppendJsonString(&out, page->next_cursor);
  out += ",\"history\":";
  HistoryStatsJson(&out, *history);
  out += "}";
  res.set_content(out, "application/json");
}

void ServeHistoryJobs(const HistoryStore* history, const httplib::Request& req,
                      httplib::Response& res) {
  if (const std::string bad = UnknownHistoryParam(req, {"job", "limit"}); !bad.empty()) {
    return BadRequest(res, absl::StrCat(bad, " (job, limit)"));
  }
  if (history == nullptr || !history->has_database()) {
    res.status = 503;
    return res.set_content("the event history is off (--history-path)\n", "text/plain");
  }
  size_t limit = 100;
  if (auto v = QueryParam(req, "limit"); !v.empty()) {
    if (!ParseHistoryCount(v, kMaxHistoryPage, &limit)) {
      return BadRequest(res, absl::StrCat("limit must be a count in 1..", kMaxHistoryPage));
    }
  }
  const std::string job = QueryParam(req, "job");
  if (job.size() > 128) return BadRequest(res, "job: at most 128 bytes");
  auto jobs = history->Jobs(limit, job);
  if (!jobs.ok()) {
    res.status = 503;
    return res.set_content(std::string(jobs.status().message()) + "\n", "text/plain");
  }
  std::string out = "{\"jobs\":[";
  for (size_t i = 0; i < jobs->size(); ++i) {
    const HistoryJob& j = (*jobs)[i];
    out += i > 0 ? ",{" : "{";
    common::AppendJsonField(&out, "job", j.job);
    absl::StrAppend(&out, ",\"first_unix_ns\":", j.first_unix_ns,
                    ",\"last_unix_ns\":", j.last_unix_ns, ",\"nodes\":[");
    for (size_t k = 0; k < j.nodes.size(); ++k) {
      if (k > 0) out.push_back(',');
      common::AppendJsonString(&out, j.nodes[k]);
    }
    out += "]}";
  }
  out += "]}";
  res.set_content(out, "application/json");
}

void ServeTimeline(const ClusterState& state, const HistoryStore* history,
                   const httplib::Request& req, httplib::Response& res) {
  if (const std::string bad = UnknownHistoryParam(req, {"job", "comm", "node", "from", "to"});
      !bad.empty()) {
    return BadRequest(res, absl::StrCat(bad, " (job, comm, node, from, to)"));
  }
  HistoryQuery q;
  q.to_unix_ns = absl::ToUnixNanos(absl::Now());
  if (!ParseHistoryFilters(req, &q, res)) return;
  if (QueryParam(req, "from").empty()) {
    q.from_unix_ns = std::max<int64_t>(0, q.to_unix_ns - 60'000'000'000);
  }
  if (q.to_unix_ns - q.from_unix_ns > kMaxTimelineNs) {
    return BadRequest(res,
                      "the range is over the limit of 10 minutes (600 s): ask for a "
                      "shorter one");
  }
  if (q.to_unix_ns <= q.from_unix_ns) return BadRequest(res, "to must be after from");
  const TimelineScope scope{.job = q.job,
                            .node = q.node,
                            .comm = q.comm,
                            .comm_label = q.comm_label,
                            .from_ns = q.from_unix_ns,
                            .to_ns = q.to_unix_ns};
  absl::StatusOr<TimelineInput> in = GatherTimeline(state, history, scope, kMaxTimelineEvents);
  if (!in.ok()) {
    res.status = in.status().code() == absl::StatusCode::kNotFound ? 404 : 400;
    return res.set_content(std::string(in.status().message()) + "\n", "text/plain; charset=utf-8");
  }
  AddFetchedSamples(state, scope, kMaxTimelineEvents, kTimelineFetchWait, &*in);
  res.set_header("Content-Disposition", absl::StrCat("attachment; filename=\"fabricscope-timeline-",
                                                     q.from_unix_ns / 1'000'000'000, ".json\""));
  res.set_content(RenderTimelineJson(*in), "application/json");
}

}  // namespace

void RegisterHistoryRoutes(httplib::Server& server, const ClusterState& state,
                           const HistoryStore* history) {
  server.Get("/api/history", [history](const httplib::Request& req, httplib::Response& res) {
    ServeHistoryPage(history, req, res);
  });
  server.Get("/api/history/jobs", [history](const httplib::Request& req, httplib::Response& res) {
    ServeHistoryJobs(history, req, res);
  });
  server.Get("/api/timeline",
             [&state, history](const httplib::Request& req, httplib::Response& res) {
               ServeTimeline(state, history, req, res);
             });
}

}  // namespace fabricscope::exporters
