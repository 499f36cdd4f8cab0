#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "exporters/analysis/cross_rank.h"
#include "exporters/analysis/fabric_model.h"
#include "exporters/analysis/link_analysis.h"
#include "exporters/state/cluster_views.h"
#include "exporters/state/gpu_state.h"
#include "exporters/state/job_table.h"
#include "exporters/state/recording_fetch.h"
#include "exporters/state/state_observer.h"
#include "fabricscope/v1/telemetry.pb.h"

namespace fabricscope::exporters {

class Forwarder;  // exporters/shard/forwarder.h
class PeerRing;   // exporters/shard/peer_ring.h

// What admission (exporters/ingest/admission.h) found in one batch. The state asks for it at the
// batch's place in the order: past the sequence checks, under the node's ingest stripe, with the
// node's port count as the Hello announced it.
struct BatchVerdict {
  // Not ok: the batch is dropped whole, acked (resending cannot fix it) and counted in
  // fabricscope_aggregator_rejected_batches_total under `reason`.
  absl::Status invalid;
  const char* reason = "";  // one of ClusterState::kRejectedBatchReasons
  // Not ok (and `invalid` ok): only the batch's GPU window is dropped, counted under gpu_reason.
  absl::Status gpu_invalid;
  const char* gpu_reason = "";
};
// (batch, the node's port count; 0 for a peer's batch) -> its verdict. Called at most once.
using BatchCheck = absl::FunctionRef<BatchVerdict(const v1::Batch& batch, size_t ports)>;

// Latest state of every node that reports to this aggregator. It renders nothing: Snapshot() and
// the other views (exporters/state/cluster_views.h) are what exporters/exposition/ renders.
//
// Agents send cumulative values (hardware counter totals, cumulative histograms), so the state
// is "the latest batch per node": an aggregator restart loses nothing that the next batch does
// not restore. Batches are deduplicated by (node, instance_id, seq).
//
// Thread-safe: every method may be called from any thread (gRPC reactors, the HTTP server's
// scrape threads, the in-process agent). Ingest scales with threads: a node's Hellos and
// batches are ordered by one of kIngestStripes locks (by node name), and what they store is
// split over locks held briefly and never nested the other way: mu_ (the nodes' windows and
// counters), gpu_mu_ (the GPU state), then the link and cross-rank analyses' own (the latter
// sharded by communicator). Lock order: stripe, mu_, gpu_mu_, an analysis's; the recording
// fetch's (fetch_) after the stripe, never with mu_ or gpu_mu_ held. Snapshot() takes
// views under each lock in turn; rendering happens after, outside every lock.
class ClusterState {
 public:
  // Jobs and communicators one forwarded record carries at most (ForwardedAnalysis.jobs).
  static constexpr size_t kMaxForwardedJobs = 8;
  struct Options {
    size_t recent_bursts_per_node = 512;  // kept for /api/microbursts
    CrossRankOptions cross_rank;          // the cross-rank rules and the diagnosis
    // Nodes held at most (`limits: max_nodes`): a Hello for one more is refused, so invented
    // node names cannot grow memory and /metrics without bound. Sized for 10,000 nodes.
    size_t max_nodes = 16384;
    // The --metrics profile: which catalog families /metrics renders (ClusterSnapshot.profile).
    common::MetricProfile metrics = common::MetricProfile::kBasic;
    // The job table's bound and expiry (exporters/state/job_table.h; jobs expire in ExpireNodes).
    JobTable::Options jobs;
    // The fabric topology file's content (--topology-file); null = LLDP alone.
    std::shared_ptr<const FabricTopology> topology;
    // The clock of last_seen (ExpireNodes); null = absl::Now. The soak benchmark simulates an
    // hour with it.
    std::function<absl::Time()> now;
  };
  ClusterState() : ClusterState(Options{}) {}
  // links: the heat-map, temporal and loss-pattern analysis (exporters/analysis/link_analysis.h).
  explicit ClusterState(Options options, LinkAnalysisOptions links = {})
      : options_(options),
        links_(links),
        cross_rank_(WithFabric(options.cross_rank)),
        fabric_(options.topology, FabricModelOptions{.max_nodes = options.max_nodes}),
        jobs_(options.jobs) {}

  // Registers an agent instance. A new instance_id for a known node replaces the old instance's
  // ports; the same instance (reconnect) keeps its progress. The stored mark moves up to
  // hello.resume_seq - 1 (the agent holds nothing older). Returns the seq to ack. The Hello's
  // fields are trusted: what comes from a wire passes exporters/ingest/admission.h first.
  // Errors: ResourceExhausted for a new node past max_nodes, counted in
  // fabricscope_aggregator_refused_streams_total{reason="node_limit"}.
  absl::StatusOr<uint64_t> OnHello(const v1::Hello& hello);
  // OnHello's node limit alone, counted the same way; nothing is stored. Errors: as OnHello's.
  absl::Status CheckCapacity(const v1::Hello& hello);

  // Stores one batch. A seq at or below the stored mark is a duplicate (acked, not applied); a
  // jump past kMaxSeqStep is dropped and counted (seq_jump). Past those, `check` gives the
  // batch's verdict (BatchVerdict: dropped whole, or its GPU window only, counted and acked).
  // Returns the seq to ack: the highest contiguous one stored.
  // Errors: FailedPrecondition when (node, instance_id) sent no Hello (counted: before_hello).
  absl::StatusOr<uint64_t> OnBatch(const std::string& node, uint64_t instance_id,
                                   const v1::Batch& batch, BatchCheck check);
  // As above for a batch its caller vouches for (made it itself: tests, benchmarks): every
  // verdict ok. Stored port windows and microbursts past the Hello's ports are still skipped.
  absl::StatusOr<uint64_t> OnBatch(const std::string& node, uint64_t instance_id,
                                   const v1::Batch& batch);

  // What a scrape of /metrics reads (exporters/state/cluster_views.h ClusterSnapshot): under mu_
  // the nodes' views and the counters, under gpu_mu_ the GPU aggregates, then the analyses'
  // snapshots; the longest a lock was held is last_collect_lock_ns().
  ClusterSnapshot Snapshot() const;

  // Sharded aggregators (issue 18; exporters/state/cluster_state_peers.cc). The peer list as
  // this aggregator sees it, and where the analyses of communicators another peer owns go:
  // from then on each batch's are handed to `forwarder` instead of being matched here (null
  // ring: all matched here). Its counts are in Snapshot().peers.
  void SetSharding(std::shared_ptr<const PeerRing> ring, std::shared_ptr<Forwarder> forwarder);
  std::shared_ptr<const PeerRing> ring() const;
  // A peer aggregator's Hello (Hello.peer): its node must be a gRPC address of the peer list
  // other than this aggregator's. A new instance starts a fresh mark at resume_seq - 1; the
  // same one (a reconnect) keeps its mark. Returns the seq to ack.
  // Errors: PermissionDenied (counted as refused_streams{reason="peer"}) when not sharded or
  // the address is not a peer.
  absl::StatusOr<uint64_t> OnPeerHello(const v1::Hello& hello);
  // A peer's batch: matched through CrossRankAnalysis::OnForwarded unless a duplicate (seq at
  // or below the mark). A batch `check` refuses is dropped, acked and counted under its
  // verdict's reason. Returns the seq to ack.
  // Errors: FailedPrecondition when (peer, instance) sent no Hello.
  absl::StatusOr<uint64_t> OnPeerBatch(const std::string& peer, uint64_t instance,
                                       const v1::Batch& batch, BatchCheck check);
  // Matches forwarded records here (Forwarder's match_here: this aggregator owns their
  // communicators after a list change).
  void MatchForwarded(std::vector<v1::ForwardedAnalysis>&& records);

  // Who hears of joined and expired nodes, stored batches and notable instances (the event
  // history); null = nobody. Set before the first Hello: it is read without a lock.
  void SetObserver(std::shared_ptr<StateObserver> observer);

  // The recent microbursts (MicroburstRecord), by node then start time; node_filter empty = all
  // nodes. limit > 0: only the `limit` latest by start time over those nodes (the live page's
  // top-K), still oldest first.
  std::vector<MicroburstRecord> RecentMicrobursts(absl::string_view node_filter,
                                                  size_t limit = 0) const;

  size_t node_count() const;
  // Forgets every node that sent neither a Hello nor a batch for `expiry` before `now`: its
  // series leave /metrics, and its state leaves memory here, in the link analysis, the
  // cross-rank state and the GPU state; counted in fabricscope_aggregator_expired_nodes_total.
  // Jobs no batch named for Options::jobs.expiry leave the job table (whatever `expiry` is).
  // A node that reconnects starts afresh (its totals are the hardware counters', so they
  // continue). expiry <= 0: nothing expires. Returns the names of the nodes forgotten.
  std::vector<std::string> ExpireNodes(absl::Time now, absl::Duration expiry);
  // The jobs the agents named (exporters/state/job_table.h), by id.
  std::vector<JobView> Jobs() const;
  // The job of a communicator (JobTable::JobOf: id "" when none is known).
  v1::Job JobOfComm(uint64_t comm_hash) const;
  // The communicators of a job, empty when it is unknown.
  std::set<uint64_t> CommsOfJob(const std::string& job_id) const;
  // Every node's view (NodeView), sorted by node; node_filter empty = all nodes.
  std::vector<NodeView> Nodes(absl::string_view node_filter = "") const;
  // The clock of last_seen: Options::now, or absl::Now.
  absl::Time Now() const { return options_.now ? options_.now() : absl::Now(); }
  // A stream refused before its Hello was applied (fabricscope_aggregator_refused_streams_total),
  // reason one of kRefusedStreamReasons (exporters/ingest/telemetry_service.h says when each
  // applies).
  static constexpr const char* kRefusedStreamReasons[] = {
      "identity", "token", "duplicate", "invalid_hello", "node_limit", "peer"};
  // Batches dropped whole (fabricscope_aggregator_rejected_batches_total{reason}): before_hello
  // (no Hello of that instance on the stream), seq_jump (past kMaxSeqStep), port_index (a port
  // the Hello did not announce), series (a utilization series outside the agent's bounds),
  // histogram (one the text format cannot carry), communicator_limit and rank_pair_limit (a GPU
  // window past limits: max_communicators_per_node, max_rank_pairs_per_node; CheckGpuWindow:
  // only the GPU window is dropped, the rest of the batch stored), forwarded (an agent's batch
  // carrying Batch.forwarded, or a peer's carrying anything else), time (an offset, time or
  // duration whose sums could overflow: exporters/ingest/message_checks.h CheckAgentBatch).
  static constexpr const char* kRejectedBatchReasons[] = {
      "before_hello",       "seq_jump",        "port_index", "series", "histogram",
      "communicator_limit", "rank_pair_limit", "forwarded",  "time"};
  void CountRefusedStream(const std::string& reason) {
    absl::MutexLock lock(&mu_);
    ++refused_streams_[reason];
  }
  // A stream's next read delayed by its rate limit (exporters/ingest/telemetry_service.h
  // StreamRate; fabricscope_aggregator_throttled_batches_total).
  void CountThrottledBatch() { throttled_batches_total_.fetch_add(1, std::memory_order_relaxed); }
  // Takes and releases each of the state's locks in turn, never two at once (LockWatchdog).
  void ProbeLocks() const {
    { absl::MutexLock lock(&mu_); }
    { absl::MutexLock lock(&gpu_mu_); }
    links_.ProbeLock();
    cross_rank_.ProbeLock();
  }

  // Link and traffic analysis fed with every Hello and stored batch
  // (exporters/analysis/link_analysis.h).
  const LinkAnalysis& links() const { return links_; }
  // The on-demand fetch of agents' flight-recorder samples (its own lock; the timeline reads
  // through a const state, hence mutable). Answers arrive with each node's regular batches.
  RecordingFetch& recording_fetch() const { return fetch_; }
  // Cross-rank matching of the collective analyses (exporters/analysis/cross_rank.h).
  const CrossRankAnalysis& cross_rank() const { return cross_rank_; }
  // The fabric model now, each communicator's job from the job table (/heatmap/leaves,
  // /api/fabric; Snapshot() has it too).
  FabricSnapshot Fabric() const;
  // A topology file read again (SIGHUP); null = LLDP alone.
  void SetTopology(std::shared_ptr<const FabricTopology> topology);
  // CrossRankAnalysis::Diagnoses of the communicators this aggregator owns (sharded: another
  // peer's, kept from before a peer-list change, left out).
  std::vector<CommDiagnosis> OwnedDiagnoses() const;

  // GPU timelines (exporters/state/gpu_state.h): recent collectives and kernel spans, the newest
  // `limit` per node (0 = all kept); node_filter empty = all nodes.
  std::vector<CollectiveRecord> RecentCollectives(absl::string_view node_filter,
                                                  size_t limit) const;
  std::vector<KernelRecord> RecentKernels(absl::string_view node_filter, size_t limit) const;
  // The processes of a job per node (GpuState::PidsOfJob).
  std::map<std::string, std::set<int32_t>> PidsOfJob(absl::string_view job) const;
  // The RDMA ports of each process of `node` (GpuState::ProcessPorts).
  std::map<int32_t, std::vector<std::string>> ProcessPorts(absl::string_view node) const;
  // How many rank pairs fabricscope_rank_pair_bytes_total exports (top by bytes).
  void SetRankPairTopK(size_t k);

  // The captured loss events (LossEventRecord), by node, newest last (the last
  // recent_bursts_per_node per node); node_filter empty = all nodes.
  std::vector<LossEventRecord> RecentLossEvents(absl::string_view node_filter) const;

  // How long the last Snapshot() held the state lock or the GPU lock, whichever longer (from
  // acquiring it), ns: what a scrape costs ingest (fabricscope_bench_aggregator's
  // scrape_blocks_ingest_ms).
  int64_t last_collect_lock_ns() const {
    return last_collect_lock_ns_.load(std::memory_order_relaxed);
  }

 private:
  // OnHello under mu_ (the caller holds the stripe); *joined: a new node or instance.
  absl::StatusOr<uint64_t> StoreHello(const v1::Hello& hello, bool* joined);
  // A new node past options_.max_nodes, counted as node_limit. Errors: ResourceExhausted.
  absl::Status CheckNodeLimitLocked(const std::string& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  struct Burst {
    uint32_t port_index;
    v1::Direction direction;
    int64_t start_unix_ns;
    int64_t duration_ns;
    double peak_utilization;
    uint64_t bytes;
  };
  struct NodeState {
    v1::Hello hello;
    uint64_t contiguous = 0;
    std::vector<PortView> ports;
    // The latest agent stats and capture window: immutable once stored, as PortView::last.
    std::shared_ptr<const v1::AgentStats> agent;
    int64_t last_batch_unix_ns = 0;
    absl::Time last_seen;  // this aggregator's clock at the node's last Hello or batch
    uint64_t batches = 0, duplicates = 0, lost = 0;  // of this instance, here
    int64_t last_window_end_ns = 0;  // agent monotonic time; 0 before the first batch
    std::shared_ptr<const v1::CaptureWindow> capture;  // the latest, without its loss events
    std::deque<v1::PacketLossEvent> loss_events;
    std::deque<Burst> bursts;
    // Fast-sampler ticks per second in the last window (its ports' most samples over its
    // span); -1 before a window with samples.
    double samples_per_second = -1;
  };
  // What a window batch stores, copied out of it before mu_ is taken (immutable once built).
  struct PreparedWindow {
    std::vector<std::shared_ptr<const v1::PortWindow>> ports;  // as batch.ports()
    std::shared_ptr<const v1::AgentStats> agent;
    std::shared_ptr<const v1::CaptureWindow> capture;  // without its loss events
  };
  static PreparedWindow PrepareWindow(const v1::Batch& batch);
  // A window batch's ports, microbursts, agent stats and capture into the node's state, and
  // its gap from the previous window counted.
  void StoreWindowLocked(NodeState& n, const v1::Batch& batch, PreparedWindow&& w)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The view of one node (NodeView), under mu_.
  static NodeView ViewLocked(const std::string& node, const NodeState& n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OnBatch past its sequence checks, under the node's ingest stripe: stores the batch, or
  // counts and acks it when `verdict` refused it. Returns the ack.
  absl::StatusOr<uint64_t> StoreBatch(const std::string& node, const v1::Batch& batch,
                                      const BatchVerdict& verdict);
  // The stripe that orders one node's Hellos, batches and expiry.
  static constexpr size_t kIngestStripes = 64;
  absl::Mutex& IngestLock(const std::string& node) const {
    return ingest_mu_[std::hash<std::string>{}(node) % kIngestStripes];
  }
  // The peer inbox's and the forwarder's counts (cluster_state_peers.cc).
  PeerCounters Peers() const;
  // Sharded: removes from s the diagnoses of communicators another peer owns (kept from before
  // a list change), so that a communicator's series come from its owner only.
  void DropUnownedComms(CrossRankSnapshot* s) const;
  // A batch's collective analyses: matched here, or those of communicators another peer owns
  // handed to the forwarder (cluster_state_peers.cc).
  void RankAnalyses(const std::string& node, const v1::Batch& batch);
  // Sets each record's `jobs` from the job table: its communicator's job and its sharers', at
  // most kMaxForwardedJobs communicators (cluster_state_peers.cc).
  void AttachJobs(std::vector<v1::ForwardedAnalysis>* records) const;
  // The cross-rank options with the fabric model's placement as their leaf source (the
  // fabric_oversubscribed rule); it is asked only after construction.
  CrossRankOptions WithFabric(CrossRankOptions o) {
    o.fabric = [this] { return fabric_.Placement(); };
    return o;
  }
  // communicator -> its job's id, from the job table's views.
  static std::map<uint64_t, std::string> JobsOfComms(const std::vector<JobView>& jobs);
  // A node's batches that will never arrive: counted for the node's instance and in all.
  void CountLost(NodeState& n, uint64_t batches) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    lost_batches_total_ += batches;
    n.lost += batches;
  }

  const Options options_;
  mutable std::atomic<int64_t> last_collect_lock_ns_{0};
  mutable std::array<absl::Mutex, kIngestStripes> ingest_mu_;
  mutable absl::Mutex mu_ ABSL_ACQUIRED_BEFORE(gpu_mu_);
  std::map<std::string, NodeState> nodes_ ABSL_GUARDED_BY(mu_);
  LinkAnalysis links_;  // thread-safe on its own (lock order: after mu_ and gpu_mu_)
  // Thread-safe on its own. Its lock is taken under a node's ingest stripe (answers) and, on an
  // HTTP thread, holds while its sender takes the stream registry's and a reactor's locks
  // (exporters/ingest/telemetry_service.h): stripe -> fetch -> registry -> reactor.
  mutable RecordingFetch fetch_;
  CrossRankAnalysis cross_rank_;  // thread-safe on its own; same lock order
  FabricModel fabric_;            // thread-safe on its own; same lock order
  mutable absl::Mutex gpu_mu_;
  GpuState gpu_ ABSL_GUARDED_BY(gpu_mu_);
  JobTable jobs_ ABSL_GUARDED_BY(gpu_mu_);
  uint64_t batches_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t duplicate_batches_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t lost_batches_total_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, uint64_t> rejected_batches_ ABSL_GUARDED_BY(mu_);  // by reason
  std::map<std::string, uint64_t> refused_streams_ ABSL_GUARDED_BY(mu_);   // by reason
  uint64_t window_gaps_total_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t expired_nodes_total_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> throttled_batches_total_{0};
  std::shared_ptr<StateObserver> observer_;  // SetObserver's
  // Sharding (cluster_state_peers.cc): the ring, the forwarder and each peer's stream mark.
  struct PeerInbox {
    uint64_t instance = 0;
    uint64_t contiguous = 0;
    uint64_t received = 0;  // records matched
  };
  mutable absl::Mutex shard_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::shared_ptr<const PeerRing> ring_ ABSL_GUARDED_BY(shard_mu_);
  std::shared_ptr<Forwarder> forwarder_ ABSL_GUARDED_BY(shard_mu_);
  std::map<std::string, PeerInbox> inbox_ ABSL_GUARDED_BY(shard_mu_);
};

}  // namespace fabricscope::exporters
