#include "exporters/gpu_state.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "exporters/imbalance.h"
#include "exporters/metric_util.h"

namespace fabricscope::exporters {

using prometheus::MetricFamily;
using prometheus::MetricType;

namespace {

// Adds h into acc when both have the same bounds (an empty acc takes h's); returns false when
// the bounds differ (an agent of another version), leaving acc alone.
bool MergeHistogram(v1::Histogram* acc, const v1::Histogram& h) {
  if (acc->bucket_counts_size() == 0) {
    *acc = h;
    return true;
  }
  if (acc->upper_bounds_size() != h.upper_bounds_size() ||
      acc->bucket_counts_size() != h.bucket_counts_size()) {
    return false;
  }
  for (int i = 0; i < h.upper_bounds_size(); ++i) {
    if (acc->upper_bounds(i) != h.upper_bounds(i)) return false;
  }
  for (int i = 0; i < h.bucket_counts_size(); ++i) {
    acc->set_bucket_counts(i, acc->bucket_counts(i) + h.bucket_counts(i));
  }
  acc->set_count(acc->count() + h.count());
  acc->set_sum(acc->sum() + h.sum());
  return true;
}

const char* TimingSourceName(v1::TimingSource s) {
  switch (s) {
    case v1::TIMING_SOURCE_ENQUEUE_ONLY:
      return "enqueue_only";
    case v1::TIMING_SOURCE_KERNEL_CHANNEL:
      return "kernel_channel";
    case v1::TIMING_SOURCE_PROXY_OP:
      return "proxy_op";
    default:
      return "unknown";
  }
}

double UnixSeconds(int64_t mono_ns, int64_t offset_ns) {
  return mono_ns == 0 ? 0.0 : static_cast<double>(mono_ns + offset_ns) / 1e9;
}

std::string ToJson(const google::protobuf::Struct& root) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = false;
  (void)google::protobuf::util::MessageToJsonString(root, &out, opts);
  return out;
}

}  // namespace

std::string GpuState::CommLabel(uint64_t comm_hash) {
  return absl::StrFormat("%08x", static_cast<uint32_t>(comm_hash >> 32));
}

void GpuState::ResetNode(const std::string& node) { nodes_.erase(node); }

void GpuState::OnBatch(const std::string& node, const v1::Batch& batch) {
  if (!batch.has_gpu() && batch.collectives_size() == 0 && batch.kernel_spans_size() == 0) return;
  NodeGpu& n = nodes_[node];
  if (batch.has_gpu()) {
    n.last = batch.gpu();
    n.have = true;
    for (const v1::CollectiveTotals& t : batch.gpu().collective_totals()) {
      if (t.window_seconds() > 0) {
        n.last_busbw[{t.comm_hash(), t.func()}] =
            LastBusBw{t.window_busbw_bytes_per_second(), t.window_seconds()};
      }
    }
    AddRankWindow(n, batch.gpu());
  }
  for (const v1::Collective& c : batch.collectives()) {
    n.collectives.push_back(Collective{{batch.unix_offset_ns()}, c});
  }
  while (n.collectives.size() > options_.recent_collectives_per_node) n.collectives.pop_front();
  for (const v1::KernelSpan& k : batch.kernel_spans()) {
    n.kernels.push_back(Kernel{{batch.unix_offset_ns()}, k});
  }
  while (n.kernels.size() > options_.recent_kernels_per_node) n.kernels.pop_front();
}

void GpuState::AddRankWindow(NodeGpu& n, const v1::GpuWindow& w) {
  std::map<PairKey, uint64_t> totals;
  for (const v1::RankPairBytes& rp : w.rank_pairs()) {
    totals[{rp.comm_hash(), rp.src_rank(), rp.dst_rank()}] = rp.bytes_total();
  }
  if (n.have_pair_totals) {
    std::map<std::tuple<uint64_t, int32_t, int32_t>, uint64_t> per_rank;  // comm, rank, direction
    for (const auto& [key, total] : totals) {
      const auto it = n.pair_totals.find(key);
      const uint64_t before = it == n.pair_totals.end() || total < it->second ? 0 : it->second;
      const auto& [comm, src, dst] = key;
      per_rank[{comm, src, 0}] += total - before;
      per_rank[{comm, dst, 1}] += total - before;
    }
    std::vector<RankBytes> window;
    window.reserve(per_rank.size());
    for (const auto& [key, bytes] : per_rank) {
      window.push_back(RankBytes{std::get<0>(key), std::get<1>(key), std::get<2>(key), bytes});
    }
    n.rank_windows.push_back(std::move(window));
    while (n.rank_windows.size() > options_.imbalance_windows) n.rank_windows.pop_front();
  }
  n.pair_totals = std::move(totals);
  n.have_pair_totals = true;
}

void GpuState::Collect(std::vector<MetricFamily>* out) const {
  auto duration = MakeFamily("fabricscope_collective_duration_seconds",
                             "Duration of NCCL collectives per rank (start to completion per the "
                             "timing source), over all nodes' ranks.",
                             MetricType::Histogram);
  auto busbw = MakeFamily(
      "fabricscope_collective_bus_bandwidth_bytes_per_second",
      "nccl-tests busBw of the collectives in the last window in which they ran on each node: "
      "sum of S x factor over sum of durations, combined over nodes weighted by time.",
      MetricType::Gauge);
  auto bus_bytes = MakeFamily("fabricscope_collective_bus_bytes_total",
                              "nccl-tests bus bytes (S x factor) of completed collectives; "
                              "rate() over rate(fabricscope_collective_duration_seconds_sum) "
                              "is busBw.",
                              MetricType::Counter);
  auto total = MakeFamily("fabricscope_collectives_total",
                          "NCCL collectives and point-to-point operations completed, per rank.",
                          MetricType::Counter);
  auto dropped = MakeFamily("fabricscope_plugin_dropped_events_total",
                            "GPU records dropped before the agent used them: by the producer "
                            "(source nccl, cupti: full pool, agent away) or by the agent (source "
                            "agent: ingest queue full).",
                            MetricType::Counter);
  auto pairs = MakeFamily("fabricscope_rank_pair_bytes_total",
                          "Bytes sent by NCCL's proxy from src_rank to dst_rank (network "
                          "transfers), top pairs by bytes.",
                          MetricType::Counter);
  auto kernels = MakeFamily("fabricscope_gpu_kernels_total", "GPU kernels recorded by CUPTI.",
                            MetricType::Counter);
  auto kernel_secs =
      MakeFamily("fabricscope_gpu_kernel_seconds_total",
                 "Time GPU kernels ran (sum of kernel durations, CUPTI).", MetricType::Counter);
  auto conns =
      MakeFamily("fabricscope_gpu_ingest_connections",
                 "Producer processes connected to the agent's GPU socket.", MetricType::Gauge);
  auto datagrams =
      MakeFamily("fabricscope_gpu_ingest_datagrams_total",
                 "Well-formed datagrams received on the GPU socket.", MetricType::Counter);
  auto bad = MakeFamily("fabricscope_gpu_ingest_dropped_datagrams_total",
                        "Datagrams dropped whole by the GPU ingest, by reason (empty, truncated, "
                        "bad_magic, bad_version, bad_records, oversize).",
                        MetricType::Counter);
  auto refused = MakeFamily("fabricscope_gpu_ingest_rejected_connections_total",
                            "Connections to the GPU socket refused, by reason (limit, uid).",
                            MetricType::Counter);

  auto imbalance = TrafficImbalanceFamily();  // scope="ranks"; LinkAnalysis adds "rails"

  // Communicators ranked by collectives, the first max_comm_labels get their own label (those
  // seen only in rank pairs rank last).
  std::map<uint64_t, uint64_t> comm_counts;
  // Per direction, comm -> rank -> bytes over each node's recent batches.
  std::map<uint64_t, std::map<int32_t, double>> rank_bytes[2];
  for (const auto& [node, n] : nodes_) {
    for (const v1::CollectiveTotals& t : n.last.collective_totals()) {
      comm_counts[t.comm_hash()] += t.count();
    }
    for (const std::vector<RankBytes>& window : n.rank_windows) {
      for (const RankBytes& r : window) {
        comm_counts.try_emplace(r.comm, 0);
        rank_bytes[r.direction][r.comm][r.rank] += static_cast<double>(r.bytes);
      }
    }
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranked(comm_counts.begin(), comm_counts.end());
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& a, const auto& b) { return a.second > b.second; });
  std::map<uint64_t, std::string> comm_label;
  for (size_t i = 0; i < ranked.size(); ++i) {
    comm_label[ranked[i].first] =
        i < options_.max_comm_labels ? CommLabel(ranked[i].first) : "other";
  }

  struct Series {
    v1::Histogram durations;
    double bus_bytes = 0;
    double weighted_busbw = 0;
    double seconds = 0;
  };
  std::map<std::pair<std::string, std::string>, Series> series;  // (func, comm label)
  std::map<std::string, double> per_func;
  std::map<std::tuple<uint64_t, int32_t, int32_t>, double> pair_bytes;
  for (const auto& [node, n] : nodes_) {
    for (const v1::CollectiveTotals& t : n.last.collective_totals()) {
      Series& s = series[{t.func(), comm_label[t.comm_hash()]}];
      MergeHistogram(&s.durations, t.duration_seconds());
      s.bus_bytes += static_cast<double>(t.bus_bytes_total());
      per_func[t.func()] += static_cast<double>(t.count());
    }
    for (const auto& [key, last] : n.last_busbw) {
      Series& s = series[{key.second, comm_label[key.first]}];
      s.weighted_busbw += last.busbw * last.seconds;
      s.seconds += last.seconds;
    }
    for (const v1::RankPairBytes& rp : n.last.rank_pairs()) {
      pair_bytes[{rp.comm_hash(), rp.src_rank(), rp.dst_rank()}] +=
          static_cast<double>(rp.bytes_total());
    }
    if (!n.have) continue;
    const v1::GpuIngestStats& in = n.last.ingest();
    for (const auto& [source, v] : in.dropped_records_total()) {
      AddValue(dropped, {{"node", node}, {"source", source}}, static_cast<double>(v));
    }
    AddValue(conns, {{"node", node}}, in.connections());
    AddValue(datagrams, {{"node", node}}, static_cast<double>(in.datagrams_total()));
    for (const auto& [reason, v] : in.dropped_datagrams_total()) {
      AddValue(bad, {{"node", node}, {"reason", reason}}, static_cast<double>(v));
    }
    for (const auto& [reason, v] : in.rejected_connections_total()) {
      AddValue(refused, {{"node", node}, {"reason", reason}}, static_cast<double>(v));
    }
    for (const v1::KernelTotals& k : n.last.kernel_totals()) {
      const std::string device = absl::StrCat(k.device());
      AddValue(kernels, {{"node", node}, {"device", device}},
               static_cast<double>(k.kernels_total()));
      AddValue(kernel_secs, {{"node", node}, {"device", device}}, k.kernel_seconds_total());
    }
  }
  for (const auto& [key, s] : series) {
    const std::vector<prometheus::ClientMetric::Label> labels = {{"func", key.first},
                                                                 {"comm", key.second}};
    if (s.durations.bucket_counts_size() > 0) AddHistogram(duration, labels, s.durations);
    AddValue(bus_bytes, labels, s.bus_bytes);
    if (s.seconds > 0) AddValue(busbw, labels, s.weighted_busbw / s.seconds);
  }
  for (const auto& [func, v] : per_func) AddValue(total, {{"func", func}}, v);
  for (int d = 0; d < 2; ++d) {
    // Communicators whose hashes share a label merge, as in the families above.
    std::map<std::string, std::map<int32_t, double>> by_label;
    for (const auto& [comm, ranks] : rank_bytes[d]) {
      const std::string& label = comm_label.at(comm);
      if (label == "other") continue;
      for (const auto& [rank, bytes] : ranks) by_label[label][rank] += bytes;
    }
    for (const auto& [label, ranks] : by_label) {
      std::vector<double> bytes;
      bytes.reserve(ranks.size());
      for (const auto& [rank, b] : ranks) bytes.push_back(b);
      const double cov = CoefficientOfVariation(bytes);
      if (!std::isfinite(cov)) continue;
      AddValue(
          imbalance,
          {{"scope", "ranks"}, {"comm", label}, {"direction", d == 0 ? "transmit" : "receive"}},
          cov);
    }
  }
  std::vector<std::pair<std::tuple<uint64_t, int32_t, int32_t>, double>> top(pair_bytes.begin(),
                                                                             pair_bytes.end());
  const size_t k = std::min(options_.rank_pair_top_k, top.size());
  std::partial_sort(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(k), top.end(),
                    [](const auto& a, const auto& b) { return a.second > b.second; });
  for (size_t i = 0; i < k; ++i) {
    const auto& [comm, src, dst] = top[i].first;
    AddValue(pairs,
             {{"comm", CommLabel(comm)},
              {"src_rank", absl::StrCat(src)},
              {"dst_rank", absl::StrCat(dst)}},
             top[i].second);
  }
  for (MetricFamily* f : {&duration, &busbw, &bus_bytes, &total, &dropped, &pairs, &kernels,
                          &kernel_secs, &conns, &datagrams, &bad, &refused, &imbalance}) {
    if (!f->metric.empty()) out->push_back(std::move(*f));
  }
}

std::string GpuState::CollectivesJson(absl::string_view node_filter, size_t limit) const {
  google::protobuf::Struct root;
  google::protobuf::ListValue* list = (*root.mutable_fields())["collectives"].mutable_list_value();
  for (const auto& [node, n] : nodes_) {
    if (!node_filter.empty() && node != node_filter) continue;
    const size_t skip =
        limit > 0 && n.collectives.size() > limit ? n.collectives.size() - limit : 0;
    for (size_t i = skip; i < n.collectives.size(); ++i) {
      const v1::Collective& c = n.collectives[i].c;
      const int64_t off = n.collectives[i].unix_offset_ns;
      auto& f = *list->add_values()->mutable_struct_value()->mutable_fields();
      f["node"].set_string_value(node);
      f["comm"].set_string_value(absl::StrFormat("%016x", c.comm_hash()));
      f["rank"].set_number_value(c.rank());
      f["nranks"].set_number_value(c.nranks());
      f["func"].set_string_value(c.func());
      f["seq"].set_number_value(static_cast<double>(c.seq()));
      f["bytes"].set_number_value(static_cast<double>(c.bytes()));
      f["count"].set_number_value(static_cast<double>(c.count()));
      f["datatype"].set_string_value(c.datatype());
      f["algo"].set_string_value(c.algo());
      f["proto"].set_string_value(c.proto());
      f["channels"].set_number_value(c.channels());
      f["root"].set_number_value(c.root());
      f["peer"].set_number_value(c.peer());
      f["timing_source"].set_string_value(TimingSourceName(c.timing_source()));
      f["enqueue_unix_seconds"].set_number_value(UnixSeconds(c.enqueue_start_ns(), off));
      f["start_unix_seconds"].set_number_value(UnixSeconds(c.start_ns(), off));
      f["end_unix_seconds"].set_number_value(UnixSeconds(c.end_ns(), off));
      f["duration_seconds"].set_number_value(c.duration_seconds());
      f["algbw_bytes_per_second"].set_number_value(c.algbw_bytes_per_second());
      f["busbw_bytes_per_second"].set_number_value(c.busbw_bytes_per_second());
      f["pid"].set_number_value(c.pid());
      f["gpu"].set_number_value(c.gpu());
      f["p2p"].set_bool_value(c.p2p());
      f["graph_captured"].set_bool_value(c.graph_captured());
      f["proxy_bytes"].set_number_value(static_cast<double>(c.proxy_bytes()));
      google::protobuf::ListValue* peers = f["proxy_peers"].mutable_list_value();
      for (const v1::ProxyPeer& p : c.proxy_peers()) {
        auto& pf = *peers->add_values()->mutable_struct_value()->mutable_fields();
        pf["peer"].set_number_value(p.peer());
        pf["bytes_sent"].set_number_value(static_cast<double>(p.bytes_sent()));
        pf["bytes_received"].set_number_value(static_cast<double>(p.bytes_received()));
      }
    }
  }
  return ToJson(root);
}

std::string GpuState::KernelsJson(absl::string_view node_filter, size_t limit) const {
  google::protobuf::Struct root;
  google::protobuf::ListValue* list = (*root.mutable_fields())["kernels"].mutable_list_value();
  for (const auto& [node, n] : nodes_) {
    if (!node_filter.empty() && node != node_filter) continue;
    const size_t skip = limit > 0 && n.kernels.size() > limit ? n.kernels.size() - limit : 0;
    for (size_t i = skip; i < n.kernels.size(); ++i) {
      const v1::KernelSpan& k = n.kernels[i].k;
      const int64_t off = n.kernels[i].unix_offset_ns;
      auto& f = *list->add_values()->mutable_struct_value()->mutable_fields();
      f["node"].set_string_value(node);
      f["device"].set_number_value(k.device());
      f["stream"].set_number_value(k.stream());
      f["name"].set_string_value(k.name());
      f["is_nccl"].set_bool_value(k.is_nccl());
      f["memcpy"].set_bool_value(k.memcpy());
      f["bytes"].set_number_value(static_cast<double>(k.bytes()));
      f["start_unix_seconds"].set_number_value(UnixSeconds(k.start_ns(), off));
      f["end_unix_seconds"].set_number_value(UnixSeconds(k.end_ns(), off));
      f["duration_seconds"].set_number_value(
          k.end_ns() > k.start_ns() ? static_cast<double>(k.end_ns() - k.start_ns()) / 1e9 : 0.0);
      f["pid"].set_number_value(k.pid());
      f["graph_id"].set_number_value(static_cast<double>(k.graph_id()));
      f["correlation_id"].set_number_value(static_cast<double>(k.correlation_id()));
    }
  }
  return ToJson(root);
}

}  // namespace fabricscope::exporters
