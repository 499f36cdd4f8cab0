#include "exporters/history/history_recorder.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "collectors/common/json_text.h"
#include "exporters/analysis/loss_patterns.h"
#include "exporters/history/history_details.h"

namespace fabricscope::exporters {

using common::AppendJsonString;

namespace {

std::string HistoryPortLabel(const v1::PortInfo& p) {
  return absl::StrCat(p.device(), ":", p.port());  // as /heatmap/links names a port
}

// A utilization figure as the agent sent it, 0 when it is not a finite number.
double Finite(double v) { return std::isfinite(v) ? v : 0; }

constexpr int64_t kHistorySecondNs = 1'000'000'000;

// Floor division: the Unix second of a time (negative times included).
int64_t SecondOf(int64_t ns) { return ns / kHistorySecondNs - (ns % kHistorySecondNs < 0); }

}  // namespace

int64_t HistoryRecorder::Now() const {
  return now_ != nullptr ? now_() : absl::ToUnixNanos(absl::Now());
}

bool HistoryRecorder::InBounds(int64_t unix_ns) {
  const int64_t now = Now();
  if (unix_ns >= now - kMaxPastNs && unix_ns <= now + kMaxFutureNs) return true;
  store_.CountRefused(1);
  return false;
}

void HistoryRecorder::EndNode(const std::string& node, NodeTrack& t) {
  for (PortTrack& p : t.ports) EndLoss(node, p);
  EndPeriod(node, t);
}

void HistoryRecorder::OnNodeJoined(const v1::Hello& hello) {
  NodeTrack t;
  for (const v1::PortInfo& p : hello.ports()) {
    t.ports.emplace_back();
    t.ports.back().label = HistoryPortLabel(p);
  }
  {
    absl::MutexLock lock(&mu_);
    // A new instance of a known agent (a restart): what the old one had open ends here.
    auto it = nodes_.find(hello.node());
    if (it != nodes_.end()) EndNode(hello.node(), it->second);
    nodes_[hello.node()] = std::move(t);
  }
  store_.Append(
      MakeHistoryEvent(Now(), 0, "node_joined", hello.node(), 0, "", HistoryJoinedDetail(hello)));
}

void HistoryRecorder::OnNodeExpired(const std::string& node, absl::Time now) {
  {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(node);
    if (it != nodes_.end()) {
      EndNode(node, it->second);
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
  t.last_seen = Now();
  int64_t end = 0;
  if (!HistoryAdd(batch.window_end_ns(), batch.unix_offset_ns(), &end) || !InBounds(end)) return;
  if (batch.has_gpu()) {
    // Each (job, node) told to the store at most every kJobNoteNs: its span's ends move by
    // no more than that (the query's lead and tail cover it).
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
  if (!InBounds(start_ns)) return;
  absl::MutexLock lock(&pick_mu_);
  auto it = picks_.find({key, SecondOf(start_ns)});
  if (it == picks_.end()) {
    if (picks_.size() >= kMaxPicks) {
      store_.CountRefused(1);
      return;
    }
    it = picks_.emplace(std::make_pair(key, SecondOf(start_ns)), Pick{}).first;
  }
  Pick& p = it->second;
  if (p.count++ == 0 || duration > p.duration) {
    p.duration = duration;
    p.event = make();
  }
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
    int64_t start = 0, end = 0;
    if (!HistoryAdd(c.start_ns(), batch.unix_offset_ns(), &start) ||
        !HistoryAdd(c.end_ns(), batch.unix_offset_ns(), &end) || end < start) {
      store_.CountRefused(1);
      continue;
    }
    if (!labels_read) {
      labels_read = true;
      absl::MutexLock lock(&mu_);
      auto it = nodes_.find(node);
      if (it != nodes_.end()) {
        for (const PortTrack& p : it->second.ports) labels.push_back(p.label);
      }
    }
    Offer(absl::StrCat("c|", node, "|", c.comm_hash(), "|", static_cast<int>(cause)), start,
          end - start, [&] {
            return MakeHistoryEvent(start, end, "collective", node, c.comm_hash(),
                                    JobOf(c.comm_hash()),
                                    HistoryCollectiveDetail(c, labels, batch.unix_offset_ns()));
          });
  }
}

void HistoryRecorder::RecordWindow(const std::string& node, const v1::Batch& batch, NodeTrack& t) {
  const int64_t off = batch.unix_offset_ns();
  int64_t start = 0, end = 0;
  if (!HistoryAdd(batch.window_start_ns(), off, &start) ||
      !HistoryAdd(batch.window_end_ns(), off, &end)) {
    return;
  }
  for (const v1::Microburst& m : batch.microbursts()) {
    int64_t at = 0, until = 0;
    if (m.port_index() >= t.ports.size() || !HistoryAdd(m.start_ns(), off, &at) ||
        !HistoryAdd(at, std::max<int64_t>(0, m.duration_ns()), &until)) {
      continue;
    }
    const std::string& port = t.ports[m.port_index()].label;
    const char* dir = m.direction() == v1::DIRECTION_RECEIVE ? "receive" : "transmit";
    // The largest burst (by bytes) of each port and direction in a second.
    Offer(absl::StrCat("m|", node, "|", port, "|", dir), at,
          static_cast<int64_t>(std::min<uint64_t>(m.bytes(), INT64_MAX)), [&] {
            return MakeHistoryEvent(
                at, until, "microburst", node, 0, "",
                HistoryMicroburstDetail(port, dir, m.peak_utilization(), m.bytes()));
          });
  }
  const int links = std::min(batch.link_events_size(), static_cast<int>(kMaxLinkEventsPerBatch));
  for (int i = 0; i < links; ++i) {
    const v1::LinkEvent& e = batch.link_events(i);
    int64_t at = 0;
    if (e.port_index() >= t.ports.size() || !HistoryAdd(e.time_ns(), off, &at) || !InBounds(at)) {
      continue;
    }
    store_.Append(MakeHistoryEvent(
        at, 0, "link_state", node, 0, "",
        HistoryLinkDetail(t.ports[e.port_index()].label, e.what(), e.old_value(), e.new_value())));
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
      p.tx.mean_sum += Finite(w.transmit().mean_utilization());
      p.tx.peak = std::max(p.tx.peak, Finite(w.transmit().peak_utilization()));
      ++p.tx.windows;
      p.rx.mean_sum += Finite(w.receive().mean_utilization());
      p.rx.peak = std::max(p.rx.peak, Finite(w.receive().peak_utilization()));
      ++p.rx.windows;
    }
    for (const v1::PriorityPause& pp : w.derived().pause()) {
      p.pause_ratio = std::max(p.pause_ratio, Finite(pp.time_ratio()));
    }
  }
  t.last_end = std::max(t.last_end, end);
  if (end - t.period_start >= kHistoryUtilizationPeriodNs) EndPeriod(node, t);
}

void HistoryRecorder::EndLoss(const std::string& node, PortTrack& p) {
  if (p.loss.start == 0) return;
  store_.Append(MakeHistoryEvent(p.loss.start, p.loss.last, "loss", node, 0, "",
                                 HistoryLossDetail(p.label, p.loss.events, p.loss.captured)));
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

void HistoryRecorder::OnInstance(const CollectiveInstance& inst) {
  if (inst.ranks.empty()) return;
  int64_t start = INT64_MAX;
  for (const RankEntry& r : inst.ranks) start = std::min(start, r.start_unix_ns);
  const int64_t now = Now();
  absl::MutexLock lock(&inst_mu_);
  // As InBounds, without the store's lock under the matcher's (counted when written instead).
  if (start < now - kMaxPastNs || start > now + kMaxFutureNs) return;
  const std::tuple<uint64_t, int, int64_t> key{inst.key.comm, static_cast<int>(inst.cause),
                                               SecondOf(start)};
  auto it = inst_picks_.find(key);
  if (it == inst_picks_.end()) {
    if (inst_picks_.size() >= kMaxPicks) return;
    it = inst_picks_.emplace(key, InstancePick{}).first;
  }
  InstancePick& p = it->second;
  if (p.count++ == 0 || inst.max_duration_ns > p.duration) {
    p.duration = inst.max_duration_ns;
    p.instance = inst;  // the one copy: only the longest of its second so far
  }
}

void HistoryRecorder::WriteInstance(const CollectiveInstance& inst, uint32_t count) {
  int64_t start = INT64_MAX, end = INT64_MIN;
  for (const RankEntry& r : inst.ranks) {
    start = std::min(start, r.start_unix_ns);
    end = std::max(end, r.end_unix_ns);
  }
  const bool has = inst.bottleneck >= 0 && static_cast<size_t>(inst.bottleneck) < inst.ranks.size();
  store_.Append(MakeHistoryEvent(
      start, end, "instance",
      has ? inst.ranks[static_cast<size_t>(inst.bottleneck)].node.str() : "", inst.key.comm,
      JobOf(inst.key.comm), WithSimilar(HistoryInstanceDetail(inst), count - 1)));
}

void HistoryRecorder::WritePicks(int64_t before_second) {
  std::vector<std::pair<CollectiveInstance, uint32_t>> instances;
  {
    absl::MutexLock lock(&inst_mu_);
    for (auto it = inst_picks_.begin(); it != inst_picks_.end();) {
      if (std::get<2>(it->first) >= before_second) {
        ++it;
        continue;
      }
      if (it->second.instance)
        instances.emplace_back(std::move(*it->second.instance), it->second.count);
      inst_picks_.erase(it++);
    }
  }
  for (const auto& [inst, count] : instances) WriteInstance(inst, count);
  absl::MutexLock lock(&pick_mu_);
  for (auto it = picks_.begin(); it != picks_.end();) {
    if (it->first.second >= before_second) {
      ++it;
      continue;
    }
    Pick& p = it->second;
    p.event.detail_json = WithSimilar(std::move(p.event.detail_json), p.count - 1);
    store_.Append(std::move(p.event));
    it = picks_.erase(it);
  }
}

void HistoryRecorder::Drain() {
  WritePicks(INT64_MAX);
  absl::MutexLock lock(&mu_);
  for (auto& [node, t] : nodes_) EndNode(node, t);
}

void HistoryRecorder::Tick(int64_t now_unix_ns) {
  WritePicks(SecondOf(now_unix_ns) - kPickGraceSeconds);
  {
    absl::MutexLock lock(&mu_);
    // A node whose batches stopped (its agent gone, or expiring) ends what it had open; by the
    // aggregator's clock, not the agent's.
    for (auto& [node, t] : nodes_) {
      if (t.last_seen == 0 || now_unix_ns - t.last_seen < kHistoryUtilizationPeriodNs) continue;
      EndNode(node, t);
    }
  }
  TrackDiagnoses(now_unix_ns);
}

void HistoryRecorder::TrackDiagnoses(int64_t now_unix_ns) {
  std::map<uint64_t, CommDiagnosis> now;
  for (CommDiagnosis& g : state_.OwnedDiagnoses()) {
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
