#include "exporters/history/history_recorder.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectors/common/collective_vocabulary.h"
#include "collectors/common/json_text.h"
#include "exporters/analysis/loss_patterns.h"

namespace fabricscope::exporters {

using common::AppendJsonField;
using common::AppendJsonNumber;
using common::AppendJsonString;

namespace {

std::string HistoryPortLabel(const v1::PortInfo& p) {
  return absl::StrCat(p.device(), ":", p.port());  // as /heatmap/links names a port
}

// {"k":v,...} from fields appended by the caller; `body` has no braces.
HistoryEvent MakeHistoryEvent(int64_t unix_ns, int64_t end_unix_ns, std::string kind,
                              std::string node, uint64_t comm, std::string job,
                              std::string detail_json) {
  HistoryEvent e;
  e.unix_ns = unix_ns;
  e.end_unix_ns = end_unix_ns;
  e.kind = std::move(kind);
  e.node = std::move(node);
  e.comm = comm;
  e.job = std::move(job);
  e.detail_json = std::move(detail_json);
  return e;
}

std::string HistoryObject(const std::string& body) { return absl::StrCat("{", body, "}"); }

void HistoryInt(std::string* out, const char* key, int64_t v) {
  absl::StrAppend(out, out->empty() ? "" : ",", "\"", key, "\":", v);
}
void HistoryNum(std::string* out, const char* key, double v) {
  if (!out->empty()) out->push_back(',');
  AppendJsonField(out, key, v);
}
void HistoryStr(std::string* out, const char* key, absl::string_view v) {
  if (!out->empty()) out->push_back(',');
  AppendJsonField(out, key, v);
}

// The collective's own detail: what its node's agent found.
std::string HistoryCollectiveDetail(const v1::Collective& c,
                                    const std::vector<std::string>& labels) {
  const v1::CollectiveAnalysis& a = c.analysis();
  std::string d;
  HistoryStr(&d, "func", c.func());
  HistoryInt(&d, "seq", static_cast<int64_t>(c.seq()));
  HistoryInt(&d, "rank", c.rank());
  HistoryInt(&d, "nranks", c.nranks());
  HistoryInt(&d, "pid", c.pid());
  HistoryInt(&d, "bytes", static_cast<int64_t>(c.bytes()));
  HistoryNum(&d, "busbw_bytes_per_second", c.busbw_bytes_per_second());
  HistoryNum(&d, "duration_seconds", c.duration_seconds());
  HistoryStr(&d, "cause", common::CollectiveCauseName(a.cause()));
  HistoryStr(&d, "evidence", a.detail());
  const bool known = a.port_index() >= 0 && static_cast<size_t>(a.port_index()) < labels.size();
  HistoryStr(&d, "port", known ? labels[static_cast<size_t>(a.port_index())] : "");
  absl::StrAppend(&d, ",\"slow\":", a.slow() ? "true" : "false");
  HistoryNum(&d, "p99_seconds", a.p99_seconds());
  HistoryInt(&d, "own_bytes", static_cast<int64_t>(a.own_bytes()));
  HistoryInt(&d, "sharers_bytes", static_cast<int64_t>(a.sharers_bytes_total()));
  return HistoryObject(d);
}

std::string HistoryInstanceDetail(const CollectiveInstance& inst) {
  std::string d;
  HistoryStr(&d, "func", inst.key.func.str());
  HistoryInt(&d, "seq", static_cast<int64_t>(inst.key.seq));
  HistoryInt(&d, "nranks", inst.nranks);
  HistoryStr(&d, "cause", common::CollectiveCauseName(inst.cause));
  HistoryStr(&d, "rule", EvidenceRuleName(inst.rule));
  HistoryStr(&d, "evidence", inst.evidence);
  HistoryNum(&d, "busbw_bytes_per_second", inst.busbw);
  HistoryInt(&d, "skew_ns", inst.skew_ns);
  HistoryInt(&d, "max_duration_ns", inst.max_duration_ns);
  const bool has = inst.bottleneck >= 0 && static_cast<size_t>(inst.bottleneck) < inst.ranks.size();
  const RankEntry* b = has ? &inst.ranks[static_cast<size_t>(inst.bottleneck)] : nullptr;
  HistoryInt(&d, "bottleneck_rank", b != nullptr ? b->rank : -1);
  HistoryStr(&d, "bottleneck_node", b != nullptr ? b->node.str() : "");
  HistoryStr(&d, "bottleneck_port", b != nullptr ? b->port.str() : "");
  d += ",\"ranks\":[";
  const size_t n = std::min(inst.ranks.size(), HistoryRecorder::kMaxInstanceRanks);
  for (size_t i = 0; i < n; ++i) {
    const RankEntry& r = inst.ranks[i];
    absl::StrAppend(&d, i > 0 ? "," : "", "[", r.rank, ",");
    AppendJsonString(&d, r.node.str());
    absl::StrAppend(&d, ",", r.start_unix_ns, ",", r.end_unix_ns, "]");
  }
  d += "]";
  HistoryInt(&d, "ranks_omitted", static_cast<int64_t>(inst.ranks.size() - n));
  return HistoryObject(d);
}

std::string HistoryDiagnosisDetail(const CommDiagnosis& g, bool ended) {
  std::string d;
  HistoryStr(&d, "cause", common::CollectiveCauseName(g.cause));
  HistoryStr(&d, "rule", EvidenceRuleName(g.rule));
  HistoryStr(&d, "port", g.port);
  HistoryInt(&d, "rank", g.rank);
  HistoryStr(&d, "func", g.func);
  HistoryStr(&d, "sentence", g.sentence);
  HistoryInt(&d, "affected", static_cast<int64_t>(g.affected));
  HistoryInt(&d, "instances", static_cast<int64_t>(g.instances));
  HistoryNum(&d, "p90_seconds", g.p90_s);
  HistoryNum(&d, "baseline_p90_seconds", g.baseline_p90_s);
  // The cost as the diagnosis states it (exporters/analysis/diagnosis.h): p90 over the baseline's
  // p90, minus 1; null without a baseline.
  HistoryNum(&d, "cost_ratio", g.baseline_p90_s > 0 ? g.p90_s / g.baseline_p90_s - 1 : NAN);
  if (ended) absl::StrAppend(&d, ",\"ended\":true");
  return HistoryObject(d);
}

}  // namespace

void HistoryRecorder::OnNodeJoined(const v1::Hello& hello) {
  NodeTrack t;
  for (const v1::PortInfo& p : hello.ports())
    t.ports.push_back(PortTrack{HistoryPortLabel(p), {}, {}, {}, 0, {}, 0});
  {
    absl::MutexLock lock(&mu_);
    nodes_[hello.node()] = std::move(t);
  }
  std::string d;
  HistoryStr(&d, "agent_version", hello.agent_version());
  HistoryStr(&d, "instance", absl::StrFormat("%016x", hello.instance_id()));
  HistoryInt(&d, "ports", hello.ports_size());
  store_.Append(MakeHistoryEvent(absl::ToUnixNanos(absl::Now()), 0, "node_joined", hello.node(), 0,
                                 "", HistoryObject(d)));
}

void HistoryRecorder::OnNodeExpired(const std::string& node, absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(node);
    if (it != nodes_.end()) {
      for (PortTrack& p : it->second.ports) EndLoss(node, p);
      EndPeriod(node, it->second);
      nodes_.erase(it);
    }
  }
  store_.Append(MakeHistoryEvent(absl::ToUnixNanos(now), 0, "node_expired", node, 0, "", "{}"));
}

void HistoryRecorder::OnBatch(const std::string& node, const v1::Batch& batch) {
  RecordCollectives(node, batch);
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  NodeTrack& t = it->second;
  const int64_t end = batch.window_end_ns() + batch.unix_offset_ns();
  if (batch.has_gpu()) {
    // Each (job, node) told to the store at most every kJobNoteNs: its span's ends move by
    // no more than that (the query's 10 min lead covers it).
    const int jobs = std::min(batch.gpu().jobs_size(), static_cast<int>(kMaxJobsPerBatch));
    for (int i = 0; i < jobs; ++i) {
      const std::string& id = batch.gpu().jobs(i).id();
      if (id.empty() || id.size() > kMaxJobIdBytes) continue;
      int64_t& noted = t.jobs_noted[id];
      if (noted != 0 && end - noted < kJobNoteNs && end >= noted) continue;
      noted = end;
      store_.NoteJobNode(id, node, end);
    }
    while (t.jobs_noted.size() > kMaxJobsPerBatch) t.jobs_noted.erase(t.jobs_noted.begin());
  }
  if (!batch.early()) RecordWindow(node, batch, t);
}

template <typename Make>
void HistoryRecorder::Offer(const std::string& key, int64_t start_ns, int64_t duration, Make make) {
  const int64_t second = start_ns / 1'000'000'000;
  absl::MutexLock lock(&pick_mu_);
  Pick& p = picks_[key];
  if (p.count > 0 && p.second != second) WritePick(p);
  p.second = second;
  ++p.count;
  if (duration > p.duration) {
    p.duration = duration;
    p.event = make();
  }
}

void HistoryRecorder::WritePick(Pick& p) {
  if (p.count == 0) return;
  std::string& d = p.event.detail_json;
  if (d.size() >= 2 && d.back() == '}') {
    d.pop_back();
    absl::StrAppend(&d, ",\"similar_in_second\":", p.count - 1, "}");
  }
  store_.Append(std::move(p.event));
  p = Pick{};
}

void HistoryRecorder::RecordCollectives(const std::string& node, const v1::Batch& batch) {
  std::vector<std::string> labels;
  bool labels_read = false;
  for (const v1::Collective& c : batch.collectives()) {
    if (!c.has_analysis()) continue;
    const v1::CollectiveCause cause = c.analysis().cause();
    const bool network = cause == v1::COLLECTIVE_CAUSE_NETWORK_SATURATED ||
                         cause == v1::COLLECTIVE_CAUSE_NETWORK_LOSSY;
    if (!c.analysis().slow() && !network) continue;
    if (!labels_read) {
      labels_read = true;
      absl::MutexLock lock(&mu_);
      auto it = nodes_.find(node);
      if (it != nodes_.end()) {
        for (const PortTrack& p : it->second.ports) labels.push_back(p.label);
      }
    }
    const int64_t start = c.start_ns() + batch.unix_offset_ns();
    const int64_t end = c.end_ns() + batch.unix_offset_ns();
    Offer(absl::StrCat("c|", node, "|", c.comm_hash(), "|", static_cast<int>(cause)), start,
          end - start, [&] {
            return MakeHistoryEvent(start, end, "collective", node, c.comm_hash(),
                                    JobOf(c.comm_hash()), HistoryCollectiveDetail(c, labels));
          });
  }
}

void HistoryRecorder::RecordWindow(const std::string& node, const v1::Batch& batch, NodeTrack& t) {
  const int64_t off = batch.unix_offset_ns();
  const int64_t start = batch.window_start_ns() + off, end = batch.window_end_ns() + off;
  for (const v1::Microburst& m : batch.microbursts()) {
    if (m.port_index() >= t.ports.size()) continue;
    const std::string& port = t.ports[m.port_index()].label;
    const char* dir = m.direction() == v1::DIRECTION_RECEIVE ? "receive" : "transmit";
    const int64_t start = m.start_ns() + off;
    // The largest burst (by bytes) of each port and direction in a second.
    Offer(absl::StrCat("m|", node, "|", port, "|", dir), start, static_cast<int64_t>(m.bytes()),
          [&] {
            std::string d;
            HistoryStr(&d, "port", port);
            HistoryStr(&d, "direction", dir);
            HistoryNum(&d, "peak_utilization", m.peak_utilization());
            HistoryInt(&d, "bytes", static_cast<int64_t>(m.bytes()));
            return MakeHistoryEvent(start, start + m.duration_ns(), "microburst", node, 0, "",
                                    HistoryObject(d));
          });
  }
  for (const v1::LinkEvent& e : batch.link_events()) {
    if (e.port_index() >= t.ports.size()) continue;
    std::string d;
    HistoryStr(&d, "port", t.ports[e.port_index()].label);
    HistoryStr(&d, "what", e.what());
    HistoryInt(&d, "old", static_cast<int64_t>(e.old_value()));
    HistoryInt(&d, "new", static_cast<int64_t>(e.new_value()));
    store_.Append(
        MakeHistoryEvent(e.time_ns() + off, 0, "link_state", node, 0, "", HistoryObject(d)));
  }
  // Captured losses are per flow, not per port: they count into every open episode's figure of
  // the node's captured interface, here the ports whose counters also saw loss.
  const uint64_t captured =
      batch.has_capture() ? static_cast<uint64_t>(batch.capture().loss_events_size()) : 0;
  if (t.period_start == 0) t.period_start = start;
  for (const v1::PortWindow& w : batch.ports()) {
    if (w.port_index() >= t.ports.size()) continue;
    PortTrack& p = t.ports[w.port_index()];
    const uint64_t lost = LossEventsInWindow(w);
    if (lost > 0) {
      if (p.loss.start == 0) p.loss.start = start;
      p.loss.last = end;
      p.loss.events += lost;
      p.loss.captured += captured;
      if (end - p.loss.start >= kMaxLossEpisodeNs) EndLoss(node, p);
    } else {
      EndLoss(node, p);
    }
    if (w.utilization_valid()) {
      p.tx.mean_sum += w.transmit().mean_utilization();
      p.tx.peak = std::max(p.tx.peak, w.transmit().peak_utilization());
      ++p.tx.windows;
      p.rx.mean_sum += w.receive().mean_utilization();
      p.rx.peak = std::max(p.rx.peak, w.receive().peak_utilization());
      ++p.rx.windows;
    }
    for (const v1::PriorityPause& pp : w.derived().pause()) {
      p.pause_ratio = std::max(p.pause_ratio, pp.time_ratio());
    }
  }
  t.last_end = std::max(t.last_end, end);
  if (end - t.period_start >= kHistoryUtilizationPeriodNs) EndPeriod(node, t);
}

void HistoryRecorder::EndLoss(const std::string& node, PortTrack& p) {
  if (p.loss.start == 0) return;
  std::string d;
  HistoryStr(&d, "port", p.label);
  HistoryInt(&d, "loss_events", static_cast<int64_t>(p.loss.events));
  HistoryInt(&d, "captured_loss_events", static_cast<int64_t>(p.loss.captured));
  store_.Append(MakeHistoryEvent(p.loss.start, p.loss.last, "loss", node, 0, "", HistoryObject(d)));
  p.loss = LossEpisode{};
}

void HistoryRecorder::EndPeriod(const std::string& node, NodeTrack& t) {
  if (t.period_start == 0) return;
  // {"ports":{"mlx5_0:1":[tx mean, tx peak, rx mean, rx peak, pause share],...}}: compact, and
  // only the ports whose figures moved since they were last written (kUtilizationStep) or that
  // were last written kUtilizationKeyframeNs ago: a port's value holds until its next entry (a
  // Trace Event Format counter's meaning), and a steady training job writes one a minute.
  std::string d = "{\"ports\":{";
  bool any = false;
  for (PortTrack& p : t.ports) {
    if (p.tx.windows == 0) continue;
    const double n = static_cast<double>(p.tx.windows);
    const std::array<double, 5> v = {p.tx.mean_sum / n, p.tx.peak, p.rx.mean_sum / n, p.rx.peak,
                                     p.pause_ratio};
    p.tx = p.rx = Accumulated{};
    p.pause_ratio = 0;
    bool moved = p.written_ns == 0 || t.last_end - p.written_ns >= kUtilizationKeyframeNs;
    for (size_t i = 0; i < v.size(); ++i)
      moved = moved || std::abs(v[i] - p.written[i]) > kUtilizationStep;
    if (!moved) continue;
    p.written = v;
    p.written_ns = t.last_end;
    if (any) d.push_back(',');
    any = true;
    AppendJsonString(&d, p.label);
    d += ":[";
    for (double x : v) absl::StrAppendFormat(&d, "%s%.4g", d.back() == '[' ? "" : ",", x);
    d += "]";
  }
  d += "}}";
  if (any) {
    store_.Append(
        MakeHistoryEvent(t.period_start, t.last_end, "utilization", node, 0, "", std::move(d)));
  }
  t.period_start = 0;
}

namespace {

int64_t HistoryInstanceSecond(const CollectiveInstance& inst) {
  int64_t start = INT64_MAX;
  for (const RankEntry& r : inst.ranks) start = std::min(start, r.start_unix_ns);
  return start / 1'000'000'000;
}

}  // namespace

bool HistoryRecorder::WantsInstance(const CollectiveInstance& inst) {
  if (inst.ranks.empty()) return false;
  const int64_t second = HistoryInstanceSecond(inst);
  absl::MutexLock lock(&inst_mu_);
  InstanceSlot& slot = inst_slots_[{inst.key.comm, static_cast<int>(inst.cause)}];
  if (slot.second != second) {
    if (slot.pick) inst_ready_.emplace_back(std::move(*slot.pick), slot.count);
    slot = InstanceSlot{};
    slot.second = second;
  }
  ++slot.count;
  if (inst.max_duration_ns <= slot.best) return false;
  slot.best = inst.max_duration_ns;
  return true;
}

void HistoryRecorder::OnInstances(std::vector<CollectiveInstance>&& instances) {
  absl::MutexLock lock(&inst_mu_);
  for (CollectiveInstance& inst : instances) {
    if (inst.ranks.empty()) continue;
    auto it = inst_slots_.find({inst.key.comm, static_cast<int>(inst.cause)});
    // Another thread's longer one of the same second may have come in since WantsInstance.
    if (it == inst_slots_.end() || it->second.second != HistoryInstanceSecond(inst) ||
        it->second.best != inst.max_duration_ns) {
      continue;
    }
    it->second.pick = std::move(inst);
  }
}

void HistoryRecorder::PickInstances(int64_t before_second) {
  std::vector<std::pair<CollectiveInstance, uint32_t>> ready;
  {
    absl::MutexLock lock(&inst_mu_);
    ready.swap(inst_ready_);
    for (auto it = inst_slots_.begin(); it != inst_slots_.end();) {
      if (it->second.second >= before_second) {
        ++it;
        continue;
      }
      if (it->second.pick) ready.emplace_back(std::move(*it->second.pick), it->second.count);
      inst_slots_.erase(it++);
    }
  }
  for (const auto& [inst, count] : ready) {
    int64_t start = INT64_MAX, end = 0;
    for (const RankEntry& r : inst.ranks) {
      start = std::min(start, r.start_unix_ns);
      end = std::max(end, r.end_unix_ns);
    }
    const bool has =
        inst.bottleneck >= 0 && static_cast<size_t>(inst.bottleneck) < inst.ranks.size();
    std::string detail = HistoryInstanceDetail(inst);
    detail.pop_back();
    absl::StrAppend(&detail, ",\"similar_in_second\":", count - 1, "}");
    store_.Append(
        MakeHistoryEvent(start, end, "instance",
                         has ? inst.ranks[static_cast<size_t>(inst.bottleneck)].node.str() : "",
                         inst.key.comm, JobOf(inst.key.comm), std::move(detail)));
  }
}

void HistoryRecorder::Drain() {
  PickInstances(INT64_MAX);
  {
    absl::MutexLock lock(&pick_mu_);
    for (auto& [key, p] : picks_) WritePick(p);
    picks_.clear();
  }
  absl::MutexLock lock(&mu_);
  for (auto& [node, t] : nodes_) {
    for (PortTrack& p : t.ports) EndLoss(node, p);
    EndPeriod(node, t);
  }
}

void HistoryRecorder::Tick(int64_t now_unix_ns) {
  // Seconds before the last: no more of theirs is coming (batches arrive within the agents'
  // window, 1 s).
  PickInstances(now_unix_ns / 1'000'000'000 - 1);
  {
    // Picks of seconds before the last: no more of theirs is coming (batches arrive within the
    // agents' window, 1 s).
    absl::MutexLock lock(&pick_mu_);
    for (auto it = picks_.begin(); it != picks_.end();) {
      if (it->second.second < now_unix_ns / 1'000'000'000 - 1) {
        WritePick(it->second);
        it = picks_.erase(it);
      } else {
        ++it;
      }
    }
  }
  {
    absl::MutexLock lock(&mu_);
    // A node whose batches stopped (its agent gone, or expiring) ends what it had open.
    for (auto& [node, t] : nodes_) {
      if (t.last_end == 0 || now_unix_ns - t.last_end < kHistoryUtilizationPeriodNs) continue;
      for (PortTrack& p : t.ports) EndLoss(node, p);
      EndPeriod(node, t);
    }
  }
  std::map<uint64_t, CommDiagnosis> now;
  for (CommDiagnosis& g : state_.cross_rank().Diagnoses()) {
    if (g.cause != v1::COLLECTIVE_CAUSE_NORMAL) now[g.comm] = std::move(g);
  }
  absl::MutexLock lock(&diag_mu_);
  for (auto it = diagnoses_.begin(); it != diagnoses_.end();) {
    auto n = now.find(it->first);
    const bool same =
        n != now.end() && DiagnosisKey{n->second.cause, n->second.node, n->second.port,
                                       n->second.rank} == it->second.first;
    if (same) {
      it->second.second = n->second;  // its latest figures, for the end's cost
      ++it;
      continue;
    }
    const CommDiagnosis& g = it->second.second;
    store_.Append(MakeHistoryEvent(now_unix_ns, 0, "diagnosis_ended", g.node, it->first,
                                   JobOf(it->first), HistoryDiagnosisDetail(g, true)));
    it = diagnoses_.erase(it);
  }
  for (auto& [comm, g] : now) {
    if (diagnoses_.count(comm) > 0) continue;
    store_.Append(MakeHistoryEvent(g.since_unix_ns > 0 ? g.since_unix_ns : now_unix_ns, 0,
                                   "diagnosis_began", g.node, comm, JobOf(comm),
                                   HistoryDiagnosisDetail(g, false)));
    DiagnosisKey key{g.cause, g.node, g.port, g.rank};
    diagnoses_.emplace(comm, std::make_pair(std::move(key), std::move(g)));
  }
}

}  // namespace fabricscope::exporters
