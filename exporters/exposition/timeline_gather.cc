#include "exporters/exposition/timeline_gather.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collectors/common/collective_vocabulary.h"
#include "exporters/exposition/timeline_fetch.h"
#include "exporters/history/history_store.h"
#include "exporters/state/cluster_state.h"
#include "simdjson.h"

namespace fabricscope::exporters {

namespace {

using TimelineSliceKey =
    std::tuple<uint64_t, std::string, uint64_t, int32_t>;  // comm, func, seq, rank

// What the scope lets in: the job's or asked communicators and nodes.
struct TimelineFilter {
  explicit TimelineFilter(const TimelineScope& s) : scope(s) {}
  const TimelineScope& scope;
  std::set<uint64_t> job_comms;
  std::set<std::string> job_nodes;
  bool Comm(uint64_t c) const {
    if (scope.comm != 0 && c != scope.comm) return false;
    if (scope.comm_label >= 0 && static_cast<int64_t>(c >> 32) != scope.comm_label) return false;
    return scope.job.empty() || job_comms.contains(c);
  }
  bool Node(const std::string& n) const {
    if (!scope.node.empty() && n != scope.node) return false;
    return scope.job.empty() || job_nodes.contains(n);
  }
  bool Overlaps(int64_t start, int64_t end) const {
    return end >= scope.from_ns && start < scope.to_ns;
  }
};

struct TimelineBuilder {
  explicit TimelineBuilder(const TimelineScope& s) : filter(s) {}
  TimelineFilter filter;
  TimelineInput in;
  std::map<TimelineSliceKey, size_t> slice_at;                      // into in.slices
  std::set<std::tuple<uint64_t, std::string, uint64_t>> instances;  // drawn already
  std::set<std::pair<std::string, std::string>> fine_ports;         // (node, port) from memory
  std::map<std::pair<std::string, std::string>, size_t> coarse_at;  // history's, into counters
  int64_t fine_from = INT64_MAX;  // where memory's per-port points begin

  TimelineSlice& Slice(const TimelineSlice& s) {
    auto [it, fresh] = slice_at.try_emplace({s.comm, s.func, s.seq, s.rank}, in.slices.size());
    if (fresh) {
      in.slices.push_back(s);
      return in.slices.back();
    }
    TimelineSlice& have = in.slices[it->second];
    if (have.cause.empty()) have.cause = s.cause;
    if (have.busbw < 0) have.busbw = s.busbw;
    if (have.pid == 0) have.pid = s.pid;
    if (have.nranks == 0) have.nranks = s.nranks;
    if (have.channels.empty()) have.channels = s.channels;
    return have;
  }

  // An instance's ranks (node, rank, start, end), with the late rank's flows when the cause is
  // compute_straggler.
  void Instance(uint64_t comm, const std::string& func, uint64_t seq, int32_t nranks,
                const std::string& cause, double busbw, int late,
                const std::vector<std::tuple<int32_t, std::string, int64_t, int64_t>>& ranks) {
    if (!instances.insert({comm, func, seq}).second) return;
    for (const auto& [rank, node, start, end] : ranks) {
      if (!filter.Node(node)) continue;
      Slice(TimelineSlice{.node = node,
                          .comm = comm,
                          .rank = rank,
                          .nranks = nranks,
                          .func = func,
                          .cause = cause,
                          .seq = seq,
                          .busbw = busbw,
                          .start_ns = start,
                          .end_ns = end});
    }
    if (cause != "compute_straggler" || late < 0 || static_cast<size_t>(late) >= ranks.size()) {
      return;
    }
    const auto& [late_rank, late_node, late_start, late_end] = ranks[static_cast<size_t>(late)];
    for (const auto& [rank, node, start, end] : ranks) {
      if (rank == late_rank || start >= late_start) continue;
      if (!filter.Node(node) || !filter.Node(late_node)) continue;
      in.waits.push_back(TimelineWait{.comm = comm,
                                      .func = func,
                                      .seq = seq,
                                      .late_node = late_node,
                                      .waiting_node = node,
                                      .late_rank = late_rank,
                                      .waiting_rank = rank,
                                      .at_ns = late_start,
                                      .lateness_ns = late_start - start});
    }
  }
};

void TimelineFromMemory(const ClusterState& state, TimelineBuilder& b) {
  const TimelineScope& sc = b.filter.scope;
  for (const CollectiveRecord& r : state.RecentCollectives(sc.node, 0)) {
    if (!b.filter.Comm(r.comm_hash) || !b.filter.Node(r.node)) continue;
    if (r.start_unix_ns <= 0 || !b.filter.Overlaps(r.start_unix_ns, r.end_unix_ns)) continue;
    TimelineSlice& s = b.Slice(TimelineSlice{.node = r.node,
                                             .comm = r.comm_hash,
                                             .rank = r.rank,
                                             .nranks = r.nranks,
                                             .pid = r.pid,
                                             .func = r.func,
                                             .seq = r.seq,
                                             .bytes = r.bytes,
                                             .busbw = r.busbw_bytes_per_second,
                                             .start_ns = r.start_unix_ns,
                                             .end_ns = r.end_unix_ns});
    if (s.channels.empty()) {
      for (const CollectiveRecord::ChannelSpan& c : r.channel_spans) {
        s.channels.push_back({c.channel, c.start_unix_ns, c.end_unix_ns});
      }
    }
  }
  for (const CollectiveInstance& inst : state.cross_rank().Slowest(0)) {
    if (!b.filter.Comm(inst.key.comm)) continue;
    std::vector<std::tuple<int32_t, std::string, int64_t, int64_t>> ranks;
    bool overlaps = false;
    for (const RankEntry& r : inst.ranks) {
      ranks.emplace_back(r.rank, r.node.str(), r.start_unix_ns, r.end_unix_ns);
      overlaps = overlaps || b.filter.Overlaps(r.start_unix_ns, r.end_unix_ns);
    }
    if (!overlaps) continue;
    b.Instance(inst.key.comm, inst.key.func.str(), inst.key.seq, inst.nranks,
               common::CollectiveCauseName(inst.cause), inst.busbw, inst.bottleneck, ranks);
  }
  // NCCL kernels of the ranks' processes, on their rank's thread.
  std::set<std::pair<std::string, int32_t>> pids;
  for (const TimelineSlice& s : b.in.slices) {
    if (s.pid > 0) pids.insert({s.node, s.pid});
  }
  for (const KernelRecord& k : state.RecentKernels(sc.node, 0)) {
    if (!k.is_nccl || !pids.contains({k.node, k.pid})) continue;
    if (!b.filter.Overlaps(k.start_unix_ns, k.end_unix_ns)) continue;
    b.in.kernels.push_back(TimelineKernel{.node = k.node,
                                          .name = k.name,
                                          .pid = k.pid,
                                          .start_ns = k.start_unix_ns,
                                          .end_ns = k.end_unix_ns});
  }
  // The agents' own samples where they attached them (the finest resolution the aggregator
  // holds: the sampling period), each recording's port a track of its own.
  const size_t before = b.in.counters.size();
  AddSampleTracks(
      state.links().FlightRecordings(sc.node), sc.from_ns, sc.to_ns,
      [&b](const std::string& node) { return b.filter.Node(node); }, &b.in);
  if (b.in.counters.size() > before) {
    b.in.notes.push_back("flight-recorder samples: the agents' own, at their sampling period");
  }
  // Per-port utilization at the stored resolution, for the part of the range still held.
  LinkAnalysis::LinkQuery q;
  const int64_t held_from =
      absl::ToUnixNanos(absl::Now()) -
      static_cast<int64_t>((state.links().options().history_seconds + 1) * 1e9);
  q.from_unix_ns = std::max(sc.from_ns, held_from);
  q.to_unix_ns = sc.to_ns;
  if (q.to_unix_ns <= q.from_unix_ns) return;
  q.node = sc.node;
  if (!sc.job.empty()) q.nodes = b.filter.job_nodes;
  const HeatmapModel m = state.links().LinksHeatmap(q);
  std::map<std::pair<std::string, std::string>, std::map<size_t, std::pair<double, double>>> cols;
  for (size_t r = 0; r < m.rows.size() && r < m.row_ports.size(); ++r) {
    if (m.row_nodes[r].empty() || m.row_ports[r].empty()) continue;
    const bool tx = m.rows[r].size() >= 2 && m.rows[r].substr(m.rows[r].size() - 2) == "tx";
    auto& track = cols[{m.row_nodes[r], m.row_ports[r]}];
    for (size_t c = 0; c < m.cols; ++c) {
      const float v = m.at(r, c);
      if (std::isnan(v)) continue;
      auto& p = track[c];
      (tx ? p.first : p.second) = v;
    }
  }
  for (auto& [key, track] : cols) {
    if (track.empty()) continue;
    TimelineCounter c;
    c.node = key.first;
    c.port = key.second;
    for (const auto& [col, v] : track) {
      c.points.push_back(
          {m.start_unix_ns + static_cast<int64_t>(col) * m.bucket_ns, v.first, v.second});
    }
    b.fine_ports.insert(key);
    b.in.counters.push_back(std::move(c));
  }
  if (!cols.empty()) {
    b.fine_from = q.from_unix_ns;
    b.in.notes.push_back(absl::StrCat("port utilization: ", m.bucket_ns / 1000,
                                      " us buckets from the aggregator's memory"));
  }
}

// Every time within [from - span, to + span] (span: the range's length), so that the trace's
// offsets from `from` cannot overflow whatever an agent sent (hostile or broken clocks).
void TimelineClampTimes(TimelineInput* in) {
  const int64_t span = in->to_ns - in->from_ns;
  const int64_t lo = in->from_ns - span, hi = in->to_ns + span;
  auto clamp = [&](int64_t* t) { *t = std::clamp(*t, lo, hi); };
  for (TimelineSlice& s : in->slices) {
    clamp(&s.start_ns);
    clamp(&s.end_ns);
    s.end_ns = std::max(s.end_ns, s.start_ns);
  }
  for (TimelineKernel& k : in->kernels) {
    clamp(&k.start_ns);
    clamp(&k.end_ns);
    k.end_ns = std::max(k.end_ns, k.start_ns);
  }
  for (TimelineWait& w : in->waits) clamp(&w.at_ns);
  for (TimelineInstant& i : in->instants) clamp(&i.ns);
  for (TimelineCounter& c : in->counters) {
    for (TimelineCounter::Point& p : c.points) clamp(&p.ns);
  }
}

// Channel spans nest: each cut to its collective and to the CUPTI kernel of its process that
// overlaps the collective most (the plugin's and CUPTI's GPU clocks are fitted to the CPU
// separately, microseconds apart); a span left empty is dropped. Call after the clamp.
void TimelineNestChannels(TimelineInput* in) {
  // The kernels of each process by start, with the longest one's length: a slice looks only at
  // the kernels that can overlap it (O(log n) to find them, not a scan of every kernel).
  struct ProcessKernels {
    std::vector<std::pair<int64_t, int64_t>> spans;  // (start, end), by start
    int64_t longest = 0;
  };
  std::map<std::pair<std::string, int32_t>, ProcessKernels> kernels;
  for (const TimelineSlice& s : in->slices) {
    if (!s.channels.empty()) kernels.try_emplace({s.node, s.pid});
  }
  if (kernels.empty()) return;
  for (const TimelineKernel& k : in->kernels) {
    auto it = kernels.find({k.node, k.pid});
    if (it == kernels.end()) continue;
    it->second.spans.emplace_back(k.start_ns, k.end_ns);
    it->second.longest = std::max(it->second.longest, k.end_ns - k.start_ns);
  }
  for (auto& [key, pk] : kernels) std::sort(pk.spans.begin(), pk.spans.end());
  for (TimelineSlice& s : in->slices) {
    if (s.channels.empty()) continue;
    int64_t lo = s.start_ns, hi = s.end_ns, best = 0;
    const ProcessKernels& pk = kernels.at({s.node, s.pid});
    auto k = std::lower_bound(pk.spans.begin(), pk.spans.end(),
                              std::make_pair(s.start_ns - pk.longest, INT64_MIN));
    for (; k != pk.spans.end() && k->first < s.end_ns; ++k) {
      const int64_t overlap = std::min(k->second, s.end_ns) - std::max(k->first, s.start_ns);
      if (overlap > best) {
        best = overlap;
        lo = std::max(k->first, s.start_ns);
        hi = std::min(k->second, s.end_ns);
      }
    }
    std::vector<TimelineSlice::Channel> kept;
    for (TimelineSlice::Channel c : s.channels) {
      c.start_ns = std::clamp(c.start_ns, lo, hi);
      c.end_ns = std::clamp(c.end_ns, lo, hi);
      if (c.end_ns > c.start_ns) kept.push_back(c);
    }
    s.channels = std::move(kept);
  }
}

// Each counter's points before the range: all but the last dropped, and that one moved to the
// range's start (its value then: a counter holds until its next point).
void TimelineClipCounters(TimelineInput* in) {
  for (TimelineCounter& c : in->counters) {
    std::sort(c.points.begin(), c.points.end(),
              [](const auto& x, const auto& y) { return x.ns < y.ns; });
    size_t first = 0;
    while (first + 1 < c.points.size() && c.points[first + 1].ns <= in->from_ns) ++first;
    c.points.erase(c.points.begin(), c.points.begin() + static_cast<long>(first));
    if (!c.points.empty() && c.points[0].ns < in->from_ns) c.points[0].ns = in->from_ns;
  }
}

// Reads the history's pages of `q` into `take`, up to a little past max_events (the caller's
// count refuses the rest); a read that fails ends it with a note.
template <typename Take>
size_t TimelineReadHistory(const HistoryStore& history, HistoryQuery q, size_t max_events,
                           Take take) {
  q.limit = kMaxHistoryPage;
  size_t read = 0;
  for (;;) {
    absl::StatusOr<HistoryPage> page = history.Query(q);
    if (!page.ok()) break;
    for (const HistoryEvent& e : page->events) take(e);
    read += page->events.size();
    if (page->next_cursor.empty() || read > max_events) break;
    q.cursor = page->next_cursor;
  }
  return read;
}

// The history's utilization event: one point per port not drawn finer from memory.
void TimelineFromUtilization(const HistoryEvent& e, simdjson::dom::object o, TimelineBuilder& b) {
  simdjson::dom::object ports;
  if (o["ports"].get_object().get(ports) != simdjson::SUCCESS) return;
  for (auto [key, value] : ports) {
    const std::pair<std::string, std::string> id{e.node, std::string(key)};
    // Memory draws these finer from fine_from on; before it the history's entries stand.
    if (b.fine_ports.contains(id) && e.unix_ns >= b.fine_from) continue;
    simdjson::dom::array a;
    double v[5] = {0, 0, 0, 0, 0};
    if (value.get_array().get(a) != simdjson::SUCCESS) continue;
    size_t i = 0;
    for (simdjson::dom::element x : a) {
      if (i < 5 && x.get_double().get(v[i]) != simdjson::SUCCESS) v[i] = 0;
      ++i;
    }
    auto [it, fresh] = b.coarse_at.try_emplace(id, b.in.counters.size());
    if (fresh) {
      b.in.counters.emplace_back();
      b.in.counters.back().node = id.first;
      b.in.counters.back().port = id.second;
    }
    b.in.counters[it->second].points.push_back({e.unix_ns, v[0], v[2]});
  }
}

// One history event into the builder. False when its detail does not parse (skipped).
bool TimelineFromEvent(const HistoryEvent& e, simdjson::dom::parser& parser, TimelineBuilder& b) {
  if (!e.node.empty() && !b.filter.Node(e.node)) return true;
  const int64_t end = std::max(e.unix_ns, e.end_unix_ns);
  // A utilization entry holds until the next one: one that began before the range may still
  // be its value at the start (clipped below, TimelineClipCounters).
  if (e.kind != "instance" && e.kind != "utilization" && !b.filter.Overlaps(e.unix_ns, end)) {
    return true;
  }
  simdjson::dom::element doc;
  simdjson::dom::object o;
  if (parser.parse(e.detail_json).get(doc) != simdjson::SUCCESS ||
      doc.get_object().get(o) != simdjson::SUCCESS) {
    return false;
  }
  auto str = [&o](const char* k) {
    std::string_view v;
    return o[k].get_string().get(v) == simdjson::SUCCESS ? std::string(v) : std::string();
  };
  auto num = [&o](const char* k, double fallback) {
    double v = fallback;
    return o[k].get_double().get(v) == simdjson::SUCCESS ? v : fallback;
  };
  if (e.kind == "collective") {
    if (!b.filter.Comm(e.comm)) return true;
    TimelineSlice& s = b.Slice(TimelineSlice{.node = e.node,
                                             .comm = e.comm,
                                             .rank = static_cast<int32_t>(num("rank", -1)),
                                             .nranks = static_cast<int32_t>(num("nranks", 0)),
                                             .pid = static_cast<int32_t>(num("pid", 0)),
                                             .func = str("func"),
                                             .cause = str("cause"),
                                             .seq = static_cast<uint64_t>(num("seq", 0)),
                                             .bytes = static_cast<uint64_t>(num("bytes", 0)),
                                             .busbw = num("busbw_bytes_per_second", -1),
                                             .start_ns = e.unix_ns,
                                             .end_ns = end});
    simdjson::dom::array spans;
    if (s.channels.empty() && o["channels"].get_array().get(spans) == simdjson::SUCCESS) {
      for (simdjson::dom::element span : spans) {
        simdjson::dom::array f;
        int64_t channel = 0, start = 0, stop = 0;
        if (span.get_array().get(f) != simdjson::SUCCESS || f.size() != 3 ||
            f.at(0).get_int64().get(channel) != simdjson::SUCCESS ||
            f.at(1).get_int64().get(start) != simdjson::SUCCESS ||
            f.at(2).get_int64().get(stop) != simdjson::SUCCESS || channel < 0 || channel > 255) {
          continue;
        }
        s.channels.push_back({static_cast<uint32_t>(channel), start, stop});
      }
    }
    return true;
  }
  if (e.kind == "instance") {
    if (!b.filter.Comm(e.comm) || !b.filter.Overlaps(e.unix_ns, end)) return true;
    std::vector<std::tuple<int32_t, std::string, int64_t, int64_t>> ranks;
    simdjson::dom::array list;
    const int32_t late_rank = static_cast<int32_t>(num("bottleneck_rank", -1));
    int late = -1;
    if (o["ranks"].get_array().get(list) == simdjson::SUCCESS) {
      for (simdjson::dom::element r : list) {
        simdjson::dom::array f;
        int64_t rank = -1, start = 0, stop = 0;
        std::string_view node;
        if (r.get_array().get(f) != simdjson::SUCCESS || f.size() != 4 ||
            f.at(0).get_int64().get(rank) != simdjson::SUCCESS ||
            f.at(1).get_string().get(node) != simdjson::SUCCESS ||
            f.at(2).get_int64().get(start) != simdjson::SUCCESS ||
            f.at(3).get_int64().get(stop) != simdjson::SUCCESS) {
          continue;
        }
        if (rank == late_rank) late = static_cast<int>(ranks.size());
        ranks.emplace_back(static_cast<int32_t>(rank), std::string(node), start, stop);
      }
    }
    b.Instance(e.comm, str("func"), static_cast<uint64_t>(num("seq", 0)),
               static_cast<int32_t>(num("nranks", 0)), str("cause"),
               num("busbw_bytes_per_second", -1), late, ranks);
    return true;
  }
  if (e.node.empty()) return true;
  if (e.kind == "utilization") {
    TimelineFromUtilization(e, o, b);
    return true;
  }
  std::string name = e.kind;
  if (const std::string port = str("port"); !port.empty()) absl::StrAppend(&name, " ", port);
  if (const std::string dir = str("direction"); !dir.empty()) absl::StrAppend(&name, " ", dir);
  if (const std::string cause = str("cause"); !cause.empty()) absl::StrAppend(&name, " ", cause);
  std::string args = e.detail_json;
  if (e.end_unix_ns > e.unix_ns && args.size() >= 2 && args.back() == '}') {
    args.pop_back();
    absl::StrAppend(&args, args.size() > 1 ? "," : "",
                    "\"duration_us\":", (e.end_unix_ns - e.unix_ns) / 1000, "}");
  }
  b.in.instants.push_back(TimelineInstant{
      .node = e.node, .name = std::move(name), .ns = e.unix_ns, .args_json = std::move(args)});
  return true;
}

}  // namespace

absl::StatusOr<TimelineInput> GatherTimeline(const ClusterState& state, const HistoryStore* history,
                                             const TimelineScope& scope, size_t max_events) {
  TimelineBuilder b(scope);
  if (!scope.job.empty()) {
    b.filter.job_comms = state.CommsOfJob(scope.job);
    for (const JobView& j : state.Jobs()) {
      if (j.job.id() == scope.job) b.filter.job_nodes.insert(j.nodes.begin(), j.nodes.end());
    }
    if (history != nullptr && history->has_database()) {
      if (auto jobs = history->Jobs(1, scope.job); jobs.ok() && !jobs->empty()) {
        b.filter.job_nodes.insert((*jobs)[0].nodes.begin(), (*jobs)[0].nodes.end());
      }
    }
    if (b.filter.job_comms.empty() && b.filter.job_nodes.empty()) {
      return absl::NotFoundError(absl::StrCat("no job \"", scope.job,
                                              "\" is known here (see /api/jobs and "
                                              "/api/history/jobs)"));
    }
  }
  b.in.from_ns = scope.from_ns;
  b.in.to_ns = scope.to_ns;
  TimelineFromMemory(state, b);
  if (history != nullptr && history->has_database()) {
    HistoryQuery q;
    q.job = scope.job;
    q.node = scope.node;
    q.comm = scope.comm;
    q.comm_label = scope.comm_label;
    // Collectives and instances are stored at their start: one that began up to a minute before
    // the range may end inside it (and a utilization entry holds until the next, a minute at most).
    q.from_unix_ns = std::max<int64_t>(0, scope.from_ns - 60'000'000'000);
    q.to_unix_ns = scope.to_ns;
    simdjson::dom::parser parser;
    size_t read = TimelineReadHistory(*history, q, max_events, [&](const HistoryEvent& e) {
      // Jobs are known for communicators whose events name them.
      if (!scope.job.empty() && e.job == scope.job && e.comm != 0)
        b.filter.job_comms.insert(e.comm);
      TimelineFromEvent(e, parser, b);
    });
    // A communicator's timeline: its ranks' nodes' own events too (utilization, bursts, loss,
    // link changes), which name no communicator. (A job's query holds its nodes' already; a
    // node's holds all of that node's.)
    if (scope.job.empty() && scope.node.empty() && (scope.comm != 0 || scope.comm_label >= 0)) {
      std::set<std::string> nodes;
      for (const TimelineSlice& s : b.in.slices) nodes.insert(s.node);
      HistoryQuery nq;
      nq.node_level = true;
      nq.from_unix_ns = q.from_unix_ns;
      nq.to_unix_ns = q.to_unix_ns;
      read += TimelineReadHistory(*history, nq, max_events, [&](const HistoryEvent& e) {
        if (nodes.contains(e.node)) TimelineFromEvent(e, parser, b);
      });
    }
    b.in.notes.push_back(absl::StrCat(read, " history events read"));
  } else {
    b.in.notes.push_back("no event history (--history-path): memory only");
  }
  TimelineClampTimes(&b.in);
  TimelineNestChannels(&b.in);
  TimelineClipCounters(&b.in);
  std::sort(b.in.slices.begin(), b.in.slices.end(),
            [](const TimelineSlice& x, const TimelineSlice& y) { return x.start_ns < y.start_ns; });
  const size_t n = TimelineEventCount(b.in);
  if (n > max_events) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the timeline would hold ", n, " events, over the limit of ", max_events,
                     ": ask for a shorter range or one job, communicator or node"));
  }
  b.in.scope = !scope.job.empty()                         ? "job=" + scope.job
               : !scope.node.empty()                      ? "node=" + scope.node
               : scope.comm != 0 || scope.comm_label >= 0 ? "comm"
                                                          : "cluster";
  return std::move(b.in);
}

}  // namespace fabricscope::exporters
