#include "exporters/exposition/timeline_json.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectors/common/collective_vocabulary.h"
#include "collectors/common/json_text.h"

namespace fabricscope::exporters {

using common::AppendJsonNumber;
using common::AppendJsonString;

namespace {

// Trace ids: a process per node (1-based, in name order) and a thread per (communicator, rank)
// of that node; kernels of a process with no rank there get their own thread.
struct TraceIds {
  std::map<std::string, int> pid;                                      // node -> trace pid
  std::map<std::tuple<std::string, uint64_t, int32_t>, int> rank_tid;  // (node, comm, rank)
  std::map<std::pair<std::string, int32_t>, int> proc_tid;             // (node, os pid) -> tid
  // A thread per (node, comm, rank, channel) with channel spans: channels run in parallel, and
  // complete events on one thread must nest ("Complete Events"), so each channel has its own.
  std::map<std::tuple<std::string, uint64_t, int32_t, uint32_t>, int> channel_tid;
  int next_tid = 1;
};

TraceIds AssignTraceIds(const TimelineInput& in) {
  TraceIds ids;
  std::set<std::string> nodes;
  for (const auto& s : in.slices) nodes.insert(s.node);
  for (const auto& k : in.kernels) nodes.insert(k.node);
  for (const auto& c : in.counters) nodes.insert(c.node);
  for (const auto& i : in.instants) nodes.insert(i.node);
  int p = 1;
  for (const std::string& n : nodes) ids.pid[n] = p++;
  std::vector<const TimelineSlice*> by_rank;
  for (const auto& s : in.slices) by_rank.push_back(&s);
  std::sort(by_rank.begin(), by_rank.end(), [](const TimelineSlice* a, const TimelineSlice* b) {
    return std::tie(a->comm, a->rank) < std::tie(b->comm, b->rank);
  });
  for (const TimelineSlice* s : by_rank) {
    auto [it, fresh] = ids.rank_tid.try_emplace({s->node, s->comm, s->rank}, ids.next_tid);
    if (fresh) ++ids.next_tid;
    if (s->pid > 0) ids.proc_tid.try_emplace({s->node, s->pid}, it->second);
  }
  for (const auto& k : in.kernels) {
    if (ids.proc_tid.try_emplace({k.node, k.pid}, ids.next_tid).second) ++ids.next_tid;
  }
  for (const TimelineSlice* s : by_rank) {
    for (const TimelineSlice::Channel& c : s->channels) {
      if (ids.channel_tid.try_emplace({s->node, s->comm, s->rank, c.channel}, ids.next_tid)
              .second) {
        ++ids.next_tid;
      }
    }
  }
  return ids;
}

// µs since `from` with ns kept (three decimals).
void AppendTraceTs(std::string* out, const char* key, int64_t ns, int64_t from) {
  absl::StrAppendFormat(out, ",\"%s\":%.3f", key, static_cast<double>(ns - from) / 1e3);
}

void BeginTraceEvent(std::string* out, bool* first, const char* ph, int pid, int tid) {
  if (!*first) out->push_back(',');
  *first = false;
  absl::StrAppend(out, "{\"ph\":\"", ph, "\",\"pid\":", pid, ",\"tid\":", tid);
}

void TraceMetadata(std::string* out, bool* first, const TimelineInput& in, const TraceIds& ids) {
  for (const auto& [node, pid] : ids.pid) {
    BeginTraceEvent(out, first, "M", pid, 0);
    *out += ",\"name\":\"process_name\",\"args\":{\"name\":";
    AppendJsonString(out, node);
    *out += "}}";
    BeginTraceEvent(out, first, "M", pid, 0);
    absl::StrAppend(out, ",\"name\":\"process_sort_index\",\"args\":{\"sort_index\":", pid, "}}");
  }
  std::map<std::tuple<std::string, uint64_t, int32_t>, int32_t> nranks;
  for (const auto& s : in.slices) {
    int32_t& n = nranks[{s.node, s.comm, s.rank}];
    n = std::max(n, s.nranks);
  }
  for (const auto& [key, tid] : ids.rank_tid) {
    const auto& [node, comm, rank] = key;
    const int pid = ids.pid.at(node);
    BeginTraceEvent(out, first, "M", pid, tid);
    *out += ",\"name\":\"thread_name\",\"args\":{\"name\":";
    AppendJsonString(out, absl::StrCat("rank ", rank, " (comm ", common::CommLabel(comm), ")"));
    absl::StrAppend(out, ",\"rank\":", rank, ",\"world_size\":", nranks[key], ",\"comm\":\"",
                    common::CommLabel(comm), "\"}}");
    BeginTraceEvent(out, first, "M", pid, tid);
    absl::StrAppend(out, ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":", rank, "}}");
  }
  for (const auto& [key, tid] : ids.channel_tid) {
    const auto& [node, comm, rank, channel] = key;
    const int pid = ids.pid.at(node);
    BeginTraceEvent(out, first, "M", pid, tid);
    *out += ",\"name\":\"thread_name\",\"args\":{\"name\":";
    AppendJsonString(out, absl::StrCat("rank ", rank, " channel ", channel));
    absl::StrAppend(out, ",\"rank\":", rank, ",\"world_size\":", nranks[{node, comm, rank}],
                    ",\"comm\":\"", common::CommLabel(comm), "\",\"channel\":", channel, "}}");
    BeginTraceEvent(out, first, "M", pid, tid);  // after its rank's thread, in channel order
    absl::StrAppend(out, ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":", rank, "}}");
  }
  std::set<int> rank_tids;
  for (const auto& [key, tid] : ids.rank_tid) rank_tids.insert(tid);
  for (const auto& [key, tid] : ids.proc_tid) {
    if (rank_tids.contains(tid)) continue;
    BeginTraceEvent(out, first, "M", ids.pid.at(key.first), tid);
    absl::StrAppend(out, ",\"name\":\"thread_name\",\"args\":{\"name\":\"pid ", key.second,
                    " kernels\"}}");
  }
}

void TraceSlices(std::string* out, bool* first, const TimelineInput& in, const TraceIds& ids) {
  for (const TimelineSlice& s : in.slices) {
    BeginTraceEvent(out, first, "X", ids.pid.at(s.node), ids.rank_tid.at({s.node, s.comm, s.rank}));
    *out += ",\"cat\":\"collective\",\"name\":";
    AppendJsonString(out, s.func);
    AppendTraceTs(out, "ts", s.start_ns, in.from_ns);
    AppendTraceTs(out, "dur", s.start_ns + std::max<int64_t>(0, s.end_ns - s.start_ns), s.start_ns);
    absl::StrAppend(out, ",\"args\":{\"comm\":\"", common::CommLabel(s.comm), "\",\"seq\":", s.seq,
                    ",\"rank\":", s.rank, ",\"bytes\":", s.bytes, ",\"busbw_gbps\":");
    AppendJsonNumber(out, s.busbw >= 0 ? s.busbw * 8 / 1e9 : NAN);
    *out += ",\"cause\":";
    AppendJsonString(out, s.cause);
    *out += "}}";
    for (const TimelineSlice::Channel& c : s.channels) {
      BeginTraceEvent(out, first, "X", ids.pid.at(s.node),
                      ids.channel_tid.at({s.node, s.comm, s.rank, c.channel}));
      absl::StrAppend(out, ",\"cat\":\"kernel_channel\",\"name\":\"channel ", c.channel, "\"");
      AppendTraceTs(out, "ts", c.start_ns, in.from_ns);
      AppendTraceTs(out, "dur", c.start_ns + std::max<int64_t>(0, c.end_ns - c.start_ns),
                    c.start_ns);
      absl::StrAppend(out, ",\"args\":{\"channel\":", c.channel, ",\"seq\":", s.seq, "}}");
    }
  }
  for (const TimelineKernel& k : in.kernels) {
    BeginTraceEvent(out, first, "X", ids.pid.at(k.node), ids.proc_tid.at({k.node, k.pid}));
    *out += ",\"cat\":\"kernel\",\"name\":";
    AppendJsonString(out, k.name);
    AppendTraceTs(out, "ts", k.start_ns, in.from_ns);
    AppendTraceTs(out, "dur", k.start_ns + std::max<int64_t>(0, k.end_ns - k.start_ns), k.start_ns);
    absl::StrAppend(out, ",\"args\":{\"pid\":", k.pid, "}}");
  }
}

void TraceFlows(std::string* out, bool* first, const TimelineInput& in, const TraceIds& ids) {
  int id = 1;
  for (const TimelineWait& w : in.waits) {
    const auto late = ids.rank_tid.find({w.late_node, w.comm, w.late_rank});
    const auto waiting = ids.rank_tid.find({w.waiting_node, w.comm, w.waiting_rank});
    if (late == ids.rank_tid.end() || waiting == ids.rank_tid.end()) continue;
    const std::string name =
        absl::StrCat("rank ", w.waiting_rank, " waited for rank ", w.late_rank);
    for (const char* ph : {"s", "f"}) {
      const bool start = ph[0] == 's';
      BeginTraceEvent(out, first, ph, ids.pid.at(start ? w.late_node : w.waiting_node),
                      start ? late->second : waiting->second);
      absl::StrAppend(out, ",\"cat\":\"straggler\",\"id\":", id, ",\"bp\":\"e\",\"name\":");
      AppendJsonString(out, name);
      AppendTraceTs(out, "ts", w.at_ns, in.from_ns);
      absl::StrAppend(out, ",\"args\":{\"func\":");
      AppendJsonString(out, w.func);
      absl::StrAppend(out, ",\"seq\":", w.seq, ",\"lateness_us\":");
      AppendJsonNumber(out, static_cast<double>(w.lateness_ns) / 1e3);
      *out += "}}";
    }
    ++id;
  }
}

void TraceCounters(std::string* out, bool* first, const TimelineInput& in, const TraceIds& ids) {
  for (const TimelineCounter& c : in.counters) {
    const std::string name = absl::StrCat(c.port, " ", c.track);
    for (const TimelineCounter::Point& p : c.points) {
      BeginTraceEvent(out, first, "C", ids.pid.at(c.node), 0);
      *out += ",\"name\":";
      AppendJsonString(out, name);
      AppendTraceTs(out, "ts", p.ns, in.from_ns);
      *out += ",\"args\":{\"transmit\":";
      AppendJsonNumber(out, p.transmit);
      *out += ",\"receive\":";
      AppendJsonNumber(out, p.receive);
      *out += "}}";
    }
  }
  for (const TimelineInstant& i : in.instants) {
    BeginTraceEvent(out, first, "i", ids.pid.at(i.node), 0);
    *out += ",\"s\":\"p\",\"name\":";
    AppendJsonString(out, i.name);
    AppendTraceTs(out, "ts", i.ns, in.from_ns);
    absl::StrAppend(out, ",\"args\":", i.args_json.empty() ? "{}" : i.args_json, "}");
  }
}

void TraceDistributedInfo(std::string* out, const TimelineInput& in, const TraceIds& ids) {
  std::set<uint64_t> comms;
  int32_t world = 0;
  for (const auto& s : in.slices) {
    comms.insert(s.comm);
    world = std::max(world, s.nranks);
  }
  *out += ",\"distributedInfo\":{\"backend\":\"nccl\"";
  if (comms.size() == 1) {
    absl::StrAppend(out, ",\"comm\":\"", common::CommLabel(*comms.begin()),
                    "\",\"world_size\":", world);
  }
  *out += ",\"ranks\":[";
  bool first = true;
  for (const auto& [key, tid] : ids.rank_tid) {
    const auto& [node, comm, rank] = key;
    absl::StrAppend(out, first ? "" : ",", "{\"rank\":", rank, ",\"comm\":\"",
                    common::CommLabel(comm), "\",\"node\":");
    AppendJsonString(out, node);
    absl::StrAppend(out, ",\"pid\":", ids.pid.at(node), ",\"tid\":", tid, "}");
    first = false;
  }
  *out += "]}";
}

}  // namespace

size_t TimelineEventCount(const TimelineInput& in) {
  size_t n = in.slices.size() + in.kernels.size() + 2 * in.waits.size() + in.instants.size();
  for (const TimelineSlice& s : in.slices) n += s.channels.size();
  for (const TimelineCounter& c : in.counters) n += c.points.size();
  // TraceMetadata: two per node and per rank's thread, one per other thread.
  const TraceIds ids = AssignTraceIds(in);
  std::set<int> rank_tids;
  for (const auto& [key, tid] : ids.rank_tid) rank_tids.insert(tid);
  size_t other = 0;
  for (const auto& [key, tid] : ids.proc_tid) other += rank_tids.contains(tid) ? 0 : 1;
  return n + 2 * ids.pid.size() + 2 * (ids.rank_tid.size() + ids.channel_tid.size()) + other;
}

std::string RenderTimelineJson(const TimelineInput& in) {
  const TraceIds ids = AssignTraceIds(in);
  std::string out;
  out.reserve(256 + 160 * TimelineEventCount(in));
  out += "{\"traceEvents\":[";
  bool first = true;
  TraceMetadata(&out, &first, in, ids);
  TraceSlices(&out, &first, in, ids);
  TraceFlows(&out, &first, in, ids);
  TraceCounters(&out, &first, in, ids);
  out += "],\"displayTimeUnit\":\"ns\",\"otherData\":{\"generator\":\"fabricscope\",\"scope\":";
  AppendJsonString(&out, in.scope);
  absl::StrAppend(&out, ",\"from_unix_ns\":", in.from_ns, ",\"to_unix_ns\":", in.to_ns,
                  ",\"ts_origin\":\"from_unix_ns\",\"notes\":[");
  for (size_t i = 0; i < in.notes.size(); ++i) {
    if (i > 0) out.push_back(',');
    AppendJsonString(&out, in.notes[i]);
  }
  out += "]}";
  TraceDistributedInfo(&out, in, ids);
  out += "}";
  return out;
}

}  // namespace fabricscope::exporters
