#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_map.h"
#include "absl/strings/string_view.h"
#include "exporters/state/gpu_views.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

// The aggregator's view of the nodes' GPU timelines (Batch fields 10-12): the latest cumulative
// GpuWindow per node, recent collectives and kernel spans per node for /api/collectives and
// /api/kernels, and the aggregates /metrics shows (GpuSnapshot; exporters/exposition/gpu_render.h
// renders both).
//
// Labels stay bounded: func comes from the agent's fixed set (agent/bus_bandwidth.h; anything
// else is "other"); comm is the first 8 hex digits of the communicator hash, for the
// max_comm_labels communicators with the most collectives (the rest fold into comm="other");
// rank pairs are the top rank_pair_top_k by bytes over all nodes.
//
// Rank imbalance (fabricscope_traffic_imbalance_ratio{scope="ranks",comm,direction}): per
// communicator, the coefficient of variation (exporters/analysis/imbalance.h) across its ranks of
// the network bytes each rank sent (transmit: its pairs as src) or received (receive: as dst) over
// each node's last imbalance_windows batches. A batch's bytes are the deltas of the node's
// cumulative rank_pairs against its previous batch: the first batch of a node (or of a new agent
// instance, after ResetNode) is only the baseline, a pair new since the previous batch counts its
// whole total, a total below the previous one (a counter reset) counts from zero. A rank
// appears when some node reported a pair of it in those batches (an idle rank shows as 0);
// absent for fewer than 2 ranks, no bytes, or a communicator beyond max_comm_labels. Ranks on
// nodes without an agent are missing from transmit and under-counted in receive. Memory: per
// node at most imbalance_windows x 2 x (its tracked pairs) entries of 24 bytes.
//
// Recent collectives and kernel spans are kept compact, not as the received messages. A
// collective is 88 bytes of per-operation fields (seq, sizes, times, durations, bandwidths)
// plus 24 bytes per proxy peer (in one FIFO per node); what a rank's collectives of one kind
// share (communicator, rank, func, datatype, algo, proto, pid, gpu, ...) is one interned
// profile, and strings (func, datatype, algo, proto, kernel name) are interned once per
// GpuState; both are reference-counted and freed when the last record using them leaves its
// ring, so odd input costs at most one profile (about 180 bytes with its index entry) per
// stored collective. A kernel span is 72 bytes. Agents are not trusted: a stored
// func/datatype/algo/proto keeps at most kMaxLabelBytes bytes, a kernel name at most
// kMaxKernelNameBytes (the agent sends at most 159), cut at a UTF-8 character boundary; a
// collective keeps its first kMaxProxyPeers proxy peers (the agent sends at most 32); a time
// past the int64 range of Unix ns saturates. Within those bounds the JSON is exactly what the
// agent sent.
//
// Not thread-safe: ClusterState calls it under its own lock.
class GpuState {
 public:
  struct Options {
    size_t recent_collectives_per_node = 1024;
    size_t recent_kernels_per_node = 1024;
    size_t rank_pair_top_k = 20;
    size_t max_comm_labels = 64;
    // Batches per node summed for the rank imbalance (10 s at the agent's default 1 s window).
    size_t imbalance_windows = 10;
  };
  GpuState() : GpuState(Options{}) {}
  explicit GpuState(Options options) : options_(options) {}

  // Stores what a validated batch of `node` carries (nothing when it has no GPU fields).
  void OnBatch(const std::string& node, const v1::Batch& batch);
  // A new agent instance on `node`: its cumulative totals restart.
  void ResetNode(const std::string& node);
  void set_rank_pair_top_k(size_t k) { options_.rank_pair_top_k = k; }

  // The aggregates of /metrics (exporters/state/gpu_views.h): the collective series by func and
  // communicator label, the rank imbalance, the top rank pairs and each node's ingest counters.
  GpuSnapshot Snapshot() const;

  // The stored collectives (CollectiveRecord), oldest first per node, nodes by name: at most
  // `limit` (0 = all kept) newest of each node; node_filter empty = all nodes.
  std::vector<CollectiveRecord> RecentCollectives(absl::string_view node_filter,
                                                  size_t limit) const;
  // The stored kernel spans (KernelRecord), same rules.
  std::vector<KernelRecord> RecentKernels(absl::string_view node_filter, size_t limit) const;
  // The processes of `job` (Job.id) per node: the pids whose communicators or producers a GPU
  // window of the node named with that job, kept after they exit (at most kMaxPortPids per node,
  // those no longer named leaving first).
  std::map<std::string, std::set<int32_t>> PidsOfJob(absl::string_view job) const;
  // The RDMA ports ("mlx5_2:1") each process of `node` had queue pairs on, as its producer last
  // reported them (GpuProducer.rdma_ports): processes still connected and, while there is room,
  // ones that have gone (their collectives stay in the ring); empty when none is known.
  std::map<int32_t, std::vector<std::string>> ProcessPorts(absl::string_view node) const;

  // Bounds on what one stored record keeps (see the class comment).
  static constexpr size_t kMaxLabelBytes = 64;
  static constexpr size_t kMaxKernelNameBytes = 256;
  static constexpr size_t kMaxProxyPeers = 32;
  // Processes per node whose ports (and jobs) are kept, and ports kept per process (the agent sends
  // at most 16, agent/qp_ports.h kMaxProducerPorts).
  static constexpr size_t kMaxPortPids = 1024;
  static constexpr size_t kMaxPortsPerPid = 16;

  // Distinct strings and collective profiles held for the stored records (for tests).
  size_t interned_strings() const { return strings_.size(); }
  size_t interned_profiles() const { return profiles_.size(); }

 private:
  struct RankBytes;
  std::map<uint64_t, std::string> CommLabels(
      std::map<uint64_t, std::map<int32_t, double>> (&rank_bytes)[2]) const;
  // Reference-counted interned values of type Key; ids are reused once freed. Keys stay put
  // while interned (node_hash_map nodes do not move).
  template <typename Key, typename Hash>
  class Interned {
   public:
    // The id of `key` (a Key or, with a transparent Hash, what compares with one); takes one
    // reference.
    template <typename K>
    uint32_t Intern(const K& key) {
      if (const auto it = index_.find(key); it != index_.end()) {
        ++entries_[it->second].refs;
        return it->second;
      }
      uint32_t id;
      if (free_ids_.empty()) {
        id = static_cast<uint32_t>(entries_.size());
        entries_.emplace_back();
      } else {
        id = free_ids_.back();
        free_ids_.pop_back();
      }
      const auto it = index_.emplace(Key(key), id).first;
      entries_[id] = Entry{&it->first, 1};
      return id;
    }
    // Drops one reference of `id`; at zero, calls on_free(key) and frees it.
    template <typename OnFree>
    void Release(uint32_t id, OnFree on_free) {
      Entry& e = entries_[id];
      if (--e.refs > 0) return;
      on_free(*e.key);
      index_.erase(index_.find(*e.key));
      e.key = nullptr;
      free_ids_.push_back(id);
    }
    // Takes one more reference of an interned id.
    void AddRef(uint32_t id) { ++entries_[id].refs; }
    const Key& Get(uint32_t id) const { return *entries_[id].key; }
    size_t size() const { return index_.size(); }

   private:
    struct Entry {
      const Key* key = nullptr;  // in index_
      uint32_t refs = 0;
    };
    absl::node_hash_map<Key, uint32_t, Hash, std::equal_to<>> index_;
    std::vector<Entry> entries_;
    std::vector<uint32_t> free_ids_;
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };

  // At most `capacity` records, oldest first, in one array used as a ring once full.
  template <typename T>
  class Recent {
   public:
    size_t size() const { return buf_.size(); }
    const T& operator[](size_t i) const { return buf_[(head_ + i) % buf_.size()]; }
    // Appends v (capacity > 0); when `capacity` are held already, v replaces the oldest, which
    // is returned through *evicted, and returns true.
    bool Push(const T& v, size_t capacity, T* evicted) {
      if (buf_.size() < capacity) {
        buf_.push_back(v);
        if (buf_.size() == capacity) buf_.shrink_to_fit();
        return false;
      }
      *evicted = buf_[head_];
      buf_[head_] = v;
      head_ = (head_ + 1) % buf_.size();
      return true;
    }

   private:
    std::vector<T> buf_;
    size_t head_ = 0;
  };

  // What a rank's collectives of one kind share (the fields of a v1::Collective other than the
  // per-operation ones): interned, one copy for all of them. Strings are strings_ ids.
  struct CollectiveProfile {
    uint64_t comm_hash;
    int32_t rank;
    int32_t nranks;
    int32_t root;
    int32_t peer;
    int32_t pid;
    int32_t gpu;
    uint32_t channels;
    uint32_t func;
    uint32_t datatype;
    uint32_t algo;
    uint32_t proto;
    uint8_t timing_source;  // v1::TimingSource, 0 for values outside the enum
    bool p2p;
    bool graph_captured;
    bool operator==(const CollectiveProfile&) const = default;
  };
  struct ProfileHash {
    size_t operator()(const CollectiveProfile& p) const;
  };
  // One v1::Collective: its profiles_ id and the per-operation fields the JSON shows. Times are
  // Unix ns (monotonic + the batch's offset; 0 when the agent sent 0 = unknown).
  struct Collective {
    uint64_t seq;
    uint64_t bytes;
    uint64_t count;
    uint64_t proxy_bytes;
    int64_t enqueue_start_unix_ns;
    int64_t start_unix_ns;
    int64_t end_unix_ns;
    double duration_seconds;
    double algbw_bytes_per_second;
    double busbw_bytes_per_second;
    uint32_t profile;
    uint8_t proxy_peers;    // its peers, in order, in NodeGpu::proxy_peers
    uint8_t channel_spans;  // its channel spans, in order, in NodeGpu::channel_spans
  };
  struct ProxyPeer {
    int32_t peer;
    uint64_t bytes_sent;
    uint64_t bytes_received;
  };
  // One v1::KernelSpan, the fields the JSON shows; name is a strings_ id.
  struct Kernel {
    int64_t unix_offset_ns;
    int64_t start_ns;
    int64_t end_ns;
    uint64_t bytes;
    uint64_t graph_id;
    uint64_t correlation_id;
    uint32_t device;
    uint32_t stream;
    int32_t pid;
    uint32_t name;
    bool is_nccl;
    bool memcpy;
  };
  struct LastBusBw {
    double busbw = 0;
    double seconds = 0;
  };
  using PairKey = std::tuple<uint64_t, int32_t, int32_t>;  // comm, src rank, dst rank
  // Bytes one rank of one communicator sent (direction 0) or received (1) in one batch.
  struct RankBytes {
    uint64_t comm;
    int32_t rank;
    int32_t direction;
    uint64_t bytes;
  };
  struct NodeGpu {
    v1::GpuWindow last;
    bool have = false;
    Recent<Collective> collectives;
    std::deque<ProxyPeer> proxy_peers;                        // of the collectives, oldest first
    std::deque<CollectiveRecord::ChannelSpan> channel_spans;  // likewise
    Recent<Kernel> kernels;
    // (comm, func) -> the last window in which it ran with a known duration.
    std::map<std::pair<uint64_t, std::string>, LastBusBw> last_busbw;
    // The previous batch's cumulative rank_pairs (the delta baseline) and the per-rank bytes
    // of the last imbalance_windows batches, oldest first.
    std::map<PairKey, uint64_t> pair_totals;
    bool have_pair_totals = false;
    std::deque<std::vector<RankBytes>> rank_windows;
    std::map<int32_t, std::vector<std::string>> pid_ports;  // ProcessPorts
    std::map<int32_t, std::string> pid_jobs;                // PidsOfJob
  };

  // The string ids one batch names, each looked up in strings_ once per batch. The cache holds
  // one reference of each id it returns until it is destroyed (at the end of the batch), so an
  // id it hands out cannot be freed and reused meanwhile; callers that keep an id take their
  // own (strings_.AddRef).
  class BatchStrings {
   public:
    explicit BatchStrings(GpuState& g) : g_(g) {}
    ~BatchStrings();
    BatchStrings(const BatchStrings&) = delete;
    BatchStrings& operator=(const BatchStrings&) = delete;
    uint32_t Id(std::string_view s);

   private:
    static constexpr size_t kSearched = 16;
    GpuState& g_;
    absl::InlinedVector<std::pair<std::string_view, uint32_t>, kSearched> ids_;
    std::vector<uint32_t> held_;
  };
  // Appends the per-rank bytes of `w` since n's previous batch (see the class comment).
  void AddRankWindow(NodeGpu& n, const v1::GpuWindow& w);
  // Stores c / k in n's ring, releasing what the record it replaces held.
  void AddCollective(NodeGpu& n, int64_t unix_offset_ns, const v1::Collective& c,
                     BatchStrings& strings);
  void AddKernel(NodeGpu& n, int64_t unix_offset_ns, const v1::KernelSpan& k);
  void ReleaseCollective(const Collective& c);
  void ReleaseString(uint32_t id);

  Options options_;
  Interned<std::string, StringHash> strings_;
  Interned<CollectiveProfile, ProfileHash> profiles_;
  std::map<std::string, NodeGpu> nodes_;
};

}  // namespace fabricscope::exporters
