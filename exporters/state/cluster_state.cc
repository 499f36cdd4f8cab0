#include "exporters/state/cluster_state.h"

#include <google/protobuf/arena.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <tuple>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace fabricscope::exporters {

namespace {
constexpr uint64_t kMaxSeqStep = uint64_t{1} << 32;
// Counter groups of one port with resets kept apart (the agent has 7: agent/pipeline.cc).
constexpr size_t kMaxResetKinds = 16;
}  // namespace

absl::Status ClusterState::CheckNodeLimitLocked(const std::string& node) {
  if (nodes_.size() < options_.max_nodes || nodes_.contains(node)) return absl::OkStatus();
  ++refused_streams_["node_limit"];
  return absl::ResourceExhaustedError(absl::StrCat("this aggregator holds ", nodes_.size(),
                                                   " nodes, its limit (limits: max_nodes)"));
}

absl::Status ClusterState::CheckCapacity(const v1::Hello& hello) {
  absl::MutexLock lock(&mu_);
  return CheckNodeLimitLocked(hello.node());
}

absl::StatusOr<uint64_t> ClusterState::OnHello(const v1::Hello& hello) {
  absl::MutexLock ingest(&IngestLock(hello.node()));
  bool joined = false;
  absl::StatusOr<uint64_t> acked = StoreHello(hello, &joined);
  // Told once stored, outside mu_ (still under the stripe: before any batch of the instance).
  if (acked.ok() && joined && observer_) observer_->OnNodeJoined(hello);
  return acked;
}

absl::StatusOr<uint64_t> ClusterState::StoreHello(const v1::Hello& hello, bool* joined) {
  absl::MutexLock lock(&mu_);
  // Checked again under the lock that stores the node: another new node may have got in since
  // a CheckCapacity.
  if (absl::Status s = CheckNodeLimitLocked(hello.node()); !s.ok()) return s;
  NodeState& n = nodes_[hello.node()];
  const bool same_instance =
      n.hello.instance_id() == hello.instance_id() && n.hello.node() == hello.node();
  *joined = !same_instance;
  if (!same_instance) {
    n = NodeState();
    absl::MutexLock gpu_lock(&gpu_mu_);
    gpu_.ResetNode(hello.node());
    n.ports.resize(static_cast<size_t>(hello.ports_size()));
  } else if (n.ports.size() != static_cast<size_t>(hello.ports_size())) {
    // The same instance with another port inventory (a reload, or a forged Hello): the port
    // states start over, as LinkAnalysis::OnHello does; writing past the old size crashed.
    n.ports.assign(static_cast<size_t>(hello.ports_size()), PortView());
  }
  n.hello = hello;
  n.last_seen = Now();
  links_.OnHello(hello);
  cross_rank_.OnHello(hello);
  fabric_.OnHello(hello);
  for (int i = 0; i < hello.ports_size(); ++i)
    n.ports[static_cast<size_t>(i)].info = std::make_shared<const v1::PortInfo>(hello.ports(i));
  // Below resume_seq the agent holds nothing: those batches were acked by an earlier
  // aggregator (or this one), or dropped unacked (the agent's full queue, or refused by an
  // aggregator as invalid or too large; the agent counts them in
  // fabricscope_agent_uplink_{dropped,refused}_batches_total). Nothing to wait for; those above
  // both what this aggregator stored and what any aggregator acked (Hello.acked_seq) are lost.
  if (hello.resume_seq() > n.contiguous + 1) {
    const uint64_t kept = std::max(n.contiguous, hello.acked_seq());
    if (hello.resume_seq() - 1 > kept && hello.resume_seq() - 1 - kept <= kMaxSeqStep) {
      CountLost(n, hello.resume_seq() - 1 - kept);
    }
    n.contiguous = hello.resume_seq() - 1;
  }
  return n.contiguous;
}

void ClusterState::SetObserver(std::shared_ptr<StateObserver> observer) {
  observer_ = std::move(observer);
  if (!observer_) {
    cross_rank_.SetInstanceObserver(nullptr);
    return;
  }
  StateObserver* o = observer_.get();
  cross_rank_.SetInstanceObserver([o](const CollectiveInstance& i) { o->OnInstance(i); });
}

std::vector<std::string> ClusterState::ExpireNodes(absl::Time now, absl::Duration expiry) {
  std::vector<std::string> gone;
  {
    absl::MutexLock lock(&gpu_mu_);
    jobs_.Expire(now);
  }
  if (expiry <= absl::ZeroDuration()) return gone;
  std::vector<std::string> candidates;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [node, n] : nodes_) {
      if (now - n.last_seen > expiry) candidates.push_back(node);
    }
  }
  // Each under its stripe, so that no batch of the node is half stored; checked again there (a
  // Hello or batch may have come in since).
  for (const std::string& node : candidates) {
    absl::MutexLock ingest(&IngestLock(node));
    {
      absl::MutexLock lock(&mu_);
      auto it = nodes_.find(node);
      if (it == nodes_.end() || now - it->second.last_seen <= expiry) continue;
      nodes_.erase(it);
      ++expired_nodes_total_;
    }
    {
      absl::MutexLock lock(&gpu_mu_);
      gpu_.ResetNode(node);
    }
    links_.ForgetNode(node);
    cross_rank_.ForgetNode(node);
    fabric_.Forget(node);
    if (observer_) observer_->OnNodeExpired(node, now);
    gone.push_back(node);
  }
  return gone;
}

absl::StatusOr<uint64_t> ClusterState::OnBatch(const std::string& node, uint64_t instance_id,
                                               const v1::Batch& batch) {
  return OnBatch(node, instance_id, batch, [](const v1::Batch&, size_t) { return BatchVerdict{}; });
}

absl::StatusOr<uint64_t> ClusterState::OnBatch(const std::string& node, uint64_t instance_id,
                                               const v1::Batch& batch, BatchCheck check) {
  // The node's stripe orders its batches and Hellos; mu_ is held twice, briefly: to find the
  // instance and its mark, then to store. The checks and copies run between, without it.
  absl::MutexLock ingest(&IngestLock(node));
  size_t ports = 0;
  {
    absl::MutexLock lock(&mu_);
    auto it = nodes_.find(node);
    if (it == nodes_.end() || it->second.hello.instance_id() != instance_id) {
      ++rejected_batches_["before_hello"];
      return absl::FailedPreconditionError(absl::StrCat("batch from node \"", node, "\" instance ",
                                                        instance_id, " before its Hello"));
    }
    NodeState& n = it->second;
    n.last_seen = Now();
    if (batch.seq() <= n.contiguous) {
      ++duplicate_batches_total_;
      ++n.duplicates;
      return n.contiguous;
    }
    // Sequence numbers step by one per window (and early batch); a jump past kMaxSeqStep (136
    // years of 1 s windows) is no agent's: dropped and counted, the stream kept (the ack stays
    // where it was), so it neither counts 2^63 batches lost nor freezes the instance behind a
    // sequence number no real batch reaches.
    if (batch.seq() - n.contiguous > kMaxSeqStep) {
      ++rejected_batches_["seq_jump"];
      LOG_EVERY_N(WARNING, 100) << "node " << node << ": batch sequence number " << batch.seq()
                                << " jumps past " << n.contiguous << " by more than " << kMaxSeqStep
                                << "; dropped (counted in "
                                   "fabricscope_aggregator_rejected_batches_total)";
      return n.contiguous;
    }
    ports = n.ports.size();
  }
  const BatchVerdict verdict = check(batch, ports);
  // A GPU window past limits loses only itself: the node's ports, microbursts and collectives
  // in the same batch are stored.
  if (verdict.invalid.ok() && !verdict.gpu_invalid.ok()) {
    v1::Batch without_gpu = batch;
    without_gpu.clear_gpu();
    return StoreBatch(node, without_gpu, verdict);
  }
  return StoreBatch(node, batch, verdict);
}

absl::StatusOr<uint64_t> ClusterState::StoreBatch(const std::string& node, const v1::Batch& batch,
                                                  const BatchVerdict& verdict) {
  // A batch admission refused is dropped whole and counted, but acked: resending it would not
  // make it valid, and it must not block the batches behind it.
  const absl::Status& invalid = verdict.invalid;
  PreparedWindow prepared;
  if (invalid.ok() && !batch.early()) prepared = PrepareWindow(batch);
  uint64_t acked = 0;
  {
    absl::MutexLock lock(&mu_);
    // Still there: expiry and a new Hello of the node wait for its stripe.
    NodeState& n = nodes_.at(node);
    if (!invalid.ok()) {
      ++rejected_batches_[verdict.reason];
      if (batch.seq() == n.contiguous + 1) n.contiguous = batch.seq();
      LOG_EVERY_N(WARNING, 100) << "node " << node << ": " << invalid.message()
                                << "; batch dropped (counted in "
                                   "fabricscope_aggregator_rejected_batches_total)";
      return n.contiguous;
    }
    if (!verdict.gpu_invalid.ok()) {
      ++rejected_batches_[verdict.gpu_reason];
      LOG_EVERY_N(WARNING, 100) << "node " << node << ": " << verdict.gpu_invalid.message()
                                << "; its GPU window dropped, the rest stored (counted in "
                                   "fabricscope_aggregator_rejected_batches_total)";
    }
    if (batch.seq() > n.contiguous + 1) CountLost(n, batch.seq() - 1 - n.contiguous);
    n.contiguous = batch.seq();
    ++batches_total_;
    ++n.batches;
    // Collective records sent ahead of their window (Batch.early): no window to account.
    if (!batch.early()) StoreWindowLocked(n, batch, std::move(prepared));
    acked = n.contiguous;
  }
  if (!batch.early()) {
    fabric_.OnBatch(node, batch, absl::ToUnixNanos(Now()));
    std::vector<LinkRecording> requested;
    links_.OnBatch(node, batch, &requested);
    if (!requested.empty()) fetch_.Answer(node, std::move(requested));
  }
  {
    absl::MutexLock lock(&gpu_mu_);
    gpu_.OnBatch(node, batch);
    if (batch.has_gpu()) jobs_.OnWindow(node, batch.gpu(), Now());
  }
  // After the job table: records forwarded to their owner carry the jobs this batch named.
  RankAnalyses(node, batch);
  if (observer_) observer_->OnBatch(node, batch);
  return acked;
}

ClusterState::PreparedWindow ClusterState::PrepareWindow(const v1::Batch& batch) {
  // The copies share one protobuf arena: a window's parts are allocated in a few blocks and
  // freed together, without a walk of their fields, when the node's last view of them goes
  // (the next window replaces all of them). Each part holds the arena through an aliasing
  // shared_ptr.
  google::protobuf::ArenaOptions options;
  options.start_block_size = 4096;  // about 8 port windows
  options.max_block_size = 65536;
  const auto arena = std::make_shared<google::protobuf::Arena>(options);
  auto copy = [&arena](const auto& m) {
    using M = std::decay_t<decltype(m)>;
    M* c = google::protobuf::Arena::CreateMessage<M>(arena.get());
    c->CopyFrom(m);
    return std::shared_ptr<M>(arena, c);
  };
  PreparedWindow w;
  w.ports.reserve(static_cast<size_t>(batch.ports_size()));
  for (const v1::PortWindow& pw : batch.ports()) w.ports.push_back(copy(pw));
  if (batch.has_agent()) w.agent = copy(batch.agent());
  if (batch.has_capture()) {
    std::shared_ptr<v1::CaptureWindow> capture = copy(batch.capture());
    capture->clear_loss_events();
    w.capture = std::move(capture);
  }
  return w;
}

void ClusterState::StoreWindowLocked(NodeState& n, const v1::Batch& batch, PreparedWindow&& w) {
  for (int i = 0; i < batch.ports_size(); ++i) {
    const v1::PortWindow& pw = batch.ports(i);
    // Admission refused a port the Hello did not announce; a caller that vouched for its
    // batch (ClusterState::OnBatch without a check) still cannot write past the inventory.
    if (pw.port_index() >= n.ports.size()) continue;
    PortView& ps = n.ports[pw.port_index()];
    ps.last = std::move(w.ports[static_cast<size_t>(i)]);
    ps.unavailable_total += pw.unavailable_reads();
    // Groups are the agent's counter groups: a handful per port (kMaxResetKinds bounds a
    // hostile agent's).
    for (const auto& [group, count] : pw.counter_resets_by_group()) {
      if (ps.resets_total.size() < kMaxResetKinds || ps.resets_total.contains(group)) {
        ps.resets_total[group] += count;
      }
    }
    // A link that retrained while the agent ran: its rate from now on (0 = the Hello's stands).
    if (pw.line_rate_bytes_per_second() > 0) {
      if (ps.info->line_rate_bytes_per_second() != pw.line_rate_bytes_per_second()) {
        auto info = std::make_shared<v1::PortInfo>(*ps.info);
        info->set_line_rate_bytes_per_second(pw.line_rate_bytes_per_second());
        ps.info = std::move(info);
      }
    }
  }
  for (const v1::Microburst& m : batch.microbursts()) {
    if (m.port_index() >= n.ports.size()) continue;  // as the port windows above
    n.bursts.push_back(Burst{m.port_index(), m.direction(), m.start_ns() + batch.unix_offset_ns(),
                             m.duration_ns(), m.peak_utilization(), m.bytes()});
    while (n.bursts.size() > options_.recent_bursts_per_node) n.bursts.pop_front();
  }
  // Fast-sampler ticks per second of this window: the most samples any port took in it
  // (DirectionWindow.samples; the fast group's ports are read at every tick) over its span.
  // Not AgentStats.ticks_total: batches sent together carry the same one, read at send time.
  uint32_t samples = 0;
  for (const v1::PortWindow& pw : batch.ports()) {
    samples = std::max({samples, pw.transmit().samples(), pw.receive().samples()});
  }
  if (samples > 0 && batch.window_end_ns() > batch.window_start_ns()) {
    n.samples_per_second =
        static_cast<double>(samples) /
        (static_cast<double>(batch.window_end_ns() - batch.window_start_ns()) / 1e9);
  }
  if (w.agent) n.agent = std::move(w.agent);
  if (w.capture) {
    for (const v1::PacketLossEvent& e : batch.capture().loss_events()) {
      n.loss_events.push_back(e);
      while (n.loss_events.size() > options_.recent_bursts_per_node) n.loss_events.pop_front();
    }
    n.capture = std::move(w.capture);
  }
  n.last_batch_unix_ns = batch.window_end_ns() + batch.unix_offset_ns();
  // Consecutive windows of one agent share their boundary; anything else is time no batch
  // covers (a stalled sampler, or batches lost before they reached this aggregator).
  if (n.last_window_end_ns != 0 && batch.window_start_ns() > n.last_window_end_ns) {
    ++window_gaps_total_;
  }
  n.last_window_end_ns = std::max(n.last_window_end_ns, batch.window_end_ns());
}

size_t ClusterState::node_count() const {
  absl::MutexLock lock(&mu_);
  return nodes_.size();
}

std::vector<CollectiveRecord> ClusterState::RecentCollectives(absl::string_view node_filter,
                                                              size_t limit) const {
  absl::MutexLock lock(&gpu_mu_);
  return gpu_.RecentCollectives(node_filter, limit);
}

std::map<std::string, std::set<int32_t>> ClusterState::PidsOfJob(absl::string_view job) const {
  absl::MutexLock lock(&gpu_mu_);
  return gpu_.PidsOfJob(job);
}

std::map<int32_t, std::vector<std::string>> ClusterState::ProcessPorts(
    absl::string_view node) const {
  absl::MutexLock lock(&gpu_mu_);
  return gpu_.ProcessPorts(node);
}

std::vector<KernelRecord> ClusterState::RecentKernels(absl::string_view node_filter,
                                                      size_t limit) const {
  absl::MutexLock lock(&gpu_mu_);
  return gpu_.RecentKernels(node_filter, limit);
}

void ClusterState::SetRankPairTopK(size_t k) {
  absl::MutexLock lock(&gpu_mu_);
  gpu_.set_rank_pair_top_k(k);
}

std::vector<LossEventRecord> ClusterState::RecentLossEvents(absl::string_view node_filter) const {
  std::vector<LossEventRecord> out;
  absl::MutexLock lock(&mu_);
  for (const auto& [node, n] : nodes_) {
    if (!node_filter.empty() && node != node_filter) continue;
    for (const v1::PacketLossEvent& e : n.loss_events) out.push_back({node, e});
  }
  return out;
}

std::vector<MicroburstRecord> ClusterState::RecentMicrobursts(absl::string_view node_filter,
                                                              size_t limit) const {
  std::vector<MicroburstRecord> out;
  absl::MutexLock lock(&mu_);
  // (node, its state, the burst), by node then age; with a limit the latest `limit` of all.
  std::vector<std::tuple<const std::string*, const NodeState*, const Burst*>> picked;
  for (const auto& [node, n] : nodes_) {
    if (!node_filter.empty() && node != node_filter) continue;
    for (const Burst& b : n.bursts) picked.emplace_back(&node, &n, &b);
  }
  if (limit > 0 && picked.size() > limit) {
    auto later = [](const auto& a, const auto& b) {
      return std::get<2>(a)->start_unix_ns > std::get<2>(b)->start_unix_ns;
    };
    std::partial_sort(picked.begin(), picked.begin() + static_cast<long>(limit), picked.end(),
                      later);
    picked.resize(limit);
    std::reverse(picked.begin(), picked.end());
  }
  out.reserve(picked.size());
  for (const auto& [node, n, b] : picked) {
    const v1::PortInfo& pi = *n->ports[b->port_index].info;
    out.push_back({*node, pi.device(), pi.port(), b->direction, b->start_unix_ns, b->duration_ns,
                   b->peak_utilization, b->bytes});
  }
  return out;
}

NodeView ClusterState::ViewLocked(const std::string& node, const NodeState& n) {
  NodeView v;
  v.node = node;
  v.version = n.hello.agent_version();
  v.boot_id = n.hello.boot_id();
  v.instance_id = n.hello.instance_id();
  v.acked_seq = n.contiguous;
  v.batches = n.batches;
  v.duplicate_batches = n.duplicates;
  v.lost_batches = n.lost;
  v.last_batch_unix_ns = n.last_batch_unix_ns;
  v.last_seen = n.last_seen;
  v.samples_per_second = n.samples_per_second;
  v.agent = n.agent;
  v.capture = n.capture;
  v.ports = n.ports;
  return v;
}

std::vector<NodeView> ClusterState::Nodes(absl::string_view node_filter) const {
  std::vector<NodeView> out;
  absl::MutexLock lock(&mu_);
  out.reserve(node_filter.empty() ? nodes_.size() : 1);
  for (const auto& [node, n] : nodes_) {
    if (node_filter.empty() || node == node_filter) out.push_back(ViewLocked(node, n));
  }
  return out;
}

ClusterSnapshot ClusterState::Snapshot() const {
  ClusterSnapshot s;
  s.profile = options_.metrics;
  // Under the lock only what a scrape must not see change: the nodes' views (pointers to their
  // immutable windows and stats, the port infos and totals) and the aggregator's own counters;
  // then the GPU aggregates under the GPU lock. The port and agent series, the bulk of /metrics,
  // are built after both are released, so ingest waits O(nodes x ports) copies, not the render
  // (issue 17 item 2; fabricscope_bench_aggregator's scrape_blocks_ingest_ms).
  int64_t held_ns = 0;
  {
    absl::MutexLock lock(&mu_);
    const auto locked = std::chrono::steady_clock::now();
    s.nodes.reserve(nodes_.size());
    for (const auto& [node, n] : nodes_) s.nodes.push_back(ViewLocked(node, n));
    AggregatorCounters& c = s.counters;
    c.batches = batches_total_;
    c.duplicate_batches = duplicate_batches_total_;
    c.lost_batches = lost_batches_total_;
    c.expired_nodes = expired_nodes_total_;
    c.window_gaps = window_gaps_total_;
    c.nodes = nodes_.size();
    c.rejected_batches = rejected_batches_;
    c.refused_streams = refused_streams_;
    held_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                  std::chrono::steady_clock::now() - locked)
                  .count();
  }
  s.counters.throttled_batches = throttled_batches_total_.load(std::memory_order_relaxed);
  const RecordingFetch::Stats fs = fetch_.stats();
  s.counters.recording_fetches = {{"answered", fs.answered_total},
                                  {"timed_out", fs.timed_out_total},
                                  {"unreachable", fs.unreachable_total},
                                  {"busy", fs.busy_total}};
  s.counters.recording_answers_dropped = fs.late_total;
  {
    absl::MutexLock lock(&gpu_mu_);
    const auto locked = std::chrono::steady_clock::now();
    s.gpu = gpu_.Snapshot();
    s.gpu.jobs = jobs_.Jobs();
    s.gpu.jobs_evicted_total = jobs_.evicted_total();
    s.gpu.jobs_dropped_total = jobs_.dropped_total();
    s.gpu.job_comm_conflicts_total = jobs_.comm_conflicts_total();
    held_ns = std::max<int64_t>(held_ns, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             std::chrono::steady_clock::now() - locked)
                                             .count());
  }
  last_collect_lock_ns_.store(held_ns, std::memory_order_relaxed);
  s.links = links_.Snapshot();
  s.cross_rank = cross_rank_.Snapshot();
  DropUnownedComms(&s.cross_rank);
  s.peers = Peers();
  s.fabric = fabric_.Snapshot(absl::ToUnixNanos(Now()), JobsOfComms(s.gpu.jobs));
  return s;
}

std::map<uint64_t, std::string> ClusterState::JobsOfComms(const std::vector<JobView>& jobs) {
  std::map<uint64_t, std::string> out;
  for (const JobView& j : jobs) {
    for (uint64_t comm : j.comms) out.emplace(comm, j.job.id());
  }
  return out;
}

FabricSnapshot ClusterState::Fabric() const {
  return fabric_.Snapshot(absl::ToUnixNanos(Now()), JobsOfComms(Jobs()));
}

void ClusterState::SetTopology(std::shared_ptr<const FabricTopology> topology) {
  fabric_.SetTopology(std::move(topology));
}

std::vector<JobView> ClusterState::Jobs() const {
  absl::MutexLock lock(&gpu_mu_);
  return jobs_.Jobs();
}

v1::Job ClusterState::JobOfComm(uint64_t comm_hash) const {
  absl::MutexLock lock(&gpu_mu_);
  return jobs_.JobOf(comm_hash);
}

std::set<uint64_t> ClusterState::CommsOfJob(const std::string& job_id) const {
  absl::MutexLock lock(&gpu_mu_);
  return jobs_.CommsOf(job_id);
}

}  // namespace fabricscope::exporters
