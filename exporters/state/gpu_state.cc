#include "exporters/state/gpu_state.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iterator>
#include <limits>
#include <string_view>
#include <tuple>

#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "collectors/common/collective_vocabulary.h"
#include "collectors/common/histogram_math.h"
#include "exporters/analysis/imbalance.h"

namespace fabricscope::exporters {

namespace {

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

// s cut to at most max_bytes at the start of the character that would be cut (UTF-8
// continuation bytes are 10xxxxxx, RFC 3629 section 3), so that the JSON stays valid UTF-8.
std::string_view Bounded(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  size_t n = max_bytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

// "device:port" as PortDescriptor::Key() writes an RDMA port: a device name of at most
// kMaxLabelBytes letters, digits, '_', '-' or '.', and a port number of 1 to 3 digits.
bool IsPortName(std::string_view s) {
  const size_t colon = s.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon > GpuState::kMaxLabelBytes ||
      s.size() - colon - 1 < 1 || s.size() - colon - 1 > 3) {
    return false;
  }
  for (size_t i = 0; i < s.size(); ++i) {
    if (i == colon) continue;
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const bool ok = i > colon ? std::isdigit(c) != 0
                              : (std::isalnum(c) != 0 || c == '_' || c == '-' || c == '.');
    if (!ok) return false;
  }
  return true;
}

// Past GpuState::kMaxPortPids, the pids not in `connected` leave first, lowest first.
template <typename Value>
void BoundByPid(const absl::flat_hash_set<int32_t>& connected, std::map<int32_t, Value>* kept) {
  for (auto it = kept->begin(); kept->size() > GpuState::kMaxPortPids && it != kept->end();) {
    it = connected.contains(it->first) ? std::next(it) : kept->erase(it);
  }
  while (kept->size() > GpuState::kMaxPortPids) kept->erase(kept->begin());
}

// Records the ports each producer reports (GpuProducer.rdma_ports) into `kept`: a producer with
// none leaves its entry alone (unknown now says nothing against what was seen). Past
// GpuState::kMaxPortPids, processes that are no longer connected leave first, lowest pid first.
void KeepProcessPorts(const v1::GpuIngestStats& ingest,
                      std::map<int32_t, std::vector<std::string>>* kept) {
  absl::flat_hash_set<int32_t> connected;
  for (const v1::GpuProducer& p : ingest.producers()) {
    connected.insert(p.pid());
    if (p.rdma_ports_size() == 0 || p.pid() <= 0) continue;
    std::vector<std::string> ports;
    for (const std::string& port : p.rdma_ports()) {
      if (ports.size() >= GpuState::kMaxPortsPerPid) break;
      if (IsPortName(port)) ports.push_back(port);
    }
    if (ports.empty()) continue;
    (*kept)[p.pid()] = std::move(ports);
  }
  BoundByPid(connected, kept);
}

// Records the job each process of the window belongs to (its communicators' and connected
// producers' job_id, cut to kMaxLabelBytes x 2), kept after it exits within the same bound.
void KeepProcessJobs(const v1::GpuWindow& w, std::map<int32_t, std::string>* kept) {
  absl::flat_hash_set<int32_t> seen;
  const auto keep = [&](int32_t pid, const std::string& job) {
    seen.insert(pid);
    if (pid > 0 && !job.empty())
      (*kept)[pid] = std::string(Bounded(job, 2 * GpuState::kMaxLabelBytes));
  };
  for (const v1::Communicator& c : w.communicators()) keep(c.pid(), c.job_id());
  for (const v1::GpuProducer& p : w.ingest().producers()) keep(p.pid(), p.job_id());
  BoundByPid(seen, kept);
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

std::map<std::string, std::set<int32_t>> GpuState::PidsOfJob(absl::string_view job) const {
  std::map<std::string, std::set<int32_t>> out;
  if (job.empty()) return out;
  for (const auto& [node, n] : nodes_) {
    for (const auto& [pid, id] : n.pid_jobs) {
      if (id == job) out[node].insert(pid);
    }
  }
  return out;
}

std::map<int32_t, std::vector<std::string>> GpuState::ProcessPorts(absl::string_view node) const {
  const auto it = nodes_.find(std::string(node));
  return it == nodes_.end() ? std::map<int32_t, std::vector<std::string>>{} : it->second.pid_ports;
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
    KeepProcessPorts(batch.gpu().ingest(), &n.pid_ports);
    KeepProcessJobs(batch.gpu(), &n.pid_jobs);
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
  const size_t spans = std::min<size_t>(static_cast<size_t>(c.channel_spans_size()),
                                        CollectiveRecord::kMaxChannelSpans);
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
      .channel_spans = static_cast<uint8_t>(spans),
  };
  for (size_t i = 0; i < spans; ++i) {
    const v1::ChannelSpan& ch = c.channel_spans(static_cast<int>(i));
    n.channel_spans.push_back(
        {UnixNs(ch.start_ns(), unix_offset_ns), UnixNs(ch.end_ns(), unix_offset_ns), ch.channel()});
  }
  for (size_t i = 0; i < peers; ++i) {
    const v1::ProxyPeer& p = c.proxy_peers(static_cast<int>(i));
    n.proxy_peers.push_back(ProxyPeer{p.peer(), p.bytes_sent(), p.bytes_received()});
  }
  Collective evicted{};
  if (n.collectives.Push(stored, options_.recent_collectives_per_node, &evicted)) {
    ReleaseCollective(evicted);
    // The oldest collective's peers are the oldest in the FIFO.
    n.proxy_peers.erase(n.proxy_peers.begin(), n.proxy_peers.begin() + evicted.proxy_peers);
    n.channel_spans.erase(n.channel_spans.begin(), n.channel_spans.begin() + evicted.channel_spans);
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

// The rank imbalance of each communicator label and direction: the coefficient of variation of
// its ranks' bytes (labels shared by several hashes merge; "other" is left out).
void RankImbalance(const std::map<uint64_t, std::map<int32_t, double>> (&rank_bytes)[2],
                   const std::map<uint64_t, std::string>& comm_label,
                   std::vector<GpuSnapshot::RankImbalance>* out) {
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
      out->push_back({label, d == 0 ? "transmit" : "receive", cov});
    }
  }
}

// The top `k` (comm, src, dst) pairs by bytes, most first.
std::vector<GpuSnapshot::RankPair> TopRankPairs(
    const std::map<std::tuple<uint64_t, int32_t, int32_t>, double>& pair_bytes, size_t top_k) {
  std::vector<std::pair<std::tuple<uint64_t, int32_t, int32_t>, double>> top(pair_bytes.begin(),
                                                                             pair_bytes.end());
  const size_t k = std::min(top_k, top.size());
  std::partial_sort(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(k), top.end(),
                    [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<GpuSnapshot::RankPair> out;
  out.reserve(k);
  for (size_t i = 0; i < k; ++i) {
    const auto& [comm, src, dst] = top[i].first;
    out.push_back({comm, src, dst, top[i].second});
  }
  return out;
}

}  // namespace

GpuSnapshot GpuState::Snapshot() const {
  GpuSnapshot out;
  // Per direction, comm -> rank -> bytes over each node's recent batches.
  std::map<uint64_t, std::map<int32_t, double>> rank_bytes[2];
  const std::map<uint64_t, std::string> comm_label = CommLabels(rank_bytes);

  std::map<std::pair<std::string, std::string>, GpuSnapshot::Series> series;  // (func, comm)
  std::map<std::string, double> per_func;
  std::map<std::pair<std::string, int>, double> per_source;  // (func, v1::TimingSource)
  std::map<std::tuple<uint64_t, int32_t, int32_t>, double> pair_bytes;
  for (const auto& [node, n] : nodes_) {
    for (const v1::CollectiveTotals& t : n.last.collective_totals()) {
      GpuSnapshot::Series& s = series[{t.func(), comm_label.at(t.comm_hash())}];
      common::MergeHistogram(&s.durations, t.duration_seconds());
      s.bus_bytes += static_cast<double>(t.bus_bytes_total());
      per_func[t.func()] += static_cast<double>(t.count());
      for (int i = 1; i < t.count_by_timing_source_size() && i <= 4; ++i) {
        per_source[{t.func(), i}] += static_cast<double>(t.count_by_timing_source(i));
      }
    }
    for (const auto& [key, last] : n.last_busbw) {
      auto label = comm_label.find(key.first);
      GpuSnapshot::Series& s = series[{key.second, label != comm_label.end() ? label->second : ""}];
      s.weighted_busbw += last.busbw * last.seconds;
      s.seconds += last.seconds;
    }
    for (const v1::RankPairBytes& rp : n.last.rank_pairs()) {
      pair_bytes[{rp.comm_hash(), rp.src_rank(), rp.dst_rank()}] +=
          static_cast<double>(rp.bytes_total());
    }
    if (!n.have) continue;
    GpuSnapshot::Node& g = out.nodes.emplace_back();
    g.node = node;
    g.ingest = n.last.ingest();
    g.communicators_evicted_total = n.last.communicators_evicted_total();
    g.kernels.assign(n.last.kernel_totals().begin(), n.last.kernel_totals().end());
  }
  out.series.reserve(series.size());
  for (auto& [key, s] : series) {
    s.func = key.first;
    s.comm = key.second;
    out.series.push_back(std::move(s));
  }
  out.collectives_by_func.assign(per_func.begin(), per_func.end());
  for (const auto& [key, v] : per_source) {
    out.by_timing_source.push_back({key.first, static_cast<v1::TimingSource>(key.second), v});
  }
  RankImbalance(rank_bytes, comm_label, &out.rank_imbalance);
  out.top_rank_pairs = TopRankPairs(pair_bytes, options_.rank_pair_top_k);
  return out;
}

std::vector<CollectiveRecord> GpuState::RecentCollectives(absl::string_view node_filter,
                                                          size_t limit) const {
  std::vector<CollectiveRecord> out;
  // One node: looked up, not scanned for (a job's heat map asks once per node of the job).
  auto first = nodes_.begin(), last = nodes_.end();
  if (!node_filter.empty()) {
    first = nodes_.find(std::string(node_filter));
    last = first == nodes_.end() ? first : std::next(first);
  }
  for (auto it = first; it != last; ++it) {
    const auto& [node, n] = *it;
    const size_t skip =
        limit > 0 && n.collectives.size() > limit ? n.collectives.size() - limit : 0;
    size_t peer_index = 0;  // of collective i's first proxy peer in n.proxy_peers
    size_t span_index = 0;  // likewise in n.channel_spans
    for (size_t i = 0; i < skip; ++i) {
      peer_index += n.collectives[i].proxy_peers;
      span_index += n.collectives[i].channel_spans;
    }
    for (size_t i = skip; i < n.collectives.size(); ++i) {
      const Collective& c = n.collectives[i];
      const CollectiveProfile& p = profiles_.Get(c.profile);
      CollectiveRecord& r = out.emplace_back();
      r.node = node;
      r.comm_hash = p.comm_hash;
      r.rank = p.rank;
      r.nranks = p.nranks;
      r.root = p.root;
      r.peer = p.peer;
      r.pid = p.pid;
      r.gpu = p.gpu;
      r.channels = p.channels;
      r.func = strings_.Get(p.func);
      r.datatype = strings_.Get(p.datatype);
      r.algo = strings_.Get(p.algo);
      r.proto = strings_.Get(p.proto);
      r.timing_source = static_cast<v1::TimingSource>(p.timing_source);
      r.p2p = p.p2p;
      r.graph_captured = p.graph_captured;
      r.seq = c.seq;
      r.bytes = c.bytes;
      r.count = c.count;
      r.proxy_bytes = c.proxy_bytes;
      r.enqueue_start_unix_ns = c.enqueue_start_unix_ns;
      r.start_unix_ns = c.start_unix_ns;
      r.end_unix_ns = c.end_unix_ns;
      r.duration_seconds = c.duration_seconds;
      r.algbw_bytes_per_second = c.algbw_bytes_per_second;
      r.busbw_bytes_per_second = c.busbw_bytes_per_second;
      r.proxy_peers.reserve(c.proxy_peers);
      for (size_t j = 0; j < c.proxy_peers; ++j) {
        const ProxyPeer& pp = n.proxy_peers[peer_index++];
        r.proxy_peers.push_back({pp.peer, pp.bytes_sent, pp.bytes_received});
      }
      r.channel_spans.assign(
          n.channel_spans.begin() + static_cast<ptrdiff_t>(span_index),
          n.channel_spans.begin() + static_cast<ptrdiff_t>(span_index + c.channel_spans));
      span_index += c.channel_spans;
    }
  }
  return out;
}

std::vector<KernelRecord> GpuState::RecentKernels(absl::string_view node_filter,
                                                  size_t limit) const {
  std::vector<KernelRecord> out;
  for (const auto& [node, n] : nodes_) {
    if (!node_filter.empty() && node != node_filter) continue;
    const size_t skip = limit > 0 && n.kernels.size() > limit ? n.kernels.size() - limit : 0;
    for (size_t i = skip; i < n.kernels.size(); ++i) {
      const Kernel& k = n.kernels[i];
      KernelRecord& r = out.emplace_back();
      r.node = node;
      r.device = k.device;
      r.stream = k.stream;
      r.name = strings_.Get(k.name);
      r.is_nccl = k.is_nccl;
      r.memcpy = k.memcpy;
      r.bytes = k.bytes;
      r.graph_id = k.graph_id;
      r.correlation_id = k.correlation_id;
      r.start_unix_ns = UnixNs(k.start_ns, k.unix_offset_ns);
      r.end_unix_ns = UnixNs(k.end_ns, k.unix_offset_ns);
      r.duration_seconds = k.end_ns > k.start_ns
                               ? static_cast<double>(static_cast<uint64_t>(k.end_ns) -
                                                     static_cast<uint64_t>(k.start_ns)) /
                                     1e9
                               : 0.0;
      r.pid = k.pid;
    }
  }
  return out;
}

}  // namespace fabricscope::exporters
