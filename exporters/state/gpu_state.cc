#include "exporters/state/gpu_state.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "collectors/common/collective_vocabulary.h"
#include "exporters/analysis/imbalance.h"
#include "exporters/exposition/metric_util.h"

namespace fabricscope::exporters {

using prometheus::MetricFamily;
using prometheus::MetricType;

namespace {

const char* TimingSourceName(v1::TimingSource s) {
  switch (s) {
    case v1::TIMING_SOURCE_ENQUEUE_ONLY:
      return "enqueue_only";
    case v1::TIMING_SOURCE_KERNEL_CHANNEL:
      return "kernel_channel";
    case v1::TIMING_SOURCE_PROXY_OP:
      return "proxy_op";
    case v1::TIMING_SOURCE_COPY_ENGINE:
      return "copy_engine";
    default:
      return "unknown";
  }
}

// mono_ns + offset_ns, saturated at the int64 range (a broken agent's clock); 0 for an unknown
// time (mono_ns 0).
int64_t UnixNs(int64_t mono_ns, int64_t offset_ns) {
  if (mono_ns == 0) return 0;
  int64_t unix_ns;
  if (__builtin_add_overflow(mono_ns, offset_ns, &unix_ns)) {
    return mono_ns > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  }
  return unix_ns;
}

double UnixSeconds(int64_t mono_ns, int64_t offset_ns) {
  return static_cast<double>(UnixNs(mono_ns, offset_ns)) / 1e9;
}

// s cut to at most max_bytes at the start of the character that would be cut (UTF-8
// continuation bytes are 10xxxxxx, RFC 3629 section 3), so that the JSON stays valid UTF-8.
std::string_view Bounded(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  size_t n = max_bytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

std::string ToJson(const google::protobuf::Struct& root) {
  std::string out;
  google::protobuf::util::JsonPrintOptions opts;
  opts.add_whitespace = false;
  (void)google::protobuf::util::MessageToJsonString(root, &out, opts);
  return out;
}

}  // namespace

size_t GpuState::ProfileHash::operator()(const CollectiveProfile& p) const {
  // absl::Hash mixes every field into every bit. The former Boost-style hash_combine over
  // std::hash (the identity on integers) left the low bits the same for profiles that differ
  // only in a high field such as the rank: harmless for std::unordered_map's prime buckets, but
  // absl's hash maps place by those bits, and 200,000 ranks of one hostile batch then probed
  // quadratically (20 s under ASan; HostileClientTest.AnInstanceWithAHugeRankCountIsCheap).
  return absl::Hash<
      std::tuple<uint64_t, int32_t, int32_t, int32_t, int32_t, int32_t, int32_t, uint32_t, uint32_t,
                 uint32_t, uint32_t, uint32_t, uint8_t, bool, bool>>{}(
      std::make_tuple(p.comm_hash, p.rank, p.nranks, p.root, p.peer, p.pid, p.gpu, p.channels,
                      p.func, p.datatype, p.algo, p.proto, p.timing_source, p.p2p,
                      p.graph_captured));
}

void GpuState::ResetNode(const std::string& node) {
  const auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  const NodeGpu& n = it->second;
  for (size_t i = 0; i < n.collectives.size(); ++i) ReleaseCollective(n.collectives[i]);
  for (size_t i = 0; i < n.kernels.size(); ++i) ReleaseString(n.kernels[i].name);
  nodes_.erase(it);
}

void GpuState::OnBatch(const std::string& node, const v1::Batch& batch) {
  if (!batch.has_gpu() && batch.collectives_size() == 0 && batch.kernel_spans_size() == 0) return;
  NodeGpu& n = nodes_[node];
  if (batch.has_gpu()) {
    n.last = batch.gpu();
    n.have = true;
    absl::flat_hash_set<uint64_t> comms;
    for (const v1::CollectiveTotals& t : batch.gpu().collective_totals()) {
      comms.insert(t.comm_hash());
      if (t.window_seconds() > 0) {
        n.last_busbw[{t.comm_hash(), t.func()}] =
            LastBusBw{t.window_busbw_bytes_per_second(), t.window_seconds()};
      }
    }
    // A communicator the agent no longer reports is forgotten: the busBw kept per node is
    // bounded by one window's communicators (limits: max_communicators_per_node).
    for (auto it = n.last_busbw.begin(); it != n.last_busbw.end();) {
      it = comms.contains(it->first.first) ? std::next(it) : n.last_busbw.erase(it);
    }
    AddRankWindow(n, batch.gpu());
  }
  if (options_.recent_collectives_per_node > 0) {
    BatchStrings strings(*this);
    for (const v1::Collective& c : batch.collectives()) {
      AddCollective(n, batch.unix_offset_ns(), c, strings);
    }
  }
  if (options_.recent_kernels_per_node > 0) {
    for (const v1::KernelSpan& k : batch.kernel_spans()) AddKernel(n, batch.unix_offset_ns(), k);
  }
}

GpuState::BatchStrings::~BatchStrings() {
  for (const auto& [text, id] : ids_) g_.ReleaseString(id);
  for (const uint32_t id : held_) g_.ReleaseString(id);
}

uint32_t GpuState::BatchStrings::Id(std::string_view s) {
  for (const auto& [text, id] : ids_) {
    if (text == s) return id;
  }
  const uint32_t id = g_.strings_.Intern(s);  // the cache's reference
  // Past kSearched strings (a batch of unusually many distinct names), ids are held to the end
  // of the batch but not searched again, so a batch costs at most kSearched compares a string.
  if (ids_.size() < kSearched) {
    ids_.emplace_back(s, id);
  } else {
    held_.push_back(id);
  }
  return id;
}

void GpuState::AddCollective(NodeGpu& n, int64_t unix_offset_ns, const v1::Collective& c,
                             BatchStrings& strings) {
  const size_t peers = std::min<size_t>(static_cast<size_t>(c.proxy_peers_size()), kMaxProxyPeers);
  const CollectiveProfile profile{
      .comm_hash = c.comm_hash(),
      .rank = c.rank(),
      .nranks = c.nranks(),
      .root = c.root(),
      .peer = c.peer(),
      .pid = c.pid(),
      .gpu = c.gpu(),
      .channels = c.channels(),
      .func = strings.Id(Bounded(c.func(), kMaxLabelBytes)),
      .datatype = strings.Id(Bounded(c.datatype(), kMaxLabelBytes)),
      .algo = strings.Id(Bounded(c.algo(), kMaxLabelBytes)),
      .proto = strings.Id(Bounded(c.proto(), kMaxLabelBytes)),
      .timing_source =
          static_cast<uint8_t>(v1::TimingSource_IsValid(c.timing_source()) ? c.timing_source() : 0),
      .p2p = c.p2p(),
      .graph_captured = c.graph_captured(),
  };
  const size_t profiles_before = profiles_.size();
  const uint32_t profile_id = profiles_.Intern(profile);
  if (profiles_.size() > profiles_before) {
    // A new profile takes its own references to its strings (the batch's cache holds them
    // only until the batch ends).
    for (const uint32_t id : {profile.func, profile.datatype, profile.algo, profile.proto}) {
      strings_.AddRef(id);
    }
  }
  const Collective stored{
      .seq = c.seq(),
      .bytes = c.bytes(),
      .count = c.count(),
      .proxy_bytes = c.proxy_bytes(),
      .enqueue_start_unix_ns = UnixNs(c.enqueue_start_ns(), unix_offset_ns),
      .start_unix_ns = UnixNs(c.start_ns(), unix_offset_ns),
      .end_unix_ns = UnixNs(c.end_ns(), unix_offset_ns),
      .duration_seconds = c.duration_seconds(),
      .algbw_bytes_per_second = c.algbw_bytes_per_second(),
      .busbw_bytes_per_second = c.busbw_bytes_per_second(),
      .profile = profile_id,
      .proxy_peers = static_cast<uint8_t>(peers),
  };
  for (size_t i = 0; i < peers; ++i) {
    const v1::ProxyPeer& p = c.proxy_peers(static_cast<int>(i));
    n.proxy_peers.push_back(ProxyPeer{p.peer(), p.bytes_sent(), p.bytes_received()});
  }
  Collective evicted{};
  if (n.collectives.Push(stored, options_.recent_collectives_per_node, &evicted)) {
    ReleaseCollective(evicted);
    // The oldest collective's peers are the oldest in the FIFO.
    n.proxy_peers.erase(n.proxy_peers.begin(), n.proxy_peers.begin() + evicted.proxy_peers);
  }
}

void GpuState::AddKernel(NodeGpu& n, int64_t unix_offset_ns, const v1::KernelSpan& k) {
  const Kernel stored{
      .unix_offset_ns = unix_offset_ns,
      .start_ns = k.start_ns(),
      .end_ns = k.end_ns(),
      .bytes = k.bytes(),
      .graph_id = k.graph_id(),
      .correlation_id = k.correlation_id(),
      .device = k.device(),
      .stream = k.stream(),
      .pid = k.pid(),
      .name = strings_.Intern(Bounded(k.name(), kMaxKernelNameBytes)),
      .is_nccl = k.is_nccl(),
      .memcpy = k.memcpy(),
  };
  Kernel evicted{};
  if (n.kernels.Push(stored, options_.recent_kernels_per_node, &evicted)) {
    ReleaseString(evicted.name);
  }
}

void GpuState::ReleaseString(uint32_t id) {
  strings_.Release(id, [](const std::string&) {});
}

void GpuState::ReleaseCollective(const Collective& c) {
  profiles_.Release(c.profile, [this](const CollectiveProfile& p) {
    for (const uint32_t id : {p.func, p.datatype, p.algo, p.proto}) ReleaseString(id);
  });
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

// Communicators ranked by collectives, the first max_comm_labels get their own label (those seen
// only in rank pairs rank last); fills rank_bytes (per direction, comm -> rank -> bytes over each
// node's recent batches) on the way.
std::map<uint64_t, std::string> GpuState::CommLabels(
    std::map<uint64_t, std::map<int32_t, double>> (&rank_bytes)[2]) const {
  std::map<uint64_t, uint64_t> comm_counts;
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
        i < options_.max_comm_labels ? common::CommLabel(ranked[i].first) : "other";
  }
  return comm_label;
}

namespace {

// fabricscope_traffic_imbalance_ratio{scope="ranks"}: per communicator label and direction, the
// coefficient of variation of its ranks' bytes (labels shared by several hashes merge).
void AddRankImbalance(const std::map<uint64_t, std::map<int32_t, double>> (&rank_bytes)[2],
                      const std::map<uint64_t, std::string>& comm_label, MetricFamily& imbalance) {
  for (int d = 0; d < 2; ++d) {
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
}

// fabricscope_rank_pair_bytes_total: the top `k` (comm, src, dst) pairs by bytes.
void AddTopRankPairs(const std::map<std::tuple<uint64_t, int32_t, int32_t>, double>& pair_bytes,
                     size_t top_k, MetricFamily& pairs) {
  std::vector<std::pair<std::tuple<uint64_t, int32_t, int32_t>, double>> top(pair_bytes.begin(),
                                                                             pair_bytes.end());
  const size_t k = std::min(top_k, top.size());
  std::partial_sort(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(k), top.end(),
                    [](const auto& a, const auto& b) { return a.second > b.second; });
  for (size_t i = 0; i < k; ++i) {
    const auto& [comm, src, dst] = top[i].first;
    AddValue(pairs,
             {{"comm", common::CommLabel(comm)},
              {"src_rank", absl::StrCat(src)},
              {"dst_rank", absl::StrCat(dst)}},
             top[i].second);
  }
}

// The per-node GPU families: the ingest's counters and CUPTI's kernel totals.
struct NodeFamilies {
  MetricFamily& dropped;
  MetricFamily& conns;
  MetricFamily& datagrams;
  MetricFamily& bad;
  MetricFamily& repaired;
  MetricFamily& evicted;
  MetricFamily& refused;
  MetricFamily& kernels;
  MetricFamily& kernel_secs;
};

void AddNodeStats(const std::string& node, const v1::GpuWindow& last, NodeFamilies& f) {
  const v1::GpuIngestStats& in = last.ingest();
  for (const auto& [source, v] : in.dropped_records_total()) {
    AddValue(f.dropped, {{"node", node}, {"source", source}}, static_cast<double>(v));
  }
  AddValue(f.conns, {{"node", node}}, in.connections());
  AddValue(f.datagrams, {{"node", node}}, static_cast<double>(in.datagrams_total()));
  for (const auto& [reason, v] : in.dropped_datagrams_total()) {
    AddValue(f.bad, {{"node", node}, {"reason", reason}}, static_cast<double>(v));
  }
  AddValue(f.repaired, {{"node", node}}, static_cast<double>(in.repaired_string_bytes_total()));
  AddValue(f.evicted, {{"node", node}}, static_cast<double>(last.communicators_evicted_total()));
  for (const auto& [reason, v] : in.rejected_connections_total()) {
    AddValue(f.refused, {{"node", node}, {"reason", reason}}, static_cast<double>(v));
  }
  for (const v1::KernelTotals& k : last.kernel_totals()) {
    const std::string device = absl::StrCat(k.device());
    AddValue(f.kernels, {{"node", node}, {"device", device}},
             static_cast<double>(k.kernels_total()));
    AddValue(f.kernel_secs, {{"node", node}, {"device", device}}, k.kernel_seconds_total());
  }
}

}  // namespace

void GpuState::Collect(std::vector<MetricFamily>* out) const {
  auto duration = MakeFamily(Metric::kCollectiveDurationSeconds);
  auto busbw = MakeFamily(Metric::kCollectiveBusBandwidthBytesPerSecond);
  auto bus_bytes = MakeFamily(Metric::kCollectiveBusBytesTotal);
  auto total = MakeFamily(Metric::kCollectivesTotal);
  auto by_source = MakeFamily(Metric::kCollectiveTimingSourceTotal);
  auto dropped = MakeFamily(Metric::kPluginDroppedEventsTotal);
  auto pairs = MakeFamily(Metric::kRankPairBytesTotal);
  auto kernels = MakeFamily(Metric::kGpuKernelsTotal);
  auto kernel_secs = MakeFamily(Metric::kGpuKernelSecondsTotal);
  auto conns = MakeFamily(Metric::kGpuIngestConnections);
  auto datagrams = MakeFamily(Metric::kGpuIngestDatagramsTotal);
  auto bad = MakeFamily(Metric::kGpuIngestDroppedDatagramsTotal);
  auto repaired = MakeFamily(Metric::kGpuIngestRepairedStringBytesTotal);
  auto refused = MakeFamily(Metric::kGpuIngestRejectedConnectionsTotal);
  auto evicted = MakeFamily(Metric::kGpuCommunicatorsEvictedTotal);

  // fabricscope_traffic_imbalance_ratio has two scopes: "ranks" here, "rails" from the links
  // (exporters/exposition/link_render.h); ClusterState::Collect merges them (MergeFamiliesByName).
  auto imbalance = MakeFamily(Metric::kTrafficImbalanceRatio);
  NodeFamilies node_families{dropped, conns,   datagrams, bad,        repaired,
                             evicted, refused, kernels,   kernel_secs};

  // Per direction, comm -> rank -> bytes over each node's recent batches.
  std::map<uint64_t, std::map<int32_t, double>> rank_bytes[2];
  const std::map<uint64_t, std::string> comm_label = CommLabels(rank_bytes);

  struct Series {
    v1::Histogram durations;
    double bus_bytes = 0;
    double weighted_busbw = 0;
    double seconds = 0;
  };
  std::map<std::pair<std::string, std::string>, Series> series;  // (func, comm label)
  std::map<std::string, double> per_func;
  std::map<std::pair<std::string, int>, double> per_source;  // (func, v1::TimingSource)
  std::map<std::tuple<uint64_t, int32_t, int32_t>, double> pair_bytes;
  for (const auto& [node, n] : nodes_) {
    for (const v1::CollectiveTotals& t : n.last.collective_totals()) {
      Series& s = series[{t.func(), comm_label.at(t.comm_hash())}];
      MergeHistogram(&s.durations, t.duration_seconds());
      s.bus_bytes += static_cast<double>(t.bus_bytes_total());
      per_func[t.func()] += static_cast<double>(t.count());
      for (int i = 1; i < t.count_by_timing_source_size() && i <= 4; ++i) {
        per_source[{t.func(), i}] += static_cast<double>(t.count_by_timing_source(i));
      }
    }
    for (const auto& [key, last] : n.last_busbw) {
      auto label = comm_label.find(key.first);
      Series& s = series[{key.second, label != comm_label.end() ? label->second : ""}];
      s.weighted_busbw += last.busbw * last.seconds;
      s.seconds += last.seconds;
    }
    for (const v1::RankPairBytes& rp : n.last.rank_pairs()) {
      pair_bytes[{rp.comm_hash(), rp.src_rank(), rp.dst_rank()}] +=
          static_cast<double>(rp.bytes_total());
    }
    if (n.have) AddNodeStats(node, n.last, node_families);
  }
  for (const auto& [key, s] : series) {
    const std::vector<prometheus::ClientMetric::Label> labels = {{"func", key.first},
                                                                 {"comm", key.second}};
    if (s.durations.bucket_counts_size() > 0) AddHistogram(duration, labels, s.durations);
    AddValue(bus_bytes, labels, s.bus_bytes);
    if (s.seconds > 0) AddValue(busbw, labels, s.weighted_busbw / s.seconds);
  }
  for (const auto& [func, v] : per_func) AddValue(total, {{"func", func}}, v);
  for (const auto& [key, v] : per_source) {
    AddValue(by_source,
             {{"func", key.first},
              {"timing_source", TimingSourceName(static_cast<v1::TimingSource>(key.second))}},
             v);
  }
  AddRankImbalance(rank_bytes, comm_label, imbalance);
  AddTopRankPairs(pair_bytes, options_.rank_pair_top_k, pairs);
  for (MetricFamily* f :
       {&duration, &busbw, &bus_bytes, &total, &by_source, &dropped, &pairs, &kernels, &kernel_secs,
        &conns, &datagrams, &bad, &repaired, &evicted, &refused, &imbalance}) {
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
    size_t peer_index = 0;  // of collective i's first proxy peer in n.proxy_peers
    for (size_t i = 0; i < skip; ++i) peer_index += n.collectives[i].proxy_peers;
    for (size_t i = skip; i < n.collectives.size(); ++i) {
      const Collective& c = n.collectives[i];
      const CollectiveProfile& p = profiles_.Get(c.profile);
      auto& f = *list->add_values()->mutable_struct_value()->mutable_fields();
      f["node"].set_string_value(node);
      f["comm"].set_string_value(absl::StrFormat("%016x", p.comm_hash));
      f["rank"].set_number_value(p.rank);
      f["nranks"].set_number_value(p.nranks);
      f["func"].set_string_value(strings_.Get(p.func));
      f["seq"].set_number_value(static_cast<double>(c.seq));
      f["bytes"].set_number_value(static_cast<double>(c.bytes));
      f["count"].set_number_value(static_cast<double>(c.count));
      f["datatype"].set_string_value(strings_.Get(p.datatype));
      f["algo"].set_string_value(strings_.Get(p.algo));
      f["proto"].set_string_value(strings_.Get(p.proto));
      f["channels"].set_number_value(p.channels);
      f["root"].set_number_value(p.root);
      f["peer"].set_number_value(p.peer);
      f["timing_source"].set_string_value(
          TimingSourceName(static_cast<v1::TimingSource>(p.timing_source)));
      f["enqueue_unix_seconds"].set_number_value(static_cast<double>(c.enqueue_start_unix_ns) /
                                                 1e9);
      f["start_unix_seconds"].set_number_value(static_cast<double>(c.start_unix_ns) / 1e9);
      f["end_unix_seconds"].set_number_value(static_cast<double>(c.end_unix_ns) / 1e9);
      f["duration_seconds"].set_number_value(c.duration_seconds);
      f["algbw_bytes_per_second"].set_number_value(c.algbw_bytes_per_second);
      f["busbw_bytes_per_second"].set_number_value(c.busbw_bytes_per_second);
      f["pid"].set_number_value(p.pid);
      f["gpu"].set_number_value(p.gpu);
      f["p2p"].set_bool_value(p.p2p);
      f["graph_captured"].set_bool_value(p.graph_captured);
      f["proxy_bytes"].set_number_value(static_cast<double>(c.proxy_bytes));
      google::protobuf::ListValue* peers = f["proxy_peers"].mutable_list_value();
      for (size_t j = 0; j < c.proxy_peers; ++j) {
        const ProxyPeer& pp = n.proxy_peers[peer_index++];
        auto& pf = *peers->add_values()->mutable_struct_value()->mutable_fields();
        pf["peer"].set_number_value(pp.peer);
        pf["bytes_sent"].set_number_value(static_cast<double>(pp.bytes_sent));
        pf["bytes_received"].set_number_value(static_cast<double>(pp.bytes_received));
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
      const Kernel& k = n.kernels[i];
      const int64_t off = k.unix_offset_ns;
      auto& f = *list->add_values()->mutable_struct_value()->mutable_fields();
      f["node"].set_string_value(node);
      f["device"].set_number_value(k.device);
      f["stream"].set_number_value(k.stream);
      f["name"].set_string_value(strings_.Get(k.name));
      f["is_nccl"].set_bool_value(k.is_nccl);
      f["memcpy"].set_bool_value(k.memcpy);
      f["bytes"].set_number_value(static_cast<double>(k.bytes));
      f["start_unix_seconds"].set_number_value(UnixSeconds(k.start_ns, off));
      f["end_unix_seconds"].set_number_value(UnixSeconds(k.end_ns, off));
      f["duration_seconds"].set_number_value(
          k.end_ns > k.start_ns ? static_cast<double>(static_cast<uint64_t>(k.end_ns) -
                                                      static_cast<uint64_t>(k.start_ns)) /
                                      1e9
                                : 0.0);
      f["pid"].set_number_value(k.pid);
      f["graph_id"].set_number_value(static_cast<double>(k.graph_id));
      f["correlation_id"].set_number_value(static_cast<double>(k.correlation_id));
    }
  }
  return ToJson(root);
}

}  // namespace fabricscope::exporters
