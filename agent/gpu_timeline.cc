#include "agent/gpu_timeline.h"

#include <algorithm>

#include "collectors/gpu/wire_decode.h"

namespace fabricscope::agent {

namespace gpu = collectors::gpu;

std::vector<double> CollectiveDurationBounds() {
  return {10e-6, 25e-6, 50e-6,  100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
          25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1.0,    2.5,  5.0,    10.0};
}

GpuTimeline::GpuTimeline(GpuTimelineOptions options)
    : options_(options), registry_(options.max_communicators) {}

namespace {

// The entry of `key` in `pending` (records waiting for their collective), made when new; past
// `max` keys the oldest is forgotten (erasing one already taken is a no-op).
template <typename Map>
typename Map::mapped_type& PendingEntry(Map& pending, std::deque<typename Map::key_type>& order,
                                        const typename Map::key_type& key, size_t max) {
  auto [it, inserted] = pending.try_emplace(key);
  if (inserted) {
    order.push_back(key);
    if (order.size() > max) {
      pending.erase(order.front());
      order.pop_front();
    }
  }
  return it->second;
}

// end - start in seconds, 0 unless end > start; exact for any two int64 times (the difference
// of two int64 values fits in uint64 when end > start).
double SpanSeconds(int64_t start_ns, int64_t end_ns) {
  if (end_ns <= start_ns) return 0.0;
  return static_cast<double>(static_cast<uint64_t>(end_ns) - static_cast<uint64_t>(start_ns)) / 1e9;
}

// Erases the entries of a map keyed by (comm, ...) whose comm is `comm`.
template <typename Map, typename Key>
void EraseComm(Map& map, const Key& first_of_comm, uint64_t comm) {
  auto it = map.lower_bound(first_of_comm);
  while (it != map.end() && std::get<0>(it->first) == comm) it = map.erase(it);
}

}  // namespace

bool GpuTimeline::Named(uint64_t comm) const {
  auto it = comms_.lower_bound({comm, INT32_MIN, INT32_MIN});
  return it != comms_.end() && std::get<0>(it->first) == comm;
}

void GpuTimeline::Track(uint64_t comm, int64_t seen_ns) {
  // The registry's clock never goes back and runs from the first datagram on: a communicator
  // met before the first window end is as old as its datagram, not as old as the boot (stamped
  // 0, it was forgotten at the first window end on any node up for over kIdleNs).
  clock_ns_ = std::max(clock_ns_, seen_ns);
  // Room for a new one: first the least recently active communicator that no connected process
  // names (its job ended: not counted), and only when every one is live the least recent one.
  if (registry_.full() && !registry_.Contains(comm)) {
    const std::optional<uint64_t> ended =
        registry_.LeastRecent([this](uint64_t c) { return !Named(c); });
    if (ended) {
      Forget(*ended);
      registry_.Erase(*ended);
    }
  }
  if (const std::optional<uint64_t> evicted = registry_.Touch(comm, clock_ns_)) {
    Forget(*evicted);
    ++comms_evicted_;
  }
}

void GpuTimeline::Forget(uint64_t comm) {
  EraseComm(totals_, std::make_pair(comm, std::string()), comm);
  EraseComm(rank_pairs_, std::make_tuple(comm, INT32_MIN, INT32_MIN), comm);
  EraseComm(comms_, std::make_tuple(comm, INT32_MIN, INT32_MIN), comm);
}

void GpuTimeline::ForgetEnded() {
  for (uint64_t comm : registry_.IdleSince(clock_ns_ - kIdleNs)) {
    if (Named(comm)) continue;  // still running
    Forget(comm);
    registry_.Erase(comm);
  }
}

v1::Collective GpuTimeline::ToProto(const GpuEvent& e) {
  const gpu::CollectiveRecord& r = e.collective;
  v1::Collective c;
  const std::string func_raw = gpu::FixedString(r.func);
  const CollectiveFunc func = ParseCollectiveFunc(func_raw);
  c.set_comm_hash(r.comm_hash);
  c.set_rank(r.rank);
  c.set_nranks(r.nranks);
  c.set_func(CollectiveFuncName(func));
  if (func == CollectiveFunc::kOther) c.set_func_raw(func_raw);
  c.set_seq(r.seq);
  c.set_bytes(r.bytes);
  c.set_count(r.count);
  c.set_datatype(gpu::FixedString(r.datatype));
  c.set_algo(gpu::FixedString(r.algo));
  c.set_proto(gpu::FixedString(r.proto));
  c.set_channels(r.nchannels);
  c.set_root(r.root);
  c.set_peer(r.peer);
  c.set_enqueue_start_ns(r.enqueue_start_ns);
  c.set_enqueue_end_ns(r.enqueue_end_ns);
  c.set_start_ns(r.start_ns);
  c.set_end_ns(r.end_ns);
  switch (static_cast<gpu::TimingSource>(r.timing_source)) {
    case gpu::TimingSource::kEnqueueOnly:
      c.set_timing_source(v1::TIMING_SOURCE_ENQUEUE_ONLY);
      break;
    case gpu::TimingSource::kKernelChannel:
      c.set_timing_source(v1::TIMING_SOURCE_KERNEL_CHANNEL);
      break;
    case gpu::TimingSource::kProxyOp:
      c.set_timing_source(v1::TIMING_SOURCE_PROXY_OP);
      break;
    case gpu::TimingSource::kCopyEngine:
      c.set_timing_source(v1::TIMING_SOURCE_COPY_ENGINE);
      break;
    default:
      c.set_timing_source(v1::TIMING_SOURCE_UNSPECIFIED);
  }
  // Zero or inverted times mean "unknown" (ABI §6.9, collectors/nccl/profiler_abi.h), and so does
  // an interval without a completion signal (the CPU enqueue of an enqueue_only or copy_engine
  // record, ABI §6.4: nanoseconds to microseconds of host work, not the collective): no duration,
  // no rates, nothing in the duration histogram or the busBw gauge.
  const bool completion = c.timing_source() == v1::TIMING_SOURCE_KERNEL_CHANNEL ||
                          c.timing_source() == v1::TIMING_SOURCE_PROXY_OP;
  const int64_t duration_ns =
      completion && r.start_ns > 0 && r.end_ns > r.start_ns ? r.end_ns - r.start_ns : int64_t{0};
  const Bandwidth bw = ComputeBandwidth(func, r.bytes, r.nranks, duration_ns);
  c.set_duration_seconds(static_cast<double>(duration_ns) / 1e9);
  c.set_algbw_bytes_per_second(bw.algbw_bytes_per_second);
  c.set_busbw_bytes_per_second(bw.busbw_bytes_per_second);
  c.set_pid(e.pid);
  c.set_uid(e.uid);
  c.set_gpu(e.gpu);
  c.set_p2p(r.kind == static_cast<uint8_t>(gpu::OpKind::kP2p));
  c.set_graph_captured(r.graph_captured != 0);
  c.set_proxy_bytes(r.proxy_bytes);
  c.set_proxy_ops(r.proxy_ops);
  return c;
}

v1::KernelSpan GpuTimeline::KernelToProto(const GpuEvent& e) {
  const gpu::KernelRecord& r = e.kernel;
  v1::KernelSpan k;
  k.set_device(r.device);
  k.set_stream(r.stream);
  k.set_context(r.context);
  k.set_start_ns(r.start_ns);
  k.set_end_ns(r.end_ns);
  k.set_name(gpu::FixedString(r.name));
  k.set_is_nccl(r.is_nccl != 0);
  k.set_graph_id(r.graph_id);
  k.set_correlation_id(r.correlation_id);
  k.set_pid(e.pid);
  k.set_memcpy(r.kind == static_cast<uint8_t>(gpu::ActivityKind::kMemcpy));
  k.set_bytes(r.bytes);
  return k;
}

void GpuTimeline::Add(const GpuEvent& e) {
  switch (e.type) {
    case gpu::RecordType::kComm: {
      const gpu::CommRecord& r = e.comm;
      const auto key = std::make_tuple(r.comm_hash, r.rank, e.pid);
      if (comms_.size() >= options_.max_communicators && comms_.count(key) == 0) return;
      Track(r.comm_hash, e.received_ns);
      v1::Communicator& c = comms_[key];
      c.set_comm_hash(r.comm_hash);
      c.set_rank(r.rank);
      c.set_nranks(r.nranks);
      c.set_nnodes(r.nnodes);
      c.set_gpu(r.cuda_device);
      c.set_pid(e.pid);
      c.set_name(gpu::FixedString(r.name));
      return;
    }
    case gpu::RecordType::kCollective:
      pending_collectives_.push_back(e);
      if (pending_collectives_.size() > options_.max_pending) {
        AttachCollective(pending_collectives_.front(), nullptr, false);
        pending_collectives_.pop_front();
        ++overflow_collectives_;
      }
      return;
    case gpu::RecordType::kProxyOp: {
      const gpu::ProxyOpRecord& r = e.proxy_op;
      if (r.is_send != 0 && r.bytes > 0) {
        Track(r.comm_hash, e.received_ns);
        const auto key = std::make_tuple(r.comm_hash, r.rank, r.peer);
        auto it = rank_pairs_.find(key);
        if (it != rank_pairs_.end()) {
          it->second += r.bytes;
        } else if (rank_pairs_.size() < options_.max_rank_pairs) {
          rank_pairs_.emplace(key, r.bytes);
        } else {
          rank_pairs_untracked_ += r.bytes;
        }
      }
      if (r.op_seq == UINT64_MAX) return;
      PeerBytes& p = PendingEntry(proxy_, proxy_order_,
                                  ProxyKey{r.comm_hash, r.rank, gpu::FixedString(r.func), r.op_seq},
                                  kMaxPendingProxyKeys)[r.peer];
      (r.is_send != 0 ? p.sent : p.received) += r.bytes;
      ++p.ops;
      return;
    }
    case gpu::RecordType::kChannels: {
      const gpu::ChannelSpansRecord& r = e.channels;
      std::vector<gpu::ChannelSpan>& spans = PendingEntry(
          channels_, channel_order_, ProxyKey{r.comm_hash, r.rank, gpu::FixedString(r.func), r.seq},
          kMaxPendingProxyKeys);
      for (int i = 0; i < r.count && spans.size() < kMaxChannelSpans; ++i) {
        spans.push_back(r.spans[i]);
      }
      return;
    }
    case gpu::RecordType::kKernel:
      pending_kernels_.push_back(e);
      if (pending_kernels_.size() > options_.max_pending) {
        CountKernel(pending_kernels_.front());
        pending_kernels_.pop_front();
      }
      return;
    case gpu::RecordType::kJob:  // kept by the ingest per connection, never queued
      return;
  }
}

bool GpuTimeline::Due(const GpuEvent& e, int64_t end_ns, int64_t window_start_ns,
                      int64_t window_end_ns) const {
  return end_ns <= window_end_ns || e.received_ns < window_start_ns;
}

void GpuTimeline::AttachCollective(const GpuEvent& e, std::vector<v1::Collective>* out, bool send) {
  v1::Collective c = ToProto(e);
  const auto key = std::make_pair(c.comm_hash(), c.func());
  Track(c.comm_hash(), e.received_ns);
  Totals& t = totals_[key];
  const CollectiveFunc func = ParseCollectiveFunc(c.func());
  const Bandwidth bw = ComputeBandwidth(func, c.bytes(), c.nranks(), 0);
  ++t.count;
  ++t.window_count;
  const int source = static_cast<int>(c.timing_source());
  if (source >= 0 && source < 5) ++t.by_timing_source[source];
  t.bytes += bw.algorithm_bytes;
  t.bus_bytes += bw.bus_bytes;
  if (c.duration_seconds() > 0) {
    t.durations.Observe(c.duration_seconds());
    t.window_bus_bytes += bw.bus_bytes;
    t.window_seconds += c.duration_seconds();
  }
  // The proxy peers of this collective, biggest first.
  auto it =
      proxy_.find(ProxyKey{c.comm_hash(), c.rank(), gpu::FixedString(e.collective.func), c.seq()});
  if (it != proxy_.end()) {
    std::vector<std::pair<int32_t, PeerBytes>> peers(it->second.begin(), it->second.end());
    std::sort(peers.begin(), peers.end(), [](const auto& a, const auto& b) {
      return a.second.sent + a.second.received > b.second.sent + b.second.received;
    });
    for (size_t i = 0; i < peers.size(); ++i) {
      if (i >= static_cast<size_t>(kMaxProxyPeers)) {
        c.set_proxy_peers_omitted(static_cast<uint32_t>(peers.size() - i));
        break;
      }
      v1::ProxyPeer* p = c.add_proxy_peers();
      p->set_peer(peers[i].first);
      p->set_bytes_sent(peers[i].second.sent);
      p->set_bytes_received(peers[i].second.received);
      p->set_ops(peers[i].second.ops);
    }
    proxy_.erase(it);  // its key stays in proxy_order_ until it ages out; erase is idempotent
  }
  if (auto ch = channels_.find(
          ProxyKey{c.comm_hash(), c.rank(), gpu::FixedString(e.collective.func), c.seq()});
      ch != channels_.end()) {
    std::vector<gpu::ChannelSpan>& spans = ch->second;
    if (!send || out == nullptr) {
      // not sent: its spans go with it
    } else if (window_channel_spans_ + spans.size() > kMaxChannelSpansPerWindow) {
      window_channel_spans_omitted_ += spans.size();
    } else {
      window_channel_spans_ += spans.size();
      std::sort(spans.begin(), spans.end(),
                [](const auto& a, const auto& b) { return a.channel < b.channel; });
      for (const gpu::ChannelSpan& span : spans) {
        v1::ChannelSpan* cs = c.add_channel_spans();
        cs->set_channel(span.channel);
        cs->set_start_ns(span.start_ns);
        cs->set_end_ns(span.end_ns);
      }
    }
    channels_.erase(ch);
  }
  if (send && out != nullptr) out->push_back(std::move(c));
}

void GpuTimeline::CountKernel(const GpuEvent& e) {
  const gpu::KernelRecord& r = e.kernel;
  DeviceTotals& d = devices_[r.device];
  const double seconds = SpanSeconds(r.start_ns, r.end_ns);
  if (r.kind == static_cast<uint8_t>(gpu::ActivityKind::kMemcpy)) {
    ++d.memcpys;
    d.memcpy_bytes += r.bytes;
    return;
  }
  ++d.kernels;
  d.kernel_seconds += seconds;
  if (r.is_nccl != 0) {
    ++d.nccl_kernels;
    d.nccl_kernel_seconds += seconds;
  }
}

size_t GpuTimeline::TakeCollectives(const std::function<bool(const GpuEvent&, int64_t)>& due,
                                    std::vector<v1::Collective>* out) {
  size_t taken = 0;
  std::deque<GpuEvent> keep;
  for (const GpuEvent& e : pending_collectives_) {
    const gpu::CollectiveRecord& r = e.collective;
    if (!due(e, r.end_ns > 0 ? r.end_ns : r.enqueue_end_ns)) {
      keep.push_back(e);
      continue;
    }
    const bool send = window_collectives_ < options_.max_collectives_per_batch;
    if (send) {
      ++window_collectives_;
    } else {
      ++overflow_collectives_;
    }
    AttachCollective(e, out, send);
    ++taken;
  }
  pending_collectives_.swap(keep);
  return taken;
}

size_t GpuTimeline::FillEarly(int64_t until_ns, std::vector<v1::Collective>* collectives) {
  return TakeCollectives([&](const GpuEvent&, int64_t end) { return end <= until_ns; },
                         collectives);
}

void GpuWindowParts::MoveInto(v1::Batch* batch) {
  *batch->mutable_gpu() = std::move(gpu);
  for (v1::KernelSpan& s : kernel_spans) *batch->add_kernel_spans() = std::move(s);
  gpu.Clear();
  kernel_spans.clear();
}

void GpuTimeline::FillBatch(int64_t window_start_ns, int64_t window_end_ns,
                            const v1::GpuIngestStats* ingest,
                            const std::vector<int32_t>& connected_pids, v1::Batch* batch,
                            std::vector<v1::Collective>* collectives) {
  GpuWindowParts parts;
  FillWindow(window_start_ns, window_end_ns, ingest, connected_pids, &parts, collectives);
  parts.MoveInto(batch);
}

void GpuTimeline::FillWindow(int64_t window_start_ns, int64_t window_end_ns,
                             const v1::GpuIngestStats* ingest,
                             const std::vector<int32_t>& connected_pids, GpuWindowParts* out,
                             std::vector<v1::Collective>* collectives) {
  v1::GpuWindow* w = &out->gpu;
  if (ingest != nullptr) *w->mutable_ingest() = *ingest;

  // Collectives, in arrival order; those an early batch could not take count as not sent.
  TakeCollectives(
      [&](const GpuEvent& e, int64_t end) { return Due(e, end, window_start_ns, window_end_ns); },
      collectives);
  const uint64_t not_sent = overflow_collectives_;
  overflow_collectives_ = 0;
  window_collectives_ = 0;
  w->set_collectives_not_sent(not_sent);
  w->set_channel_spans_omitted(window_channel_spans_omitted_);
  window_channel_spans_ = window_channel_spans_omitted_ = 0;

  // Kernel spans: NCCL kernels first, then the rest, up to the cap; the others summarized.
  std::vector<const GpuEvent*> due;
  std::deque<GpuEvent> keep;
  for (const GpuEvent& e : pending_kernels_) {
    if (Due(e, e.kernel.end_ns, window_start_ns, window_end_ns)) {
      due.push_back(&e);
    } else {
      keep.push_back(e);
    }
  }
  std::stable_partition(due.begin(), due.end(),
                        [](const GpuEvent* e) { return e->kernel.is_nccl != 0; });
  std::map<std::pair<uint32_t, std::string>, v1::KernelSummary> summaries;
  uint64_t summarized = 0;
  for (const GpuEvent* e : due) {
    CountKernel(*e);
    if (out->kernel_spans.size() < options_.max_kernel_spans_per_batch) {
      out->kernel_spans.push_back(KernelToProto(*e));
      continue;
    }
    ++summarized;
    std::string name = gpu::FixedString(e->kernel.name);
    if (summaries.size() >= kMaxSummaryNames &&
        summaries.count(std::make_pair(e->kernel.device, name)) == 0) {
      name = "(other)";
    }
    v1::KernelSummary& s = summaries[std::make_pair(e->kernel.device, name)];
    const double secs = SpanSeconds(e->kernel.start_ns, e->kernel.end_ns);
    s.set_device(e->kernel.device);
    s.set_name(name);
    s.set_count(s.count() + 1);
    s.set_seconds(s.seconds() + secs);
    s.set_max_seconds(std::max(s.max_seconds(), secs));
  }
  pending_kernels_.swap(keep);
  for (auto& [key, s] : summaries) *w->add_kernel_summaries() = std::move(s);
  w->set_kernel_spans_summarized(summarized);

  // Cumulative totals.
  for (auto& [key, t] : totals_) {
    v1::CollectiveTotals* ct = w->add_collective_totals();
    ct->set_comm_hash(key.first);
    ct->set_func(key.second);
    ct->set_count(t.count);
    t.durations.ToProto(ct->mutable_duration_seconds());
    ct->set_bytes_total(t.bytes);
    ct->set_bus_bytes_total(static_cast<uint64_t>(t.bus_bytes));
    ct->set_window_count(t.window_count);
    ct->set_window_seconds(t.window_seconds);
    ct->set_window_busbw_bytes_per_second(
        t.window_seconds > 0 ? t.window_bus_bytes / t.window_seconds : 0.0);
    for (uint64_t n : t.by_timing_source) ct->add_count_by_timing_source(n);
    t.window_count = 0;
    t.window_bus_bytes = 0;
    t.window_seconds = 0;
  }
  for (const auto& [device, d] : devices_) {
    v1::KernelTotals* kt = w->add_kernel_totals();
    kt->set_device(device);
    kt->set_kernels_total(d.kernels);
    kt->set_kernel_seconds_total(d.kernel_seconds);
    kt->set_nccl_kernels_total(d.nccl_kernels);
    kt->set_nccl_kernel_seconds_total(d.nccl_kernel_seconds);
    kt->set_memcpys_total(d.memcpys);
    kt->set_memcpy_bytes_total(d.memcpy_bytes);
  }
  for (const auto& [key, bytes] : rank_pairs_) {
    v1::RankPairBytes* rp = w->add_rank_pairs();
    rp->set_comm_hash(std::get<0>(key));
    rp->set_src_rank(std::get<1>(key));
    rp->set_dst_rank(std::get<2>(key));
    rp->set_bytes_total(bytes);
  }
  w->set_rank_pairs_untracked_bytes_total(rank_pairs_untracked_);
  // Communicators of processes that are still connected, and, for one more window, of those
  // that left since the last: a job of a few seconds may end inside one window, and the
  // aggregator learns which job a communicator belongs to from this list (Communicator.job_id).
  std::set<std::tuple<uint64_t, int32_t, int32_t>> departed;
  for (auto it = comms_.begin(); it != comms_.end();) {
    const bool connected = std::find(connected_pids.begin(), connected_pids.end(),
                                     std::get<2>(it->first)) != connected_pids.end();
    if (!connected && departed_.contains(it->first)) {
      it = comms_.erase(it);
      continue;
    }
    if (!connected) departed.insert(it->first);
    *w->add_communicators() = it->second;
    ++it;
  }
  departed_ = std::move(departed);
  clock_ns_ = std::max(clock_ns_, window_end_ns);
  ForgetEnded();
  w->set_communicators_evicted_total(comms_evicted_);
}

}  // namespace fabricscope::agent
