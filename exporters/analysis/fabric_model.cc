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
  Placed placed = PlaceNodesLocked(&s);
  auto p = std::make_shared<FabricPlacement>();
  for (const FabricSnapshot::Leaf& l : s.leaves) {
    p->leaves.push_back({l.name, l.uplink_bytes_per_second});
  }
  for (size_t i = 0; i < s.leaves.size(); ++i) {
    for (const std::string& node : s.leaves[i].nodes) p->leaf_of_node[node] = static_cast<int>(i);
  }
  p->leaf_of_rank = std::move(placed.leaf_of_rank);
  p->multi_leaf_nodes.insert(s.multi_leaf_nodes.begin(), s.multi_leaf_nodes.end());
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
  // The RDMA ports each producer process has queue pairs on (agent/qp_ports.h).
  absl::flat_hash_map<int32_t, const v1::GpuProducer*> producer_of_pid;
  for (const v1::GpuProducer& p : w.ingest().producers()) {
    if (p.rdma_ports_size() > 0) producer_of_pid[p.pid()] = &p;
  }
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
      it = n.ranks.emplace(key, NodeInfo::RankInfo{}).first;
    }
    it->second.seen = now_unix_ns;
    node_of_rank_[key] = n.id;
    if (auto p = producer_of_pid.find(c.pid()); p != producer_of_pid.end()) {
      std::vector<uint16_t> ports;
      for (const std::string& port : p->second->rdma_ports()) {
        if (ports.size() >= 16) break;
        const auto k = std::find(n.port_keys.begin(), n.port_keys.end(), port);
        if (k != n.port_keys.end()) ports.push_back(static_cast<uint16_t>(k - n.port_keys.begin()));
      }
      if (ports != it->second.ports) {
        it->second.ports = std::move(ports);
        placement_ = nullptr;
      }
    }
  }
  for (auto it = n.ranks.begin(); it != n.ranks.end();) {
    if (it->second.seen + options_.horizon_ns + options_.bucket_ns >= now_unix_ns) {
      ++it;
      continue;
    }
    auto r = node_of_rank_.find(it->first);
    if (r != node_of_rank_.end() && r->second == n.id) node_of_rank_.erase(r);
    if (!it->second.ports.empty()) placement_ = nullptr;  // it was placed by its ports
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
    const PairKey k{p.comm_hash(), n.id, p.src_rank(), p.dst_rank()};
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

FabricModel::NodeInfo* FabricModel::NodeLocked(const std::string& node) {
  auto it = nodes_.find(node);
  if (it != nodes_.end()) return &it->second;
  // Distinct names bounded too: ids are never reused for another name.
  if (nodes_.size() >= options_.max_nodes || node_names_.size() >= 4 * options_.max_nodes) {
    return nullptr;
  }
  it = nodes_.emplace(node, NodeInfo{}).first;
  it->second.id = NodeIdLocked(node);
  placement_ = nullptr;
  return &it->second;
}

void FabricModel::OnHello(const v1::Hello& hello) {
  std::vector<NodeInfo::HcaPort> ports;
  std::vector<std::string> keys;
  for (const v1::PortInfo& p : hello.ports()) {
    if (keys.size() >= 256) break;
    if (p.rdma() && ports.size() < 64) {
      ports.push_back({static_cast<uint32_t>(keys.size()), p.device(), p.port(), p.node_guid()});
    }
    // The key GpuProducer.rdma_ports and the Hello's port labels use (agent/qp_ports.h).
    keys.push_back(p.rdma() ? absl::StrCat(p.device(), ":", p.port()) : p.device());
  }
  absl::MutexLock lock(&mu_);
  // A peer aggregator's Hello (no ports) makes no node.
  if (keys.empty() && !nodes_.contains(hello.node())) return;
  NodeInfo* n = NodeLocked(hello.node());
  if (n == nullptr || (ports == n->hca_ports && keys == n->port_keys)) return;
  n->hca_ports = std::move(ports);
  n->port_keys = std::move(keys);
  placement_ = nullptr;
}

void FabricModel::OnBatch(const std::string& node, const v1::Batch& batch, int64_t now_unix_ns) {
  absl::MutexLock lock(&mu_);
  NodeInfo* found = NodeLocked(node);
  if (found == nullptr) return;
  NodeInfo& n = *found;
  if (batch.ports_size() > 0) {
    std::vector<NodeInfo::Neighbor> neighbors;
    for (const v1::PortWindow& p : batch.ports()) {
      if (p.has_neighbor() && neighbors.size() < 64) {
        neighbors.push_back(
            {p.port_index(), p.neighbor().chassis_name(), p.neighbor().chassis_id()});
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

int FabricModel::Placed::LeafOf(uint64_t comm, int32_t rank, uint32_t node) const {
  const bool known = node < leaf_of_node.size();
  return RankLeaf(leaf_of_rank, {comm, rank}, known ? leaf_of_node[node] : -1,
                  known && multi_leaf[node]);
}

namespace {

// The leaf most votes name; ties: the first named. -1 when there are none.
template <typename V, typename LeafOf>
const V* Majority(const std::vector<V>& votes, LeafOf leaf_of, size_t* distinct) {
  std::map<int, int> count;
  for (const V& v : votes) ++count[leaf_of(v)];
  *distinct = count.size();
  const V* best = nullptr;
  for (const V& v : votes) {
    if (best == nullptr || count[leaf_of(v)] > count[leaf_of(*best)]) best = &v;
  }
  return best;
}

}  // namespace

FabricModel::Placed FabricModel::PlaceNodesLocked(FabricSnapshot* s) const {
  const FabricTopology& t = *topology_;
  for (const FabricLeaf& l : t.leaves) {
    FabricSnapshot::Leaf out;
    out.name = l.name;
    out.source = l.source;
    out.rail = l.rail;
    out.uplink_bytes_per_second = l.uplink_bytes_per_second;
    s->leaves.push_back(std::move(out));
  }
  std::map<std::string, int> lldp_leaves;  // LLDP-only leaves by chassis name
  // The leaf of an LLDP neighbour: the file's by chassis name or id, else one of its own.
  auto lldp_leaf = [&](const NodeInfo::Neighbor& nb) {
    for (const std::string* c : {&nb.chassis_name, &nb.chassis_id}) {
      if (auto f = t.leaf_of_chassis.find(*c); !c->empty() && f != t.leaf_of_chassis.end()) {
        return static_cast<int>(f->second);
      }
    }
    const std::string& label = nb.Label();
    if (label.empty()) return -1;
    auto [it, fresh] = lldp_leaves.try_emplace(label, -1);
    if (fresh && s->leaves.size() < kMaxLeaves) {
      it->second = static_cast<int>(s->leaves.size());
      FabricSnapshot::Leaf out;
      out.name = label;
      out.source = "lldp";
      s->leaves.push_back(std::move(out));
    }
    return it->second;
  };
  Placed placed;
  placed.leaf_of_node.assign(node_names_.size(), -1);
  placed.multi_leaf.assign(node_names_.size(), false);
  std::set<std::string> seen;  // the file's nodes that have not reported are placed after
  for (const auto& [name, n] : nodes_) {
    int file_leaf = -1;
    if (auto f = t.leaf_of_node.find(name); f != t.leaf_of_node.end()) {
      file_leaf = static_cast<int>(f->second);
    }
    // One vote per cabled port: (port key, leaf, switch, source).
    std::vector<CableVote> votes;
    for (const NodeInfo::Neighbor& nb : n.neighbors) {
      const int leaf = lldp_leaf(nb);
      if (leaf >= 0) votes.push_back({nb.port_index, leaf, nb.Label(), "lldp"});
    }
    for (const NodeInfo::HcaPort& p : n.hca_ports) {
      // By (node GUID, port), else by the "<host> <device>" node description rdma-ndd sets.
      int leaf = -1;
      if (auto f = t.leaf_of_hca_port.find({p.node_guid, p.port});
          p.node_guid != 0 && f != t.leaf_of_hca_port.end()) {
        leaf = static_cast<int>(f->second);
      } else if (auto d = t.leaf_of_node_desc.find(absl::StrCat(name, " ", p.device));
                 d != t.leaf_of_node_desc.end()) {
        leaf = static_cast<int>(d->second);
      }
      if (leaf < 0) continue;
      votes.push_back({p.port_index, leaf, t.leaves[leaf].name, "ibnetdiscover"});
    }
    size_t distinct = 0;
    const CableVote* cable = Majority(
        votes, [](const CableVote& v) { return v.leaf; }, &distinct);
    if (distinct > 1) {
      s->multi_leaf_nodes.push_back(name);
      placed.multi_leaf[n.id] = true;
    }
    if (cable != nullptr && file_leaf >= 0 && cable->leaf != file_leaf) {
      s->disagreements.push_back({name, s->leaves[file_leaf].name, s->leaves[cable->leaf].name,
                                  cable->switch_name, cable->source});
    }
    // What the cable says wins over the file (which may be stale); the difference is reported.
    const int leaf = cable != nullptr ? cable->leaf : file_leaf;
    placed.leaf_of_node[n.id] = leaf;
    if (leaf >= 0) s->leaves[leaf].nodes.push_back(name);
    seen.insert(name);
    PlaceRanksLocked(n, votes, &placed.leaf_of_rank);
  }
  for (const auto& [name, leaf] : t.leaf_of_node) {
    if (!seen.contains(name)) s->leaves[leaf].nodes.push_back(name);
  }
  return placed;
}

void FabricModel::PlaceRanksLocked(const NodeInfo& n, const std::vector<CableVote>& port_votes,
                                   RankLeaves* out) const {
  if (port_votes.empty()) return;
  // A rank sits on the leaf its own ports reach (the ports its process has queue pairs on).
  for (const auto& [key, r] : n.ranks) {
    if (auto owner = node_of_rank_.find(key);
        owner == node_of_rank_.end() || owner->second != n.id) {
      continue;
    }
    std::vector<int> leaves;
    for (uint16_t port : r.ports) {
      for (const CableVote& v : port_votes) {
        if (v.port_index == port) leaves.push_back(v.leaf);
      }
    }
    size_t distinct = 0;
    if (const int* leaf = Majority(
            leaves, [](int l) { return l; }, &distinct)) {
      (*out)[key] = *leaf;
    }
  }
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
    l.rail_ratio = l.rail_total_bytes > 0 ? static_cast<double>(l.rail_local_bytes) /
                                                static_cast<double>(l.rail_total_bytes)
                                          : std::numeric_limits<double>::quiet_NaN();
  }
}

}  // namespace

FabricSnapshot FabricModel::Snapshot(int64_t now_unix_ns,
                                     const std::map<uint64_t, std::string>& job_of_comm) const {
  FabricSnapshot s;
  absl::ReaderMutexLock lock(&mu_);
  const Placed placed = PlaceNodesLocked(&s);
  const size_t nl = s.leaves.size();
  // Each leaf's rail, "" none (an LLDP-only leaf has none).
  std::vector<const std::string*> rail(nl, nullptr);
  for (size_t i = 0; i < nl && i < topology_->leaves.size(); ++i) {
    if (!topology_->leaves[i].rail.empty()) rail[i] = &topology_->leaves[i].rail;
  }
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
      const int src = placed.LeafOf(k.comm, k.src_rank, k.src);
      const int dst =
          placed.LeafOf(k.comm, k.dst_rank,
                        dst_node != node_of_rank_.end() ? dst_node->second
                                                        : std::numeric_limits<uint32_t>::max());
      if (src < 0 || dst < 0) {
        s.unplaced_bytes += bytes;
        continue;
      }
      s.leaf_bytes[src][dst] += static_cast<double>(bytes);
      const uint64_t local = src == dst ? bytes : 0;
      const bool rails_known = rail[src] != nullptr && rail[dst] != nullptr;
      const uint64_t rail_local = rails_known && *rail[src] == *rail[dst] ? bytes : 0;
      auto add = [&](FabricSnapshot::Local& l) {
        l.local_bytes += local;
        l.total_bytes += bytes;
        l.rail_local_bytes += rail_local;
        l.rail_total_bytes += rails_known ? bytes : 0;
      };
      FabricSnapshot::Local& c = comms[k.comm];
      c.comm = k.comm;
      add(c);
      if (auto j = job_of_comm.find(k.comm); j != job_of_comm.end() && !j->second.empty()) {
        FabricSnapshot::Local& jl = jobs[j->second];
        jl.job = j->second;
        add(jl);
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
    m.note =
        "no leaves: give --topology-file or --ib-fabric-file, or run lldpd on the nodes "
        "(exporters/README.md)";
  }
  return m;
}

}  // namespace fabricscope::exporters
