#include "exporters/exposition/timeline_fetch.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "exporters/exposition/timeline_gather.h"
#include "exporters/state/cluster_state.h"

namespace fabricscope::exporters {

namespace {

constexpr const char* kSampleTrack = "samples (flight recorder)";

// The nodes a fetch asks: the scope's node, else the trace's, whose recorders hold part of
// [from_ns, to_ns); each with the earliest time its recorder still holds and its window.
struct FetchPlan {
  std::vector<std::string> nodes;
  std::vector<std::string> no_recorder;  // not known here, or without a flight recorder
  size_t left_out = 0;
  int64_t from_ns = INT64_MAX;  // the earliest of the nodes' held ranges, clamped to the scope
  double longest_window = 0;
};

FetchPlan PlanFetch(const ClusterState& state, const TimelineScope& scope,
                    const TimelineInput& in) {
  std::set<std::string> candidates;
  if (!scope.node.empty()) {
    candidates.insert(scope.node);
  } else {
    for (const TimelineSlice& s : in.slices) candidates.insert(s.node);
    for (const TimelineCounter& c : in.counters) candidates.insert(c.node);
  }
  FetchPlan plan;
  const int64_t now = absl::ToUnixNanos(absl::Now());
  for (const std::string& node : candidates) {
    const LinkAnalysis::RecorderInfo r = state.links().FlightRecorderOf(node);
    if (r.seconds <= 0) {
      if (plan.no_recorder.size() < kFetchMaxNodes) plan.no_recorder.push_back(node);
      continue;
    }
    const int64_t held_from = now - static_cast<int64_t>(std::min(r.seconds, 3600.0) * 1e9);
    if (scope.to_ns <= held_from) continue;
    if (plan.nodes.size() >= kFetchMaxNodes) {
      ++plan.left_out;
      continue;
    }
    plan.nodes.push_back(node);
    plan.from_ns = std::min(plan.from_ns, std::max(scope.from_ns, held_from));
    plan.longest_window =
        std::max(plan.longest_window, std::min(r.window_seconds, kFetchMaxWindowSeconds));
  }
  return plan;
}

}  // namespace

void AddSampleTracks(const std::vector<LinkRecording>& recordings, int64_t from_ns, int64_t to_ns,
                     const std::function<bool(const std::string&)>& node_ok, TimelineInput* in) {
  std::map<std::pair<std::string, std::string>, size_t> at;  // into in->counters
  for (size_t i = 0; i < in->counters.size(); ++i) {
    if (in->counters[i].track == kSampleTrack) at[{in->counters[i].node, in->counters[i].port}] = i;
  }
  std::set<size_t> touched;
  for (const LinkRecording& rec : recordings) {
    if (!node_ok(rec.node)) continue;
    const v1::FlightRecording& r = rec.r;
    const int n =
        std::min({r.time_ns_size(), r.transmit_utilization_size(), r.receive_utilization_size()});
    const std::string port = absl::StrCat(rec.device, ":", rec.port);
    for (int i = 0; i < n; ++i) {
      int64_t t = 0;
      if (__builtin_add_overflow(r.time_ns(i), rec.offset_ns, &t) || t < from_ns || t >= to_ns) {
        continue;
      }
      auto [it, fresh] = at.try_emplace({rec.node, port}, in->counters.size());
      if (fresh) {
        TimelineCounter c;
        c.node = rec.node;
        c.port = port;
        c.track = kSampleTrack;
        in->counters.push_back(std::move(c));
      }
      touched.insert(it->second);
      const float tx = r.transmit_utilization(i), rx = r.receive_utilization(i);
      in->counters[it->second].points.push_back(
          {t, std::isfinite(tx) ? tx : 0.0, std::isfinite(rx) ? rx : 0.0});
    }
  }
  for (size_t i : touched) {
    // Recordings of one port may overlap (two slow collectives close together, an attached
    // recording and a fetched one).
    auto& pts = in->counters[i].points;
    std::stable_sort(pts.begin(), pts.end(),
                     [](const auto& x, const auto& y) { return x.ns < y.ns; });
    pts.erase(std::unique(pts.begin(), pts.end(),
                          [](const auto& x, const auto& y) { return x.ns == y.ns; }),
              pts.end());
  }
}

void AddFetchedSamples(const ClusterState& state, const TimelineScope& scope, size_t max_events,
                       absl::Duration wait, TimelineInput* in) {
  const FetchPlan plan = PlanFetch(state, scope, *in);
  if (!plan.no_recorder.empty()) {
    in->notes.push_back(absl::StrCat("no flight-recorder samples fetched from ",
                                     absl::StrJoin(plan.no_recorder, ", "),
                                     ": not known here, or without a flight recorder"));
  }
  if (plan.nodes.empty()) return;
  const size_t have = TimelineEventCount(*in);
  const size_t budget = std::min(kFetchMaxSamples, max_events > have ? max_events - have : 0);
  const size_t per_node = budget / plan.nodes.size();
  if (per_node < 100) {
    in->notes.push_back(
        absl::StrCat("flight-recorder samples not fetched: the trace is at its limit of ",
                     max_events, " events"));
    return;
  }
  RecordingFetch::Result got =
      state.recording_fetch().Fetch(plan.nodes, plan.from_ns, scope.to_ns,
                                    static_cast<uint32_t>(std::min<size_t>(per_node, 65536)),
                                    wait + absl::Seconds(plan.longest_window));
  // An agent that sends more than asked is cut to its share: the trace stays in its bound.
  std::map<std::string, size_t> left;
  for (LinkRecording& r : got.recordings) {
    auto [it, fresh] = left.try_emplace(r.node, per_node);
    const int keep = static_cast<int>(std::min<size_t>(it->second, r.r.time_ns_size()));
    if (keep < r.r.time_ns_size()) {
      r.r.mutable_time_ns()->Truncate(keep);
      r.r.set_truncated(true);
    }
    it->second -= static_cast<size_t>(keep);
  }
  AddSampleTracks(
      got.recordings, plan.from_ns, scope.to_ns, [](const std::string&) { return true; }, in);
  size_t truncated = 0;
  for (const LinkRecording& r : got.recordings) truncated += r.r.truncated() ? 1 : 0;
  std::string note = absl::StrCat(
      "flight-recorder samples fetched from the agents from ",
      absl::FormatTime(absl::RFC3339_full, absl::FromUnixNanos(plan.from_ns), absl::UTCTimeZone()),
      " (what their recorders still hold): answered ", got.answered.size(), " of ",
      plan.nodes.size(), " nodes");
  auto list = [&note](const char* what, const std::vector<std::string>& nodes) {
    if (!nodes.empty()) absl::StrAppend(&note, "; ", what, ": ", absl::StrJoin(nodes, ", "));
  };
  list("no answer in time", got.timed_out);
  list("not streaming to this aggregator", got.unreachable);
  list("not asked (fetches already running)", got.busy);
  if (plan.left_out > 0) absl::StrAppend(&note, "; ", plan.left_out, " more nodes not asked");
  if (truncated > 0) {
    absl::StrAppend(&note, "; ", truncated, " ports cut at ", std::min<size_t>(per_node, 65536),
                    " samples per node or their agent's own bound (the earliest kept)");
  }
  in->notes.push_back(std::move(note));
}

}  // namespace fabricscope::exporters
