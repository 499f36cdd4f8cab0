// The NCCL profiler plugin's flush thread (collectors/nccl/plugin.h): closes finished
// collectives, turns them into records, batches records into datagrams and sends them to the
// agent; re-reads the mask file and rotates the GPU clock offset window. "ABI §N" names the
// topics listed in collectors/nccl/profiler_abi.h.

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "collectors/nccl/plugin.h"

namespace fabricscope::collectors::nccl::internal {

using gpu::CollectiveRecord;
using gpu::CommRecord;
using gpu::CopyFixed;
using gpu::MonotonicNowNs;
using gpu::ProxyOpRecord;

void Plugin::FlushLoop() {
  GrowPools();
  int64_t next_mask_check = 0;
  int64_t next_rotation = MonotonicNowNs() + options_.offset_window_ns;
  int64_t next_expiry = MonotonicNowNs() + 1'000'000'000;
  for (;;) {
    bool stopping;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, std::chrono::nanoseconds(options_.flush_period_ns),
                   [this] { return stop_ || finalized_contexts_.load(std::memory_order_acquire); });
      stopping = stop_;
    }
    const int64_t now = MonotonicNowNs();
    if (chain_ != nullptr) {
      SetExtraMask(chain_->mask());
      chain_->Reclaim(now, options_.linger_ns);
    }
    if (now >= next_mask_check) {
      CheckMaskFile();
      next_mask_check = now + options_.mask_check_period_ns;
    }
    if (now >= next_rotation) {
      RotateOffsets();
      next_rotation = now + options_.offset_window_ns;
    }
    if (now >= next_expiry) {
      ExpireProxyOps(now);
      next_expiry = now + 1'000'000'000;
    }
    FlushOnce(now, stopping);
    if (stopping) return;
  }
}

void Plugin::FlushOnce(int64_t now, bool final_pass) {
  if (final_pass) final_deadline_ns_ = now + kFinalDrainNs;
  const bool finalized = finalized_contexts_.exchange(false, std::memory_order_acq_rel);
  SendComms();
  OpRef ref;
  while (stopped_.TryPop(&ref)) pending_[pending_count_++] = ref;
  if (finalized || final_pass) ForceCloseOrphans(final_pass);
  uint32_t kept = 0;
  for (uint32_t i = 0; i < pending_count_; ++i) {
    const OpRef r = pending_[i];
    // A full socket: what is not closed yet waits (in the pools) for the next cycle.
    if (!Room(final_pass) || !TryClose(r, now, final_pass)) pending_[kept++] = r;
  }
  pending_count_ = kept;
  ProxyOpRecord pr;
  while (Room(final_pass) && proxy_records_.TryPop(&pr)) Emit(pr);
  SendDatagram(final_pass);
}

bool Plugin::ContextAlive(uint32_t index, uint32_t gen) const {
  const ContextSlot& c = contexts_[index];
  return c.live.load(std::memory_order_acquire) && c.gen.load(std::memory_order_acquire) == gen;
}

// Whether a stopped op (state word `w`) may be closed now. NCCL's order (ABI §6.2): the Coll
// stops right after its proxy ops are posted; the proxy thread starts each ProxyOp when it
// appends the op (src/proxy.cc ncclProxyOpToArgs) and each KernelCh when it sees the GPU's
// workStarted counter (src/transport/profiler.cc profilerProxyProgress), on a later progress pass
// than the ProxyOps of that channel; a send ProxyOp may stop after the kernel ended. So:
// - complete (close now): every expected KernelCh (one per channel) stopped and no child holds it;
// - children still open after the kernel ended: wait for them, at most open_child_wait_ns
//   without a step (a send ProxyOp may still move its last steps over a slow or lossy link; only
//   NET ProxyOps are ever stopped, src/transport/net.cc; SHM/P2P/CollNet ones never are);
// - no KernelCh expected (mask without it, copy-engine ops): the linger of quiet without holds;
//   a copy-engine op (all its children nested on one thread) closes at once;
// - KernelCh expected, none yet: max_wait_ns (the kernel may queue behind compute), but only the
//   linger once a later Coll of the same communicator completed its kernel (per-channel order,
//   ContextSlot::kernels_done_enqueue_ns).
bool Plugin::Complete(OpSlot& s, uint64_t w, int64_t now) {
  const bool held = (w & kLiveMask) != 0;
  const uint64_t progress = s.child_progress.load(std::memory_order_relaxed);
  if (progress != s.seen_progress) {  // a step of a child since the last look
    s.seen_progress = progress;
    s.seen_at_ns = now;
  }
  const int64_t quiet =
      now - std::max(s.seen_at_ns, s.last_activity_ns.load(std::memory_order_relaxed));
  if (s.kind == kOpCe) return !held || quiet >= options_.max_wait_ns;
  const uint32_t kernels = s.kernel_ch_done.load(std::memory_order_acquire);
  if (s.expect_kernel_ch != 0 && kernels >= s.nchannels) {
    return !held || quiet >= options_.open_child_wait_ns;
  }
  if (held) return quiet >= options_.max_wait_ns;
  if (s.expect_kernel_ch == 0) return quiet >= options_.linger_ns;
  // Some or all KernelCh still due: each channel's profiler connection reports in its own
  // order, so a lagging channel may come much later than the others.
  bool superseded = false;
  if (s.kind == kOpColl) {
    const ContextSlot& ctx = contexts_[s.ctx_index];
    for (int n = std::min<int>(s.nchannels, ContextSlot::kMaxChannels);
         n <= ContextSlot::kMaxChannels && !superseded; ++n) {
      superseded =
          ctx.kernels_done_enqueue_ns[n].load(std::memory_order_relaxed) > s.enqueue_start_ns;
    }
  }
  return quiet >= (superseded ? options_.linger_ns : options_.max_wait_ns);
}

bool Plugin::TryClose(const OpRef& r, int64_t now, bool force) {
  OpSlot& s = ops_[r.index];
  uint64_t w = s.word.load(std::memory_order_acquire);
  if (WordGen(w) != r.gen || (w & kClosed) != 0) return true;  // cannot happen; forget it
  const bool ctx_alive = ContextAlive(s.ctx_index, s.ctx_gen);
  const bool forced = force || !ctx_alive;
  if (!forced && !Complete(s, w, now)) return false;
  // Close, taking a hold of our own while the record is built: children that start later are
  // not attached (their records still go out), and a slot still held by children (closed after
  // a wait) is freed by the last of them (Detach), never under them.
  while (!s.word.compare_exchange_weak(w, (w | kClosed) + 1, std::memory_order_acq_rel)) {
    if (WordGen(w) != r.gen) return true;
    if (!forced && !Complete(s, w, now)) return false;
  }
  EmitOp(s, ctx_alive);
  if (Detach(s.word, r.gen)) op_free_.Push(r.index);
  return true;
}

// After a finalize: ops and proxy ops of dead contexts that were never stopped (and, at the
// last finalize, everything) are closed so that every started record is emitted.
void Plugin::ForceCloseOrphans(bool all) {
  for (uint32_t i = 0; i < ops_.constructed(); ++i) {
    OpSlot& s = ops_[i];
    const uint64_t w = s.word.load(std::memory_order_acquire);
    if ((w & kLiveMask) == 0 || (w & (kStopped | kClosed)) != 0) continue;
    if (!all && ContextAlive(s.ctx_index, s.ctx_gen)) continue;
    if (MarkStopped(s.word, WordGen(w))) pending_[pending_count_++] = OpRef{i, WordGen(w)};
  }
  for (uint32_t i = 0; i < proxy_ops_.constructed(); ++i) {
    ProxyOpSlot& s = proxy_ops_[i];
    const uint64_t w = s.word.load(std::memory_order_acquire);
    if ((w & kLiveMask) == 0 || (w & (kStopped | kClosed)) != 0) continue;
    if (!all && (s.ctx_index == UINT32_MAX || ContextAlive(s.ctx_index, s.ctx_gen))) continue;
    // Stopped here, not by NCCL: no estimate of bytes it may never have moved (non-NET ops).
    StopProxyOpAt(Handle{kKindProxyOp, WordGen(w), i, false}, MonotonicNowNs());
  }
  if (!all) return;
  for (uint32_t i = 0; i < kernel_ch_.constructed(); ++i) {
    const uint64_t w = kernel_ch_[i].word.load(std::memory_order_acquire);
    if ((w & kLiveMask) != 0 && (w & kStopped) == 0) {
      StopKernelCh(Handle{kKindKernelCh, WordGen(w), i, false});
    }
  }
}

// ProxyOps NCCL never stops (SHM, P2P and CollNet proxies: only src/transport/net.cc stops one)
// would hold their slot forever: after max_wait_ns without a step they are stopped here (end:
// when this scan, once a second, first saw it or last saw a step), and counted.
void Plugin::ExpireProxyOps(int64_t now) {
  for (uint32_t i = 0; i < proxy_ops_.constructed(); ++i) {
    ProxyOpSlot& s = proxy_ops_[i];
    const uint64_t w = s.word.load(std::memory_order_acquire);
    if ((w & kLiveMask) == 0 || (w & (kStopped | kClosed)) != 0) continue;
    const int32_t steps = s.steps.load(std::memory_order_relaxed);
    if (s.seen_gen != WordGen(w) || s.seen_steps != steps) {  // new, or moved since last look
      s.seen_gen = WordGen(w);
      s.seen_steps = steps;
      s.seen_at_ns = now;
    }
    if (now - s.seen_at_ns < options_.max_wait_ns) continue;
    expired_proxy_ops_.fetch_add(1, std::memory_order_relaxed);
    // The chained plugin's handle dies with our slot: stop it there too (NCCL never will).
    void* theirs = s.chain_handle.load(std::memory_order_relaxed);
    if (chain_ != nullptr && theirs != nullptr) chain_->Stop(theirs);
    StopProxyOpAt(Handle{kKindProxyOp, WordGen(w), i, false}, s.seen_at_ns);
  }
}

void Plugin::EmitOp(OpSlot& s, bool ctx_alive) {
  CollectiveRecord r{};
  r.comm_hash = s.comm_hash;
  r.seq = s.seq;
  r.count = s.count;
  r.bytes = s.count * DatatypeSize(s.datatype);
  r.enqueue_start_ns = s.enqueue_start_ns;
  r.enqueue_end_ns = s.enqueue_end_ns.load(std::memory_order_relaxed);
  const uint64_t proxy_sum = s.proxy_sum.load(std::memory_order_relaxed);
  r.proxy_bytes = ProxySumBytes(proxy_sum);
  r.proxy_ops = ProxySumOps(proxy_sum);
  r.rank = s.rank;
  r.nranks = s.nranks;
  const bool rooted = s.func != nullptr &&
                      (std::strcmp(s.func, "Broadcast") == 0 || std::strcmp(s.func, "Reduce") == 0);
  r.root = rooted ? s.root : -1;
  r.peer = s.peer;
  r.kind = static_cast<uint8_t>(s.kind == kOpP2p ? gpu::OpKind::kP2p : gpu::OpKind::kCollective);
  r.nchannels = s.nchannels;
  r.graph_captured = s.graph;
  CopyFixed(r.func, s.func);
  CopyFixed(r.datatype, s.datatype);
  CopyFixed(r.algo, s.algo);
  CopyFixed(r.proto, s.proto);
  const int64_t gs = s.gpu_start_min.load(std::memory_order_relaxed);
  const int64_t ge = s.gpu_end_max.load(std::memory_order_relaxed);
  int64_t offset = s.offset_snapshot.load(std::memory_order_relaxed);
  if (ctx_alive) offset = std::min(offset, OffsetEstimate(contexts_[s.ctx_index]));
  const int64_t ps = s.proxy_start_min.load(std::memory_order_relaxed);
  const int64_t pe = s.proxy_end_max.load(std::memory_order_relaxed);
  gpu::TimingSource source;
  if (s.kind == kOpCe) {
    source = gpu::TimingSource::kCopyEngine;
    r.start_ns = r.enqueue_start_ns;
    r.end_ns = r.enqueue_end_ns;
  } else if (gs != kNone64 && ge > gs && offset != kNone64) {
    source = gpu::TimingSource::kKernelChannel;
    r.start_ns = gs + offset;
    r.end_ns = ge + offset;
  } else if (ps != kNone64 && pe > ps) {
    source = gpu::TimingSource::kProxyOp;
    r.start_ns = ps;
    r.end_ns = pe;
  } else if (const int64_t kd = s.kernel_done_ns.load(std::memory_order_relaxed);
             kd > r.enqueue_end_ns && r.enqueue_end_ns > 0 && r.proxy_ops > 0) {
    // Untimed ProxyOps (ProxyOpsTimed) and no usable GPU timer: from the Coll's stop, when NCCL
    // has posted its ProxyOps (ABI §6.2), to the proxy thread seeing its last channel done.
    // Without ProxyOps (intra-node) there is no network completion: enqueue_only below.
    source = gpu::TimingSource::kProxyOp;
    r.start_ns = r.enqueue_end_ns;
    r.end_ns = kd;
  } else {
    source = gpu::TimingSource::kEnqueueOnly;
    r.start_ns = r.enqueue_start_ns;
    r.end_ns = r.enqueue_end_ns;
  }
  r.timing_source = static_cast<uint8_t>(source);
  timing_counts_[static_cast<int>(source) & 3].fetch_add(1, std::memory_order_relaxed);
  EmitChannels(s, r, source == gpu::TimingSource::kKernelChannel ? offset : kNone64);
  Emit(r);
}

void Plugin::EmitChannels(OpSlot& s, const CollectiveRecord& r, int64_t offset) {
  uint32_t i = s.channel_list.exchange(kChannelListClosed, std::memory_order_acq_rel);
  gpu::ChannelSpansRecord c{};
  c.comm_hash = r.comm_hash;
  c.seq = r.seq;
  c.rank = r.rank;
  c.kind = r.kind;
  std::memcpy(c.func, r.func, sizeof(c.func));
  // One slot per channel is linked (NCCL runs up to 64, ContextSlot::kMaxChannels, which is what
  // Room() reserved records for); every one is freed, however many, and the walk is bounded by
  // the pool all the same.
  int sent = 0;
  for (uint32_t n = 0; i < kernel_ch_.constructed() && n < options_.pool_kernel_ch; ++n) {
    KernelChSlot& k = kernel_ch_[i];
    const uint32_t next = k.next_in_op;
    if (offset != kNone64 && sent < ContextSlot::kMaxChannels) {
      ++sent;
      gpu::ChannelSpan& span = c.spans[c.count++];
      span.start_ns = static_cast<int64_t>(k.gpu_start) + offset;
      span.end_ns = static_cast<int64_t>(k.gpu_end.load(std::memory_order_relaxed)) + offset;
      span.channel = k.channel;
      if (c.count == gpu::ChannelSpansRecord::kSpans) {
        Emit(c);
        c.count = 0;
      }
    }
    FreeSlot(k.word, kernel_ch_free_, i, WordGen(k.word.load(std::memory_order_relaxed)));
    channel_slots_held_.fetch_sub(1, std::memory_order_relaxed);
    i = next;
  }
  if (c.count > 0) Emit(c);
}

template <typename T>
void Plugin::Emit(const T& record) {
  // Room() was true: the writer has space for a record (CollectiveRecord is the largest).
  emitted_.fetch_add(1, std::memory_order_relaxed);
  if (!writer_.Append(record)) dropped_.fetch_add(1, std::memory_order_relaxed);
}

bool Plugin::Room(bool final_pass) {
  if (held_size_ > 0 && !RetryHeld(final_pass)) return false;
  static_assert(sizeof(CollectiveRecord) >= sizeof(ProxyOpRecord));
  // With channel spans, room for an op's every channel too (at most 64: 16 records).
  constexpr size_t kChannelRecords = ContextSlot::kMaxChannels / gpu::ChannelSpansRecord::kSpans;
  const size_t need =
      sizeof(gpu::RecordHeader) + sizeof(CollectiveRecord) +
      (options_.channel_spans
           ? kChannelRecords * (sizeof(gpu::RecordHeader) + sizeof(gpu::ChannelSpansRecord))
           : 0);
  if (writer_.size() + need <= gpu::kMaxDatagramBytes) {
    return true;
  }
  return SendDatagram(final_pass);
}

bool Plugin::Send(size_t size, bool final_pass) {
  for (;;) {
    if (channel_.Send(buffer_.get(), size)) return true;
    if (!final_pass || !channel_.connected() || MonotonicNowNs() >= final_deadline_ns_) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

bool Plugin::RetryHeld(bool final_pass) {
  const uint32_t n = writer_.record_count();
  if (Send(held_size_, final_pass)) {
    sent_.fetch_add(n, std::memory_order_relaxed);
    datagrams_.fetch_add(1, std::memory_order_relaxed);
  } else if (channel_.connected() && !final_pass && MonotonicNowNs() - held_since_ns_ < kHoldNs) {
    return false;  // still full: keep holding
  } else {
    dropped_.fetch_add(n, std::memory_order_relaxed);
  }
  held_size_ = 0;
  writer_.Reset();
  return true;
}

bool Plugin::SendDatagram(bool final_pass) {
  if (held_size_ > 0) return RetryHeld(final_pass);
  if (writer_.empty()) return true;
  const uint32_t n = writer_.record_count();
  const size_t size =
      writer_.Finish(++sequence_, dropped_.load(std::memory_order_relaxed), MonotonicNowNs());
  connects_.store(channel_.connects(), std::memory_order_relaxed);
  if (Send(size, final_pass)) {
    sent_.fetch_add(n, std::memory_order_relaxed);
    datagrams_.fetch_add(1, std::memory_order_relaxed);
  } else if (channel_.connected() && !final_pass) {
    held_size_ = size;  // the socket is full: retry on the next cycle
    held_since_ns_ = MonotonicNowNs();
    return false;
  } else {
    dropped_.fetch_add(n, std::memory_order_relaxed);
  }
  connects_.store(channel_.connects(), std::memory_order_relaxed);
  writer_.Reset();
  return true;
}

// CommRecords go first on every connection, in their own datagrams, and are not counted as
// drops (they describe state, not events): they are retried until a send succeeds.
void Plugin::SendComms() {
  if (!channel_.Connect()) return;
  if (channel_.connects() != comm_epoch_) {
    comm_epoch_ = channel_.connects();
    for (uint32_t i = 0; i < kMaxContexts; ++i) {
      if (contexts_[i].live.load(std::memory_order_acquire)) {
        contexts_[i].unsent.store(true, std::memory_order_relaxed);
      }
    }
  }
  gpu::DatagramWriter w(comm_buffer_, sizeof(comm_buffer_), gpu::Source::kNcclProfiler, pid_);
  uint32_t in_datagram[kCommsPerDatagram];
  auto send = [&] {
    if (w.empty()) return;
    const size_t size =
        w.Finish(++sequence_, dropped_.load(std::memory_order_relaxed), MonotonicNowNs());
    if (channel_.Send(comm_buffer_, size)) {
      for (uint32_t k = 0; k < w.record_count(); ++k) {
        contexts_[in_datagram[k]].unsent.store(false, std::memory_order_release);
      }
    }
    w.Reset();
  };
  for (uint32_t i = 0; i < kMaxContexts; ++i) {
    ContextSlot& c = contexts_[i];
    if (!c.unsent.load(std::memory_order_acquire)) continue;
    CommRecord r{};
    r.comm_hash = c.comm_hash;
    r.rank = c.rank;
    r.nranks = c.nranks;
    r.nnodes = c.nnodes;
    r.cuda_device = -1;
    std::memcpy(r.name, c.name, sizeof(r.name));
    if (w.record_count() == kCommsPerDatagram) send();
    in_datagram[w.record_count()] = i;
    w.Append(r);
  }
  send();
}

void Plugin::CheckMaskFile() {
  int desired = options_.event_mask;
  if (!options_.mask_file.empty()) {
    const int fd = ::open(options_.mask_file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      char buf[32];
      const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
      ::close(fd);
      if (n > 0) {
        buf[n] = '\0';
        desired = ParseMask(buf, desired);
      }
    }
  }
  desired_mask_.store(desired, std::memory_order_relaxed);
  const int want = desired_mask();  // with a chained plugin's mask or-ed in
  if (want == applied_mask_) return;
  applied_mask_ = want;
  int* mask = mask_ptr_.load(std::memory_order_acquire);
  if (mask != nullptr) std::atomic_ref<int>(*mask).store(want, std::memory_order_relaxed);
}

void Plugin::RotateOffsets() {
  for (uint32_t i = 0; i < kMaxContexts; ++i) {
    ContextSlot& c = contexts_[i];
    if (!c.live.load(std::memory_order_acquire)) continue;
    c.offset_previous.store(c.offset_current.exchange(kNone64, std::memory_order_relaxed),
                            std::memory_order_relaxed);
  }
}

}  // namespace fabricscope::collectors::nccl::internal
