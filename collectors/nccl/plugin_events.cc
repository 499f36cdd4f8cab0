// The NCCL profiler plugin's hot path (collectors/nccl/plugin.h): the events NCCL's user,
// launch and proxy threads start, record and stop; contexts are in plugin_contexts.cc. Every
// function here is lock-free and allocation-free; "ABI §N" names the topics listed in
// collectors/nccl/profiler_abi.h.

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "collectors/nccl/plugin.h"
#include "collectors/nccl/proxy_bytes.h"

namespace fabricscope::collectors::nccl::internal {

using gpu::CopyFixed;
using gpu::MonotonicNowNs;
using gpu::ProxyOpRecord;

uint32_t Plugin::NewOp(ContextSlot& ctx, uint32_t ctx_index, int64_t now) {
  const uint32_t index = op_free_.Pop();
  if (index == IndexFreeList::kNone) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return index;
  }
  OpSlot& s = ops_[index];
  s.ctx_index = ctx_index;
  s.ctx_gen = ctx.gen.load(std::memory_order_relaxed);
  s.comm_hash = ctx.comm_hash;
  s.rank = ctx.rank;
  s.nranks = ctx.nranks;
  s.enqueue_start_ns = now;
  s.enqueue_end_ns.store(0, std::memory_order_relaxed);
  s.last_activity_ns.store(now, std::memory_order_relaxed);
  s.gpu_start_min.store(kNone64, std::memory_order_relaxed);
  s.gpu_end_max.store(0, std::memory_order_relaxed);
  s.offset_snapshot.store(kNone64, std::memory_order_relaxed);
  s.proxy_start_min.store(kNone64, std::memory_order_relaxed);
  s.proxy_end_max.store(0, std::memory_order_relaxed);
  s.kernel_done_ns.store(0, std::memory_order_relaxed);
  s.proxy_sum.store(0, std::memory_order_relaxed);
  s.proxy_share.store(0, std::memory_order_relaxed);
  s.kernel_ch_done.store(0, std::memory_order_relaxed);
  s.channel_list.store(kChannelListEmpty, std::memory_order_relaxed);
  s.child_progress.store(0, std::memory_order_relaxed);
  s.seen_progress = 0;
  s.seen_at_ns = now;
  s.chain_handle.store(nullptr, std::memory_order_relaxed);
  return index;
}

uint32_t Plugin::BeginOp(void* context, const void* parent_obj, uint8_t kind, const char* func) {
  uint32_t ctx_index = 0;
  ContextSlot* ctx = LookupContext(context, &ctx_index);
  if (ctx == nullptr) return IndexFreeList::kNone;
  const uint32_t index = NewOp(*ctx, ctx_index, MonotonicNowNs());
  if (index == IndexFreeList::kNone) {
    // NCCL numbers no Send/Recv: we do, per context and direction, and a dropped one still
    // takes its number, so that the next ones keep matching their peers' (cross-rank joins).
    if (kind == kOpP2p) ctx->p2p_seq[P2pDirection(func)].fetch_add(1, std::memory_order_relaxed);
    return index;
  }
  OpSlot& s = ops_[index];
  s.kind = kind;
  const Handle parent = DecodeHandle(parent_obj);
  s.graph = parent.kind == kKindApi && parent.graph ? 1 : 0;
  return index;
}

void* Plugin::StartOp(void* context, const EventDescrV5& d, bool p2p) {
  const uint32_t index =
      BeginOp(context, d.parent_obj, p2p ? kOpP2p : kOpColl, p2p ? d.p2p.func : nullptr);
  if (index == IndexFreeList::kNone) return nullptr;
  OpSlot& s = ops_[index];
  const uint32_t gen = WordGen(s.word.load(std::memory_order_relaxed));
  if (p2p) {
    s.func = d.p2p.func;
    s.datatype = d.p2p.datatype;
    s.count = d.p2p.count;
    s.peer = d.p2p.peer;
    s.root = -1;
    s.nchannels = d.p2p.n_channels;
    s.algo = nullptr;
    s.proto = nullptr;
    s.seq = contexts_[s.ctx_index].p2p_seq[P2pDirection(s.func)].fetch_add(
        1, std::memory_order_relaxed);
  } else {
    s.func = d.coll.func;
    s.datatype = d.coll.datatype;
    s.count = d.coll.count;
    s.peer = -1;
    s.root = d.coll.root;
    s.nchannels = d.coll.n_channels;
    s.algo = d.coll.algo;
    s.proto = d.coll.proto;
    s.seq = d.coll.seq_number;
  }
  // NCCL creates one KernelCh per channel when the bit is set (src/enqueue.cc
  // addProfilerProxyOpIfNeeded, channelLo..channelHi).
  const int mask = CurrentMask();
  s.expect_kernel_ch = (mask & kEventKernelCh) != 0 && s.nchannels > 0 ? 1 : 0;
  s.proxy_timed = ProxyOpsTimed(mask) ? 1 : 0;
  s.word.store(GenWord(gen) | 1, std::memory_order_release);
  return MakeHandle(kKindOp, gen, index);
}

void Plugin::StopOp(const Handle& h) {
  if (h.index >= ops_.constructed()) return;
  OpSlot& s = ops_[h.index];
  const int64_t now = MonotonicNowNs();
  // The fields are written before the hold is released so that the flush thread sees them.
  if (!IsLive(s.word, h.gen)) return;
  s.enqueue_end_ns.store(now, std::memory_order_relaxed);
  s.last_activity_ns.store(now, std::memory_order_relaxed);
  if (!MarkStopped(s.word, h.gen)) return;  // repeated or stale stop
  // Never full: it holds at most one entry per op slot.
  stopped_.TryPush(OpRef{h.index, h.gen});
}

void* Plugin::StartProxyOp(void* context, const EventDescrV5& d) {
  uint32_t ctx_index = UINT32_MAX;
  ContextSlot* ctx = nullptr;
  const bool foreign = d.proxy_op.pid != pid_;  // PXN: context and parent are not ours
  if (!foreign) {
    ctx = LookupContext(context, &ctx_index);
    if (ctx == nullptr) return nullptr;
  }
  const uint32_t index = proxy_free_.Pop();
  if (index == IndexStack::kNone) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  ProxyOpSlot& s = proxy_ops_[index];
  const uint32_t gen = WordGen(s.word.load(std::memory_order_relaxed));
  ProxyOpRecord& r = s.record;
  r = ProxyOpRecord{};
  r.op_seq = UINT64_MAX;
  r.rank = foreign ? d.rank : ctx->rank;
  r.peer = d.proxy_op.peer;
  r.steps = 0;
  r.chunk_size = d.proxy_op.chunk_size;
  r.pid = d.proxy_op.pid;
  r.channel = d.proxy_op.channel_id;
  r.is_send = d.proxy_op.is_send != 0 ? 1 : 0;
  r.kind = static_cast<uint8_t>(gpu::OpKind::kCollective);
  s.has_parent = false;
  s.ctx_index = ctx_index;
  s.ctx_gen = foreign ? 0 : ctx->gen.load(std::memory_order_relaxed);
  if (!foreign) {
    r.comm_hash = ctx->comm_hash;
    const Handle parent = DecodeHandle(d.parent_obj);
    if (parent.kind == kKindOp && parent.index < ops_.constructed()) {
      OpSlot& op = ops_[parent.index];
      // Attaches whether or not the Coll has stopped (ABI §6.2: usually it has).
      if (Attach(op.word, parent.gen)) {
        s.has_parent = true;
        s.parent_index = parent.index;
        s.parent_gen = parent.gen;
        r.op_seq = op.seq;
        r.kind =
            static_cast<uint8_t>(op.kind == kOpP2p ? gpu::OpKind::kP2p : gpu::OpKind::kCollective);
        CopyFixed(r.func, op.func);
        s.timed = op.proxy_timed != 0;
      }
    }
  }
  // Timed as the mask its collective started under says (OpSlot::proxy_timed: its KernelCh
  // come by that mask too); without one (PXN, a closed collective) as the mask now says.
  if (!s.has_parent) s.timed = ProxyOpsTimed(CurrentMask());
  if (s.timed) {
    r.start_ns = MonotonicNowNs();
    if (s.has_parent) {
      ops_[s.parent_index].last_activity_ns.store(r.start_ns, std::memory_order_relaxed);
    }
  } else {
    r.flags = gpu::kProxyOpUntimed;
  }
  s.bytes.store(0, std::memory_order_relaxed);
  s.steps.store(0, std::memory_order_relaxed);
  s.announced_steps = d.proxy_op.n_steps;
  s.chain_handle.store(nullptr, std::memory_order_relaxed);
  s.word.store(GenWord(gen) | 1, std::memory_order_release);
  return MakeHandle(kKindProxyOp, gen, index);
}

void* Plugin::StartProxyStep(const EventDescrV5& d) {
  // Under PXN a step carries a foreign context, but its parent is the ProxyOp handle this
  // process's plugin returned (ABI §6.6): ours.
  const Handle parent = DecodeHandle(d.parent_obj);
  if (parent.kind != kKindProxyOp || parent.index >= proxy_ops_.constructed()) return nullptr;
  if (!IsLive(proxy_ops_[parent.index].word, parent.gen)) return nullptr;
  return MakeHandle(kKindProxyStep, parent.gen, parent.index);
}

void Plugin::RecordStep(const Handle& h, EventState state, const EventStateArgs* args) {
  if (args == nullptr || h.index >= proxy_ops_.constructed()) return;
  if (state != kStateProxyStepSendWait && state != kStateProxyStepRecvFlushWait) return;
  ProxyOpSlot& s = proxy_ops_[h.index];
  if (!IsLive(s.word, h.gen)) return;  // the step's ProxyOp stopped: update after stop
  s.bytes.fetch_add(args->proxy_step.trans_size, std::memory_order_relaxed);
  const int32_t steps = s.steps.fetch_add(1, std::memory_order_relaxed) + 1;
  // A transfer still moving keeps its collective open (Plugin::Complete).
  if (s.has_parent) {
    ops_[s.parent_index].child_progress.store(static_cast<uint64_t>(h.index) << 32 | steps,
                                              std::memory_order_relaxed);
  }
}

void Plugin::StopProxyOpAt(const Handle& h, int64_t end_ns) {
  if (h.index >= proxy_ops_.constructed()) return;
  ProxyOpSlot& s = proxy_ops_[h.index];
  if (!MarkStopped(s.word, h.gen)) return;
  ProxyOpRecord& r = s.record;
  if (s.timed) r.end_ns = end_ns != 0 ? end_ns : MonotonicNowNs();
  r.bytes = s.bytes.load(std::memory_order_relaxed);
  r.steps = s.steps.load(std::memory_order_relaxed);
  // No ProxyStep event counted (the default mask leaves them out): the bytes from the
  // descriptor and the collective (proxy_bytes.h), for ops NCCL itself stopped (only NET ones,
  // src/transport/net.cc; an expired op moved nothing on the network as far as we know).
  if (r.steps == 0 && end_ns == 0) EstimateBytes(s);
  if (s.has_parent) {
    OpSlot& op = ops_[s.parent_index];
    if (IsOpen(op.word, s.parent_gen)) {
      if (s.timed) {
        AtomicMin(op.proxy_start_min, r.start_ns);
        AtomicMax(op.proxy_end_max, r.end_ns);
        op.last_activity_ns.store(r.end_ns, std::memory_order_relaxed);
      }
      AddProxySum(op.proxy_sum, r.bytes);
    }
    if (Detach(op.word, s.parent_gen)) op_free_.Push(s.parent_index);
  }
  if (!proxy_records_.TryPush(r)) dropped_.fetch_add(1, std::memory_order_relaxed);
  FreeSlot(s.word, proxy_free_, h.index, h.gen);
}

void Plugin::EstimateBytes(ProxyOpSlot& s) {
  // Without its collective (PXN: another process's; or one that closed before the op started)
  // there is nothing to bound the descriptor's figure, which is up to 4x the bytes for ring
  // SIMPLE: the bytes stay unknown (0, unflagged), as without the estimate.
  if (!s.has_parent) return;
  ProxyOpRecord& r = s.record;
  OpSlot& op = ops_[s.parent_index];  // attached: its fields stay as its start wrote them
  uint64_t packed = op.proxy_share.load(std::memory_order_relaxed);
  if (packed == 0) {  // the collective's first: the rest of its ops reuse it
    ProxyOpParent parent;
    parent.func = op.func;
    parent.algo = op.algo;
    parent.proto = op.proto;
    const size_t type_size = DatatypeSize(op.datatype);
    parent.bytes = op.count * type_size;
    parent.bytes_known = type_size > 0;  // a newer NCCL's type: the descriptor's bound alone
    parent.nranks = op.nranks;
    parent.nchannels = op.nchannels;
    parent.p2p = op.kind == kOpP2p;
    packed = PackShare(ShareOf(parent));
    op.proxy_share.store(packed, std::memory_order_relaxed);
  }
  const ProxyOpShare share = UnpackShare(packed);
  r.bytes = EstimateWithShare(s.announced_steps, r.chunk_size, &share);
  r.steps = s.announced_steps;
  r.flags |= gpu::kProxyOpBytesEstimated;
}

void* Plugin::StartKernelCh(void* context, const EventDescrV5& d) {
  uint32_t ctx_index = 0;
  if (LookupContext(context, &ctx_index) == nullptr) return nullptr;
  const Handle parent = DecodeHandle(d.parent_obj);
  if (parent.kind != kKindOp || parent.index >= ops_.constructed()) return nullptr;
  const uint32_t index = kernel_ch_free_.Pop();
  if (index == IndexStack::kNone) return nullptr;  // a lost timer, not a lost record
  OpSlot& op = ops_[parent.index];
  // Attaches whether or not the Coll stopped and whether or not its ProxyOps are done (ABI §6.2).
  if (!Attach(op.word, parent.gen)) {
    kernel_ch_free_.Push(index);
    return nullptr;
  }
  KernelChSlot& s = kernel_ch_[index];
  const uint32_t gen = WordGen(s.word.load(std::memory_order_relaxed));
  s.has_parent = true;
  s.parent_index = parent.index;
  s.parent_gen = parent.gen;
  s.ctx_index = ctx_index;
  s.gpu_start = d.kernel_ch.p_timer;
  s.channel = d.kernel_ch.channel_id;
  s.gpu_end.store(0, std::memory_order_relaxed);
  s.chain_handle.store(nullptr, std::memory_order_relaxed);
  s.word.store(GenWord(gen) | 1, std::memory_order_release);
  return MakeHandle(kKindKernelCh, gen, index);
}

void Plugin::RecordKernelCh(const Handle& h, EventState state, const EventStateArgs* args) {
  if (args == nullptr || state != kStateKernelChStop || h.index >= kernel_ch_.constructed()) {
    return;
  }
  KernelChSlot& s = kernel_ch_[h.index];
  if (!IsLive(s.word, h.gen)) return;  // stale handle of a recycled NCCL slot (ABI §6.9)
  // Its CPU arrival time is taken at the stop NCCL sends right after (one clock read less).
  s.gpu_end.store(args->kernel_ch.p_timer, std::memory_order_relaxed);
}

void Plugin::StopKernelCh(const Handle& h) {
  if (h.index >= kernel_ch_.constructed()) return;
  KernelChSlot& s = kernel_ch_[h.index];
  if (!MarkStopped(s.word, h.gen)) return;
  const uint64_t gs = s.gpu_start;
  const uint64_t ge = s.gpu_end.load(std::memory_order_relaxed);
  // Copied: once linked to its op (channel spans), the slot may be freed and reused by the flush
  // thread at any moment; nothing of it is read after LinkChannel.
  const uint32_t parent_index = s.parent_index;
  const uint32_t parent_gen = s.parent_gen;
  OpSlot& op = ops_[parent_index];
  bool kept = false;  // linked to the op for its channel spans: the flush thread frees it
  if (IsOpen(op.word, parent_gen)) {
    ContextSlot& ctx = contexts_[s.ctx_index];
    // pTimer 0 or end <= start: this channel's timers are missing (ABI §6.9).
    const bool timed = gs != 0 && ge > gs && ge < static_cast<uint64_t>(INT64_MAX);
    if (timed) {
      AtomicMin(op.gpu_start_min, static_cast<int64_t>(gs));
      AtomicMax(op.gpu_end_max, static_cast<int64_t>(ge));
    }
    // One clock read per collective, at the stop that completes its channels, not one per
    // channel (NCCL runs up to 64: src/include/device.h MAXCHANNELS). A comm's KernelCh stops
    // come from its one proxy progress thread (src/proxy.cc progressOps), microseconds apart,
    // far inside the waits that last_activity_ns feeds (Plugin::Complete). A timed channel also
    // reads it while the communicator has no offset yet, since a collective may never see all
    // of its channels (ABI §6.9). The fields are written before kernel_ch_done counts this
    // channel: the flush thread may close the collective as soon as the count is full.
    const uint32_t before = op.kernel_ch_done.load(std::memory_order_relaxed);
    const bool last = before + 1 >= op.nchannels;
    if (last || (timed && OffsetEstimate(ctx) == kNone64)) {
      const int64_t now = MonotonicNowNs();
      // GPU->CPU offset: the least (CPU arrival - GPU end) seen; the proxy reports an end
      // after the GPU wrote it, so now - (the latest end of any timed channel of this
      // collective so far) is an upper bound (ABI §6.4), even when this channel is untimed.
      const int64_t latest_end = op.gpu_end_max.load(std::memory_order_relaxed);
      if (latest_end > 0) AtomicMin(ctx.offset_current, now - latest_end);
      if (last) op.kernel_done_ns.store(now, std::memory_order_relaxed);
      if (last && op.kind == kOpColl) {
        AtomicMax(
            ctx.kernels_done_enqueue_ns[std::min<int>(op.nchannels, ContextSlot::kMaxChannels)],
            op.enqueue_start_ns);
      }
      op.last_activity_ns.store(now, std::memory_order_relaxed);
    }
    // The estimate at hand goes with the collective: its communicator may be finalized before
    // the flush thread converts its GPU times (Plugin::EmitOp).
    if (timed || last) op.offset_snapshot.store(OffsetEstimate(ctx), std::memory_order_relaxed);
    // Linked before kernel_ch_done counts it: the flush thread closes the op only after that.
    if (timed && options_.channel_spans) kept = KeepForSpans(op, s, h.index);
    op.kernel_ch_done.fetch_add(1, std::memory_order_release);
  }
  if (Detach(op.word, parent_gen)) op_free_.Push(parent_index);
  if (!kept) FreeSlot(s.word, kernel_ch_free_, h.index, h.gen);
}

bool Plugin::KeepForSpans(OpSlot& op, KernelChSlot& s, uint32_t index) {
  // At most half the KernelCh pool waits for its op to close (a full socket can hold every op
  // for seconds): the other half stays for the kernels that time the next collectives.
  if (channel_slots_held_.fetch_add(1, std::memory_order_relaxed) >= options_.pool_kernel_ch / 2 ||
      !LinkChannel(op, s, index)) {
    channel_slots_held_.fetch_sub(1, std::memory_order_relaxed);
    channel_spans_dropped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  return true;
}

bool Plugin::LinkChannel(OpSlot& op, KernelChSlot& s, uint32_t index) {
  uint32_t head = op.channel_list.load(std::memory_order_acquire);
  do {
    if (head == kChannelListClosed) return false;  // the flush thread closed the op meanwhile
    s.next_in_op = head;
  } while (!op.channel_list.compare_exchange_weak(head, index, std::memory_order_acq_rel));
  return true;
}

void* Plugin::StartCeColl(void* context, const EventDescrV6& d) {
  const uint32_t index = BeginOp(context, d.parent_obj, kOpCe);
  if (index == IndexFreeList::kNone) return nullptr;
  OpSlot& s = ops_[index];
  const uint32_t gen = WordGen(s.word.load(std::memory_order_relaxed));
  s.func = d.ce_coll.func;
  s.datatype = d.ce_coll.datatype;
  s.count = d.ce_coll.count;
  s.root = d.ce_coll.root;
  s.peer = -1;
  s.nchannels = 0;
  s.algo = "CE";
  s.proto = d.ce_coll.sync_strategy;
  // ceSeqNum counts CE syncs (src/ce_coll.cc), the same on every rank of the communicator but
  // not in the Coll seqNumber space: bit 63 keeps the two from colliding.
  s.seq = d.ce_coll.seq_number | (1ull << 63);
  s.expect_kernel_ch = 0;
  s.word.store(GenWord(gen) | 1, std::memory_order_release);
  return MakeHandle(kKindOp, gen, index);
}

void* Plugin::StartCeChild(const EventDescrV6& d) {
  const Handle parent = DecodeHandle(d.parent_obj);
  if (parent.kind != kKindOp || parent.index >= ops_.constructed()) return nullptr;
  OpSlot& op = ops_[parent.index];
  if (!IsLive(op.word, parent.gen) || op.kind != kOpCe) return nullptr;
  op.last_activity_ns.store(MonotonicNowNs(), std::memory_order_relaxed);
  return MakeHandle(kKindCeChild, parent.gen, parent.index);
}

void Plugin::StopCeChild(const Handle& h) {
  // CeSync / CeBatch stop before their CeColl on the same thread (src/ce_coll.cc): no hold is
  // taken, so a stale or repeated stop only touches a timestamp of a live op.
  if (h.index >= ops_.constructed()) return;
  OpSlot& op = ops_[h.index];
  if (IsLive(op.word, h.gen))
    op.last_activity_ns.store(MonotonicNowNs(), std::memory_order_relaxed);
}

std::atomic<void*>* Plugin::ChainField(const Handle& h) {
  auto same_gen = [&](const std::atomic<uint64_t>& word) {
    return WordGen(word.load(std::memory_order_acquire)) == h.gen;
  };
  if (h.kind == kKindOp && h.index < ops_.constructed() && same_gen(ops_[h.index].word)) {
    return &ops_[h.index].chain_handle;
  }
  if (h.kind == kKindProxyOp && h.index < proxy_ops_.constructed() &&
      same_gen(proxy_ops_[h.index].word)) {
    return &proxy_ops_[h.index].chain_handle;
  }
  if (h.kind == kKindKernelCh && h.index < kernel_ch_.constructed() &&
      same_gen(kernel_ch_[h.index].word)) {
    return &kernel_ch_[h.index].chain_handle;
  }
  return nullptr;
}

PluginStats Plugin::Stats() const {
  PluginStats s;
  s.records_emitted = emitted_.load(std::memory_order_relaxed);
  s.records_sent = sent_.load(std::memory_order_relaxed);
  s.dropped = dropped_.load(std::memory_order_relaxed);
  s.datagrams_sent = datagrams_.load(std::memory_order_relaxed);
  s.connects = connects_.load(std::memory_order_relaxed);
  s.expired_proxy_ops = expired_proxy_ops_.load(std::memory_order_relaxed);
  s.channel_spans_dropped = channel_spans_dropped_.load(std::memory_order_relaxed);
  for (int i = 0; i < 4; ++i)
    s.closed_by_timing[i] = timing_counts_[i].load(std::memory_order_relaxed);
  s.pool_bytes = MemoryBytes();
  if (chain_ != nullptr) s.chain_dropped = chain_->dropped();
  return s;
}

}  // namespace fabricscope::collectors::nccl::internal
