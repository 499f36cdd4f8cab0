#include "exporters/analysis/fabric_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"

namespace fabricscope::exporters {

FabricModel::FabricModel(std::shared_ptr<const FabricTopology> topology, FabricModelOptions options)
    : options_(options),
      topology_(topology ? std::move(topology) : std::make_shared<const FabricTopology>()) {}

void FabricModel::SetTopology(std::shared_ptr<const FabricTopology> topology) {
  absl::MutexLock lock(&mu_);
  topology_ = topology ? std::move(topology) : std::make_shared<const FabricTopology>();
  placement_ = nullptr;
}

std::shared_ptr<const FabricPlacement> FabricModel::Placement() const {
  {
    // The cross-rank rule asks once per instance, under its shard's lock: a reader's look.
    absl::ReaderMutexLock lock(&mu_);
    if (placement_) return placement_;
  }
  absl::MutexLock lock(&mu_);
  if (placement_) return placement_;
  FabricSnapshot s;
  PlaceNodesLocked(&s);
  auto p = std::make_shared<FabricPlacement>();
  for (const FabricSnapshot::Leaf& l : s.leaves) {
    p->leaves.push_back({l.name, l.uplink_bytes_per_second});
  }
  for (size_t i = 0; i < s.leaves.size(); ++i) {
    for (const std::string& node : s.leaves[i].nodes) p->leaf_of_node[node] = static_cast<int>(i);
  }
  placement_ = std::move(p);
  return placement_;
}

uint32_t FabricModel::NodeIdLocked(const std::string& node) {
  // A node keeps its id when it is forgotten and comes back: bucket entries name nodes by id.
  auto [it, fresh] = ids_.try_emplace(node, static_cast<uint32_t>(node_names_.size()));
  if (fresh) node_names_.push_back(node);
  return it->second;
}

FabricModel::Bucket* FabricModel::BucketLocked(int64_t batch_unix_ns, int64_t now_unix_ns) {
  // The aggregator's clock bounds the agents': a batch from a clock running ahead counts now
  // (one node's clock must not move the model's time), one older than the horizon (a spool
  // replayed after an outage) is counted late, not piled into the current bucket.
  if (batch_unix_ns > now_unix_ns + options_.bucket_ns) {
    batch_unix_ns = now_unix_ns;
    ++clock_ahead_batches_;
  }
  const int64_t oldest = now_unix_ns - options_.horizon_ns - options_.bucket_ns;
  while (!buckets_.empty() && buckets_.front().start_unix_ns < oldest) buckets_.pop_front();
  if (batch_unix_ns < oldest + options_.bucket_ns) return nullptr;
  const int64_t start = batch_unix_ns - batch_unix_ns % options_.bucket_ns;
  auto it = buckets_.end();
  while (it != buckets_.begin() && std::prev(it)->start_unix_ns >= start) --it;
  if (it != buckets_.end() && it->start_unix_ns == start) return &*it;
  it = buckets_.emplace(it);
  it->start_unix_ns = start;
  return &*it;
}

void FabricModel::TakeRanksLocked(NodeInfo& n, const v1::GpuWindow& w, int64_t now_unix_ns) {
  // The agent lists its communicators every window (agent/gpu_timeline.cc); one it no longer
  // lists stays placed for a horizon (its bytes in the buckets are placed at snapshot time),
  // then goes.
  for (const v1::Communicator& c : w.communicators()) {
    const std::pair<uint64_t, int32_t> key{c.comm_hash(), c.rank()};
    auto it = n.ranks.find(key);
    if (it == n.ranks.end()) {
      if (n.ranks.size() >= options_.max_ranks_per_node ||
          (node_of_rank_.size() >= options_.max_comm_ranks && !node_of_rank_.contains(key))) {
        ++n.ranks_refused;
        continue;
      }
      it = n.ranks.emplace(key, 0).first;
    }
    it->second = now_unix_ns;
    node_of_rank_[key] = n.id;
  }
  for (auto it = n.ranks.begin(); it != n.ranks.end();) {
    if (it->second + options_.horizon_ns + options_.bucket_ns >= now_unix_ns) {
      ++it;
      continue;
    }
    auto r = node_of_rank_.find(it->first);
    if (r != node_of_rank_.end() && r->second == n.id) node_of_rank_.erase(r);
    it = n.ranks.erase(it);
  }
}

void FabricModel::TakePairsLocked(NodeInfo& n, const v1::GpuWindow& w, Bucket* b) {
  const bool baseline = !n.seen_pairs;
  n.seen_pairs = true;
  // The agent sends every pair it tracks, every window: the totals are rebuilt from the batch
  // (bounded by the admission's limit on pairs per batch). A pair it dropped and lists again
  // (its communicator evicted, agent/comm_registry.h) starts from 0 there: counted whole.
  std::map<std::tuple<uint64_t, int32_t, int32_t>, uint64_t> totals;
  for (const v1::RankPairBytes& p : w.rank_pairs()) {
    const auto key = std::make_tuple(p.comm_hash(), p.src_rank(), p.dst_rank());
    auto old = n.totals.find(key);
    const uint64_t before = old != n.totals.end() ? old->second : 0;
    // A total that went down is an agent restart: all of it is new.
    const uint64_t delta = p.bytes_total() >= before ? p.bytes_total() - before : p.bytes_total();
    totals[key] = p.bytes_total();
    if (baseline || delta == 0) continue;
    if (b == nullptr) {  // a batch older than the horizon (an agent's spool replayed)
      late_bytes_ += delta;
      continue;
    }
    const PairKey k{p.comm_hash(), n.id, p.dst_rank()};
    auto e = b->bytes.find(k);
    if (e != b->bytes.end()) {
      e->second += delta;
    } else if (b->bytes.size() < options_.max_pairs_per_bucket) {
      b->bytes.emplace(k, delta);
    } else {
      b->dropped += delta;
    }
  }
  n.totals = std::move(totals);
}

void FabricModel::OnBatch(const std::string& node, const v1::Batch& batch, int64_t now_unix_ns) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) {
    // Distinct names bounded too: ids are never reused for another name.
    if (nodes_.size() >= options_.max_nodes || node_names_.size() >= 4 * options_.max_nodes) {
      return;
    }
    it = nodes_.emplace(node, NodeInfo{}).first;
    it->second.id = NodeIdLocked(node);
    placement_ = nullptr;
  }
  NodeInfo& n = it->second;
  if (batch.ports_size() > 0) {
    std::vector<std::pair<std::string, std::string>> neighbors;
    for (const v1::PortWindow& p : batch.ports()) {
      if (p.has_neighbor() && neighbors.size() < 64) {
        neighbors.emplace_back(p.neighbor().chassis_name(), p.neighbor().chassis_id());
      }
    }
    if (neighbors != n.neighbors) {
      n.neighbors = std::move(neighbors);
      placement_ = nullptr;
    }
  }
  if (!batch.has_gpu()) return;
  TakeRanksLocked(n, batch.gpu(), now_unix_ns);
  TakePairsLocked(n, batch.gpu(),
                  BucketLocked(batch.window_end_ns() + batch.unix_offset_ns(), now_unix_ns));
}

void FabricModel::Forget(const std::string& node) {
  absl::MutexLock lock(&mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  for (const auto& [key, seen] : it->second.ranks) {
    auto r = node_of_rank_.find(key);
    if (r != node_of_rank_.end() && r->second == it->second.id) node_of_rank_.erase(r);
  }
  nodes_.erase(it);
  placement_ = nullptr;
}

std::vector<int> FabricModel::PlaceNodesLocked(FabricSnapshot* s) const {
  const FabricTopology& t = *topology_;
  for (const FabricLeaf& l : t.leaves) {
    FabricSnapshot::Leaf out;
    out.name = l.name;
    out.source = "file";
    out.uplink_bytes_per_second = l.uplink_bytes_per_second;
    s->leaves.push_back(std::move(out));
  }
  std::map<std::string, int> lldp_leaves;  // LLDP-only leaves by chassis name
  std::vector<int> leaf_of(node_names_.size(), -1);
  // The file's nodes, also those that have not reported.
  std::set<std::string> placed;
  for (const auto& [name, n] : nodes_) {
    int file_leaf = -1;
    if (auto f = t.leaf_of_node.find(name); f != t.leaf_of_node.end()) {
      file_leaf = static_cast<int>(f->second);
    }
    // The leaf most of its ports reach over LLDP (ties: the first port's).
    std::map<int, int> votes;
    std::vector<int> order;
    std::string chassis_of_best;
    std::map<int, std::string> chassis_of;
    for (const auto& [chassis_name, chassis_id] : n.neighbors) {
      int leaf = -1;
      for (const std::string* c : {&chassis_name, &chassis_id}) {
        if (auto f = t.leaf_of_chassis.find(*c); !c->empty() && f != t.leaf_of_chassis.end()) {
          leaf = static_cast<int>(f->second);
          break;
        }
      }
      const std::string& label = chassis_name.empty() ? chassis_id : chassis_name;
      if (leaf < 0 && !label.empty()) {
        auto [it, fresh] = lldp_leaves.try_emplace(label, -1);
        if (fresh && s->leaves.size() < kMaxLeaves) {
          it->second = static_cast<int>(s->leaves.size());
          FabricSnapshot::Leaf out;
          out.name = label;
          out.source = "lldp";
          s->leaves.push_back(std::move(out));
        }
        leaf = it->second;
      }
      if (leaf < 0) continue;
      if (votes[leaf]++ == 0) order.push_back(leaf);
      chassis_of.emplace(leaf, label);
    }
    int lldp_leaf = -1;
    for (int leaf : order) {
      if (lldp_leaf < 0 || votes[leaf] > votes[lldp_leaf]) lldp_leaf = leaf;
    }
    if (order.size() > 1) s->multi_leaf_nodes.push_back(name);
    if (lldp_leaf >= 0 && file_leaf >= 0 && lldp_leaf != file_leaf) {
      s->disagreements.push_back(
          {name, s->leaves[file_leaf].name, s->leaves[lldp_leaf].name, chassis_of[lldp_leaf]});
    }
    // What the cable says wins over the file (which may be stale); the difference is reported.
    const int leaf = lldp_leaf >= 0 ? lldp_leaf : file_leaf;
    leaf_of[n.id] = leaf;
    if (leaf >= 0) s->leaves[leaf].nodes.push_back(name);
    placed.insert(name);
  }
  for (const auto& [name, leaf] : t.leaf_of_node) {
    if (!placed.contains(name)) s->leaves[leaf].nodes.push_back(name);
  }
  return leaf_of;
}

namespace {

// Largest first, then by key; at most n kept.
void KeepLargest(std::vector<FabricSnapshot::Local>* v, size_t n) {
  std::sort(v->begin(), v->end(), [](const auto& a, const auto& b) {
    if (a.total_bytes != b.total_bytes) return a.total_bytes > b.total_bytes;
    return a.comm != b.comm ? a.comm < b.comm : a.job < b.job;
  });
  if (v->size() > n) v->resize(n);
  for (auto& l : *v) {
    l.ratio = static_cast<double>(l.local_bytes) / static_cast<double>(l.total_bytes);
  }
}

}  // namespace

FabricSnapshot FabricModel::Snapshot(int64_t now_unix_ns,
                                     const std::map<uint64_t, std::string>& job_of_comm) const {
  FabricSnapshot s;
  absl::ReaderMutexLock lock(&mu_);
  const std::vector<int> leaf_of = PlaceNodesLocked(&s);
  const size_t nl = s.leaves.size();
  s.leaf_bytes.assign(nl, std::vector<double>(nl, 0));
  std::map<uint64_t, FabricSnapshot::Local> comms;
  std::map<std::string, FabricSnapshot::Local> jobs;
  // The whole buckets of the horizon that hold traffic: the rates are over the span from the
  // first of them to the end of the last (a baseline-only bucket holds none).
  const int64_t since = now_unix_ns - options_.horizon_ns;
  int64_t first = 0, last = 0;
  for (const Bucket& b : buckets_) {
    if (b.start_unix_ns < since - since % options_.bucket_ns) continue;
    if (!b.bytes.empty() || b.dropped > 0) {
      if (first == 0) first = b.start_unix_ns;
      last = b.start_unix_ns + options_.bucket_ns;
    }
    s.dropped_bytes += b.dropped;
    for (const auto& [k, bytes] : b.bytes) {
      const auto dst_node = node_of_rank_.find({k.comm, k.dst_rank});
      const int src = k.src < leaf_of.size() ? leaf_of[k.src] : -1;
      const int dst = dst_node != node_of_rank_.end() && dst_node->second < leaf_of.size()
                          ? leaf_of[dst_node->second]
                          : -1;
      if (src < 0 || dst < 0) {
        s.unplaced_bytes += bytes;
        continue;
      }
      s.leaf_bytes[src][dst] += static_cast<double>(bytes);
      const uint64_t local = src == dst ? bytes : 0;
      FabricSnapshot::Local& c = comms[k.comm];
      c.comm = k.comm;
      c.local_bytes += local;
      c.total_bytes += bytes;
      if (auto j = job_of_comm.find(k.comm); j != job_of_comm.end() && !j->second.empty()) {
        FabricSnapshot::Local& jl = jobs[j->second];
        jl.job = j->second;
        jl.local_bytes += local;
        jl.total_bytes += bytes;
      }
    }
  }
  s.seconds = static_cast<double>(std::max(last - first, options_.bucket_ns)) / 1e9;
  s.late_bytes = late_bytes_;
  s.clock_ahead_batches = clock_ahead_batches_;
  for (size_t i = 0; i < nl; ++i) {
    FabricSnapshot::Leaf& l = s.leaves[i];
    double out = 0, in = 0;
    for (size_t j = 0; j < nl; ++j) {
      if (j == i) continue;
      out += s.leaf_bytes[i][j];
      in += s.leaf_bytes[j][i];
    }
    l.egress_bytes_per_second = out / s.seconds;
    l.ingress_bytes_per_second = in / s.seconds;
    l.demand_ratio = l.uplink_bytes_per_second > 0
                         ? std::max(l.egress_bytes_per_second, l.ingress_bytes_per_second) /
                               l.uplink_bytes_per_second
                         : std::numeric_limits<double>::quiet_NaN();
    std::sort(l.nodes.begin(), l.nodes.end());
  }
  for (auto& [comm, l] : comms) s.comms.push_back(l);
  for (auto& [job, l] : jobs) s.jobs.push_back(l);
  KeepLargest(&s.comms, options_.max_series);
  KeepLargest(&s.jobs, options_.max_series);
  return s;
}

HeatmapModel LeavesHeatmap(const FabricSnapshot& s) {
  HeatmapModel m;
  m.title = absl::StrCat("NCCL traffic between leaves, last ", s.seconds, " s");
  m.row_axis = "source leaf";
  m.col_axis = "destination leaf";
  m.value_label = "bytes per second";
  for (const FabricSnapshot::Leaf& l : s.leaves) {
    m.rows.push_back(l.name);
    m.col_labels.push_back(l.name);
  }
  m.cols = s.leaves.size();
  double peak = 0;
  for (size_t i = 0; i < s.leaves.size(); ++i) {
    for (size_t j = 0; j < s.leaves.size(); ++j) {
      const double v = s.leaf_bytes[i][j] / s.seconds;
      m.values.push_back(static_cast<float>(v));
      peak = std::max(peak, v);
    }
  }
  m.scale_max = peak > 0 ? peak : 1;
  if (s.leaves.empty()) {
    m.note = "no leaves: give --topology-file, or run lldpd on the nodes (exporters/README.md)";
  }
  return m;
}

}  // namespace fabricscope::exporters
