#include "exporters/analysis/link_analysis.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectors/common/utilization_codec.h"
#include "collectors/priority_stat.h"
#include "exporters/analysis/imbalance.h"
#include "exporters/analysis/loss_patterns.h"

namespace fabricscope::exporters {

using common::DecodeUtilization;
using common::EncodeUtilization;
using common::kUtilizationMissing;

namespace {

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
// Ceiling of a / b for a >= 0, b > 0, without the overflow of (a + b - 1) / b near INT64_MAX
// (a heat-map span of centuries).
int64_t CeilDiv(int64_t a, int64_t b) { return a / b + (a % b != 0); }

std::string LinkName(const std::string& node, const v1::PortInfo& p) {
  return absl::StrCat(node, "/", p.device(), ":", p.port());
}

}  // namespace

template <typename T>
bool LinkAnalysis::Ring<T>::Reach(int64_t abs) {
  const int64_t n = static_cast<int64_t>(v.size());
  if (n == 0) return false;
  if (latest == INT64_MIN) {
    latest = abs;
    std::fill(v.begin(), v.end(), missing);
    return true;
  }
  if (abs <= latest) return abs > latest - n;
  if (abs - latest >= n) {
    std::fill(v.begin(), v.end(), missing);
  } else {
    for (int64_t i = latest + 1; i <= abs; ++i) (*this)[i] = missing;
  }
  latest = abs;
  return true;
}

template <typename T>
T LinkAnalysis::Ring<T>::Get(int64_t abs) const {
  const int64_t n = static_cast<int64_t>(v.size());
  if (n == 0 || latest == INT64_MIN || abs > latest || abs <= latest - n) return missing;
  return v[static_cast<size_t>(((abs % n) + n) % n)];
}

LinkAnalysis::LinkAnalysis(LinkAnalysisOptions options)
    : options_(options),
      ring_buckets_(static_cast<size_t>(std::max<double>(
          1, std::ceil(options.history_seconds * 1e9 /
                       static_cast<double>(std::max<int64_t>(1, options.bucket_ns)))))) {}

void LinkAnalysis::OnHello(const v1::Hello& hello) {
  absl::MutexLock lock(&mu_);
  NodeLinks& n = nodes_[hello.node()];
  if (n.instance_id != hello.instance_id() ||
      n.ports.size() != static_cast<size_t>(hello.ports_size())) {
    n = NodeLinks();
    n.instance_id = hello.instance_id();
    n.window_seconds = hello.window_seconds();
    n.ports.resize(static_cast<size_t>(hello.ports_size()));
    for (PortLinks& p : n.ports) {
      p.tx.Init(ring_buckets_, kUtilizationMissing);
      p.rx.Init(ring_buckets_, kUtilizationMissing);
    }
    const size_t period_n = static_cast<size_t>(
        std::max<double>(16, std::ceil(options_.period_history_seconds * 1e9 /
                                       static_cast<double>(options_.period_bucket_ns))));
    n.period_bytes.Init(period_n, NAN);
  }
  for (int i = 0; i < hello.ports_size(); ++i)
    n.ports[static_cast<size_t>(i)].info = hello.ports(i);
  n.addresses.assign(hello.addresses().begin(), hello.addresses().end());
}

void LinkAnalysis::IngestSeries(NodeLinks& n, const v1::UtilizationSeries& s, int64_t offset_ns) {
  if (s.port_index() >= n.ports.size() || s.bucket_ns() <= 0) return;
  PortLinks& p = n.ports[s.port_index()];
  const int64_t base = options_.bucket_ns;
  const int64_t start = s.start_ns() + offset_ns;
  const int64_t ab = s.bucket_ns();
  const double rate = static_cast<double>(p.info.line_rate_bytes_per_second());
  for (int dir = 0; dir < 2; ++dir) {
    const std::string& codes = dir == 0 ? s.transmit() : s.receive();
    if (codes.empty()) continue;
    Ring<uint8_t>& ring = dir == 0 ? p.tx : p.rx;
    const int64_t end = start + ab * static_cast<int64_t>(codes.size());
    // Each stored bucket: the mean of the agent buckets overlapping it (most often one).
    for (int64_t j = FloorDiv(start, base); j * base < end; ++j) {
      const int64_t lo = std::max(j * base, start), hi = std::min((j + 1) * base, end);
      if (hi <= lo) continue;
      const int64_t first = (lo - start) / ab, last = (hi - 1 - start) / ab;
      double sum = 0;
      int count = 0;
      for (int64_t k = first; k <= last && k < static_cast<int64_t>(codes.size()); ++k) {
        const uint8_t c = static_cast<uint8_t>(codes[static_cast<size_t>(k)]);
        if (c == kUtilizationMissing) continue;
        sum += DecodeUtilization(c);
        ++count;
      }
      if (count == 0 || !ring.Reach(j)) continue;
      ring[j] = EncodeUtilization(sum / count);
    }
    // The node's bytes per period bucket (approximate: utilization x rate x bucket).
    if (rate <= 0) continue;
    const int64_t pb = options_.period_bucket_ns;
    for (size_t k = 0; k < codes.size(); ++k) {
      const uint8_t c = static_cast<uint8_t>(codes[k]);
      if (c == kUtilizationMissing) continue;
      const int64_t mid = start + ab * static_cast<int64_t>(k) + ab / 2;
      const int64_t j = FloorDiv(mid, pb);
      if (!n.period_bytes.Reach(j)) continue;
      double& cell = n.period_bytes[j];
      if (std::isnan(cell)) cell = 0;
      cell += DecodeUtilization(c) * rate * static_cast<double>(ab) / 1e9;
    }
  }
}

void LinkAnalysis::CheckAnomaly(const std::string& node, NodeLinks& n, std::deque<double>& history,
                                const char* kind, double value, int64_t unix_ns) {
  if (history.size() >= options_.min_baseline_windows) {
    const RobustZ z = RobustZScore(std::vector<double>(history.begin(), history.end()), value);
    if (std::fabs(z.z) > options_.anomaly_z) {
      const std::string k = absl::StrCat(kind, z.z > 0 ? "_high" : "_low");
      ++n.anomalies_total[k];
      anomalies_.push_back(LinkAnomaly{node, k, unix_ns, value, z.median, z.scale, z.z});
      while (anomalies_.size() > options_.recent_anomalies) anomalies_.pop_front();
    }
  }
  history.push_back(value);
  while (history.size() > options_.baseline_windows) history.pop_front();
}

void LinkAnalysis::OnBatch(const std::string& node, const v1::Batch& batch,
                           std::vector<LinkRecording>* requested) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  NodeLinks& n = it->second;
  const int64_t offset = batch.unix_offset_ns();
  const int64_t end_unix = batch.window_end_ns() + offset;
  for (const v1::PortWindow& pw : batch.ports()) {  // a link that retrained (cluster_state.cc)
    if (pw.port_index() < n.ports.size() && pw.line_rate_bytes_per_second() > 0) {
      n.ports[pw.port_index()].info.set_line_rate_bytes_per_second(pw.line_rate_bytes_per_second());
    }
  }
  for (const v1::UtilizationSeries& s : batch.utilization_series()) IngestSeries(n, s, offset);

  // Imbalance and per-window totals.
  bool any_rdma = false;
  for (const v1::PortWindow& pw : batch.ports()) {
    if (pw.port_index() < n.ports.size() && n.ports[pw.port_index()].info.rdma()) any_rdma = true;
  }
  std::vector<double> bytes[2];
  double total_bytes = 0;
  std::vector<PriorityLoss> priority_loss;
  for (const v1::PortWindow& pw : batch.ports()) {
    if (pw.port_index() >= n.ports.size()) continue;
    PortLinks& p = n.ports[pw.port_index()];
    for (const v1::CounterValue& c : pw.counters()) {
      if (c.delta() == 0 || !IsLossCounter(c)) continue;
      if (std::optional<collectors::EthtoolStatName> s = collectors::ParsePriorityStat(c.name())) {
        priority_loss.push_back(PriorityLoss{pw.port_index(), s->priority, c.delta()});
      }
    }
    const uint64_t loss = LossEventsInWindow(pw);
    p.loss.push_back(loss);
    p.loss_sum += loss;
    while (p.loss.size() > options_.loss_windows) {
      p.loss_sum -= p.loss.front();
      p.loss.pop_front();
    }
    if (p.info.node_level()) continue;
    total_bytes += static_cast<double>(pw.transmit().bytes() + pw.receive().bytes());
    if (any_rdma && !p.info.rdma()) continue;
    if (pw.transmit().has_bytes()) bytes[0].push_back(static_cast<double>(pw.transmit().bytes()));
    if (pw.receive().has_bytes()) bytes[1].push_back(static_cast<double>(pw.receive().bytes()));
  }
  if (batch.ports_size() > 0) {
    n.priority_loss.push_back(std::move(priority_loss));
    while (n.priority_loss.size() > options_.loss_windows) n.priority_loss.pop_front();
  }
  for (int d = 0; d < 2; ++d) n.imbalance[d] = CoefficientOfVariation(bytes[d]);
  CheckAnomaly(node, n, n.window_bytes, "bytes", total_bytes, end_unix);
  CheckAnomaly(node, n, n.window_bursts, "microbursts",
               static_cast<double>(batch.microbursts_size()), end_unix);

  if (batch.has_capture()) {
    PeerWindow pw{end_unix, {}};
    for (const v1::PeerBytes& pb : batch.capture().top_peers()) {
      pw.bytes.push_back({{pb.src(), pb.dst()}, pb.bytes()});
    }
    n.peers.push_back(std::move(pw));
    const int64_t keep_from =
        end_unix - static_cast<int64_t>(options_.history_seconds * 1e9) - 1'000'000'000;
    while (!n.peers.empty() && n.peers.front().end_unix_ns < keep_from) n.peers.pop_front();
    for (const v1::PacketLossEvent& e : batch.capture().loss_events()) {
      n.loss_events.push_back({{e.src(), e.dst()}, e.time_unix_ns()});
    }
    while (n.loss_events.size() > 1024) n.loss_events.pop_front();
  }
  for (const v1::FlightRecording& r : batch.flight_recordings()) {
    if (r.port_index() >= n.ports.size()) continue;
    const v1::PortInfo& info = n.ports[r.port_index()].info;
    if (r.request_id() != 0) {
      if (requested)
        requested->push_back(LinkRecording{r, offset, node, info.device(), info.port()});
      continue;
    }
    n.recordings.push_back(LinkRecording{r, offset, node, info.device(), info.port()});
    while (n.recordings.size() > options_.recent_recordings_per_node) n.recordings.pop_front();
  }
  if (batch.has_flight_recorder()) {
    n.has_flight_recorder = true;
    n.flight_recorder_bytes = batch.flight_recorder().bytes();
    n.flight_recorder_seconds = batch.flight_recorder().seconds();
    n.flight_recorder_requests_dropped = batch.flight_recorder().requests_dropped_total();
  }
  if (++n.batches_since_period >= options_.period_every_batches &&
      n.period_bytes.latest != INT64_MIN) {
    n.batches_since_period = 0;
    // Every bucket but the newest (its window may continue in the next batch).
    const int64_t count = static_cast<int64_t>(n.period_bytes.v.size());
    std::vector<double> series;
    series.reserve(static_cast<size_t>(count));
    for (int64_t j = n.period_bytes.latest - count + 1; j < n.period_bytes.latest; ++j) {
      series.push_back(n.period_bytes.Get(j));
    }
    // Leading buckets before the first data are not part of the series.
    size_t first = 0;
    while (first < series.size() && std::isnan(series[first])) ++first;
    series.erase(series.begin(), series.begin() + static_cast<std::ptrdiff_t>(first));
    n.period = DetectPeriod(series, static_cast<double>(options_.period_bucket_ns) / 1e9);
  }
}

std::optional<PeriodEstimate> LinkAnalysis::StepPeriod(const std::string& node) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node);
  return it == nodes_.end() ? std::nullopt : it->second.period;
}

uint64_t LinkAnalysis::series_bytes() const {
  absl::MutexLock lock(&mu_);
  uint64_t b = 0;
  for (const auto& [name, n] : nodes_) {
    for (const PortLinks& p : n.ports) b += p.tx.v.capacity() + p.rx.v.capacity();
    b += n.period_bytes.v.capacity() * sizeof(double);
  }
  return b;
}

HeatmapModel LinkAnalysis::LinksHeatmap(const LinkQuery& q) const {
  HeatmapModel m;
  m.row_axis = "link (node/device:port direction)";
  m.col_axis = "time (UTC)";
  m.value_label = "utilization of line rate";
  m.scale_min = 0;
  m.scale_max = 1;
  const int64_t base = options_.bucket_ns;
  absl::MutexLock lock(&mu_);
  struct Row {
    const Ring<uint8_t>* ring;
    std::string label;
    const std::string* node;
    std::string port;  // device:port
  };
  std::vector<Row> rows;
  int64_t newest = INT64_MIN;
  for (const auto& [name, n] : nodes_) {
    if (!q.node.empty() && name != q.node) continue;
    if (!q.nodes.empty() && !q.nodes.contains(name)) continue;
    for (const PortLinks& p : n.ports) {
      if (p.info.node_level()) continue;
      const std::pair<const char*, const Ring<uint8_t>*> dirs[] = {{"transmit", &p.tx},
                                                                   {"receive", &p.rx}};
      for (const auto& [dname, ring] : dirs) {
        if (!q.direction.empty() && q.direction != dname) continue;
        if (ring->latest == INT64_MIN) continue;
        newest = std::max(newest, ring->latest);
        rows.push_back(Row{ring,
                           absl::StrCat(LinkName(name, p.info), " ", dname[0] == 't' ? "tx" : "rx"),
                           &name, absl::StrCat(p.info.device(), ":", p.info.port())});
      }
    }
  }
  // Without any data the window ends now (not at the epoch).
  const int64_t to = q.to_unix_ns > 0      ? q.to_unix_ns
                     : newest != INT64_MIN ? (newest + 1) * base
                                           : absl::ToUnixNanos(absl::Now());
  const int64_t span = q.from_unix_ns > 0 && q.from_unix_ns < to
                           ? to - q.from_unix_ns
                           : static_cast<int64_t>(std::max(q.seconds, 0.001) * 1e9);
  int64_t bucket = std::max<int64_t>(base, q.bucket_ns);
  bucket = (bucket + base - 1) / base * base;
  if (rows.empty()) {
    // One column for the whole window, and the reason, rather than an empty plot thousands of
    // pixels wide.
    bucket = std::max(base, CeilDiv(span, base) * base);
    if (!q.node.empty() && !nodes_.contains(q.node)) {
      m.note = absl::StrCat("no node named \"", q.node, "\" has sent link utilization (",
                            nodes_.size(), nodes_.size() == 1 ? " node has)" : " nodes have)");
    } else {
      m.note =
          "no link utilization in this window: it needs the port's line rate (its sysfs speed, "
          "or --line-rate=IFACE=RATE on the agent)";
    }
  }
  // Coarser buckets up front when the requested grid exceeds the cell cap.
  const size_t max_cols =
      std::max<size_t>(1, options_.max_cells / std::max<size_t>(1, rows.size()));
  int64_t cols = std::max<int64_t>(1, CeilDiv(span, bucket));
  if (static_cast<size_t>(cols) > max_cols) {
    const int64_t factor =
        (cols + static_cast<int64_t>(max_cols) - 1) / static_cast<int64_t>(max_cols);
    bucket *= factor;
    cols = std::max<int64_t>(1, CeilDiv(span, bucket));
    m.note = absl::StrFormat("buckets widened to %g ms to stay within %d cells",
                             static_cast<double>(bucket) / 1e6, options_.max_cells);
  }
  const int64_t from = FloorDiv(to - span, base) * base;
  m.start_unix_ns = from;
  m.bucket_ns = bucket;
  m.cols = static_cast<size_t>(cols);
  // Without rows the one column is the whole window: no resolution to state.
  m.title =
      rows.empty()
          ? absl::StrFormat("Link utilization, %g s%s%s (no data)", static_cast<double>(span) / 1e9,
                            q.node.empty() ? "" : ", node ", q.node)
          : absl::StrFormat("Link utilization, %g s at %g ms%s%s", static_cast<double>(span) / 1e9,
                            static_cast<double>(bucket) / 1e6, q.node.empty() ? "" : ", node ",
                            q.node);
  if (rows.size() > options_.max_cells) rows.resize(options_.max_cells);
  m.values.assign(rows.size() * m.cols, NAN);
  const int64_t per_col = bucket / base;
  const int64_t first_abs = FloorDiv(from, base);
  for (size_t r = 0; r < rows.size(); ++r) {
    m.rows.push_back(rows[r].label);
    m.row_nodes.push_back(*rows[r].node);
    m.row_ports.push_back(std::move(rows[r].port));
    // Only the buckets the ring holds can have a value: a requested span (from=1&to=9e9) must
    // not set the length of this loop, which runs under the lock (issue 13).
    const Ring<uint8_t>& ring = *rows[r].ring;
    const int64_t held_lo = ring.latest - static_cast<int64_t>(ring.v.size()) + 1;
    for (size_t c = 0; c < m.cols; ++c) {
      float v = NAN;
      const int64_t a0 = first_abs + static_cast<int64_t>(c) * per_col;
      const int64_t a_end = std::min(a0 + per_col, ring.latest + 1);
      for (int64_t a = std::max(a0, held_lo); a < a_end; ++a) {
        const uint8_t code = rows[r].ring->Get(a);
        if (code == kUtilizationMissing) continue;
        const float u = static_cast<float>(DecodeUtilization(code));
        if (std::isnan(v) || u > v) v = u;
      }
      m.values[r * m.cols + c] = v;
    }
  }
  return m;
}

HeatmapModel LinkAnalysis::NodesHeatmap(double seconds, const std::set<std::string>& only) const {
  HeatmapModel m;
  m.row_axis = "source";
  m.col_axis = "destination";
  m.value_label = "bytes";
  absl::MutexLock lock(&mu_);
  std::map<std::string, std::string> ip_to_node;
  int64_t newest = INT64_MIN;
  for (const auto& [name, n] : nodes_) {
    for (const std::string& a : n.addresses) ip_to_node[a] = name;
    if (!n.peers.empty()) newest = std::max(newest, n.peers.back().end_unix_ns);
  }
  auto label = [&](const std::string& ip) {
    auto it = ip_to_node.find(ip);
    return it == ip_to_node.end() ? ip : it->second;
  };
  // Without any capture the window ends now: INT64_MIN - seconds overflowed (found by
  // tests/fuzz/http_query_fuzz.cc under UBSan).
  if (newest == INT64_MIN) newest = absl::ToUnixNanos(absl::Now());
  const int64_t from = newest - static_cast<int64_t>(seconds * 1e9);
  std::map<std::pair<std::string, std::string>, double> pairs;  // max over reporting nodes
  for (const auto& [name, n] : nodes_) {
    std::map<std::pair<std::string, std::string>, double> mine;
    for (const PeerWindow& w : n.peers) {
      if (w.end_unix_ns <= from) continue;
      for (const auto& [pair, b] : w.bytes) {
        mine[{label(pair.first), label(pair.second)}] += static_cast<double>(b);
      }
    }
    for (const auto& [pair, b] : mine) {
      if (!only.empty() && (!only.contains(pair.first) || !only.contains(pair.second))) continue;
      pairs[pair] = std::max(pairs[pair], b);
    }
  }
  std::set<std::string> names;
  for (const auto& [pair, b] : pairs) {
    names.insert(pair.first);
    names.insert(pair.second);
  }
  m.rows.assign(names.begin(), names.end());
  m.col_labels = m.rows;
  m.cols = m.rows.size();
  m.values.assign(m.cols * m.cols, 0.0f);
  double max = 0;
  for (const auto& [pair, b] : pairs) {
    const size_t r = static_cast<size_t>(std::distance(names.begin(), names.find(pair.first)));
    const size_t c = static_cast<size_t>(std::distance(names.begin(), names.find(pair.second)));
    m.values[r * m.cols + c] = static_cast<float>(b);
    max = std::max(max, b);
  }
  m.scale_max = max > 0 ? max : 1;
  m.title = absl::StrFormat("Node x node bytes (captured flows), last %g s", seconds);
  if (m.rows.empty()) {
    m.note = absl::StrFormat(
        "no captured flows in the last %g s: this map is drawn from packet capture, which is off "
        "by default (agent --capture=IFACE, needs CAP_NET_RAW; agent/README.md)",
        seconds);
  }
  return m;
}

LinkSnapshot LinkAnalysis::Snapshot() const {
  LinkSnapshot out;
  out.series_bytes = series_bytes();
  absl::MutexLock lock(&mu_);
  uint64_t cluster_loss = 0;
  for (const auto& [name, n] : nodes_) {
    for (const PortLinks& p : n.ports) cluster_loss += p.loss_sum;
  }
  for (const auto& [name, n] : nodes_) {
    LinkSnapshot::Node& s = out.nodes.emplace_back();
    s.name = name;
    s.period = n.period;
    s.anomalies_total = n.anomalies_total;
    s.imbalance[0] = n.imbalance[0];
    s.imbalance[1] = n.imbalance[1];
    if (n.has_flight_recorder) s.flight_recorder_bytes = n.flight_recorder_bytes;
    s.flight_recorder_requests_dropped = n.flight_recorder_requests_dropped;
    if (cluster_loss == 0) continue;
    for (const PortLinks& p : n.ports) {
      if (p.loss.empty()) continue;
      out.loss_concentration.push_back(
          {name, p.info.device(), p.info.port(),
           static_cast<double>(p.loss_sum) / static_cast<double>(cluster_loss)});
    }
  }
  return out;
}

std::vector<LinkAnomaly> LinkAnalysis::Anomalies(absl::string_view node_filter) const {
  std::vector<LinkAnomaly> out;
  absl::MutexLock lock(&mu_);
  for (const LinkAnomaly& a : anomalies_) {
    if (node_filter.empty() || a.node == node_filter) out.push_back(a);
  }
  return out;
}

LossPatterns LinkAnalysis::Patterns() const {
  LossPatternInput in;
  in.loss_windows = static_cast<int>(options_.loss_windows);
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, n] : nodes_) {
      std::vector<std::array<uint64_t, kPfcPriorities>> by_priority(n.ports.size());
      for (const std::vector<PriorityLoss>& window : n.priority_loss) {
        for (const PriorityLoss& e : window) {
          if (e.port_index < by_priority.size()) by_priority[e.port_index][e.priority] += e.events;
        }
      }
      for (size_t i = 0; i < n.ports.size(); ++i) {
        const PortLinks& p = n.ports[i];
        if (p.loss.empty()) continue;
        if (p.info.node_level()) {  // the node's TCP retransmissions: not a link's loss
          in.node_wide.push_back({name, p.info.device(), p.loss_sum});
          continue;
        }
        in.links.push_back({name, p.info.device(), p.info.port(), p.loss_sum, by_priority[i]});
      }
      LossPatternInput::Node& node = in.nodes.emplace_back();
      node.name = name;
      if (n.period) node.period_seconds = n.period->period_seconds;
      for (const auto& [pair, t] : n.loss_events) {
        node.peers.push_back(pair);
        node.times_ns.push_back(t);
      }
    }
  }
  return AnalyzeLossPatterns(in);
}

LinkAnalysis::RecorderInfo LinkAnalysis::FlightRecorderOf(const std::string& node) const {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end() || !it->second.has_flight_recorder) return {};
  const double s = it->second.flight_recorder_seconds, w = it->second.window_seconds;
  return RecorderInfo{.seconds = std::isfinite(s) && s > 0 ? s : 0,
                      .window_seconds = std::isfinite(w) && w > 0 ? w : 0};
}

std::vector<LinkRecording> LinkAnalysis::FlightRecordings(absl::string_view node_filter) const {
  std::vector<LinkRecording> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, n] : nodes_) {
    if (!node_filter.empty() && name != node_filter) continue;
    for (const LinkRecording& rec : n.recordings) out.push_back(rec);
  }
  return out;
}

}  // namespace fabricscope::exporters
