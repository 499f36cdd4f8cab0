#include "collectors/nccl/profiler.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "collectors/gpu/producer.h"
#include "collectors/gpu/wire.h"
#include "collectors/nccl/lockfree.h"

namespace fabricscope::collectors::nccl {
namespace {

using gpu::CollectiveRecord;
using gpu::CommRecord;
using gpu::CopyFixed;
using gpu::MonotonicNowNs;
using gpu::ProxyOpRecord;

// ---- Handles ---------------------------------------------------------------------------------
// An event handle is not a pointer: it is the word
//   magic (8 bits) | kind (4) | graph flag (1) | generation (27) | slot index (24)
// so decoding a stale, repeated, foreign or poisoned handle reads no memory outside our pools.
constexpr uint64_t kHandleMagic = 0xFBull << 56;
constexpr int kKindShift = 52;
constexpr uint64_t kGraphBit = 1ull << 51;
constexpr int kGenShift = 24;
constexpr uint32_t kGenMask = (1u << 27) - 1;
constexpr uint32_t kIndexMask = (1u << 24) - 1;

enum HandleKind : uint32_t {
  kKindOp = 1,         // Coll / P2p, pooled
  kKindProxyOp = 2,    // pooled
  kKindKernelCh = 3,   // pooled
  kKindProxyStep = 4,  // token naming its ProxyOp slot and generation
  kKindApi = 5,        // CollApi / P2pApi token, carries graphCaptured
  kKindOther = 6,      // Group, GroupApi, KernelLaunch, ProxyCtrl, NetPlugin: token, no state
};

void* MakeHandle(uint32_t kind, uint32_t gen, uint32_t index, bool graph = false) {
  const uint64_t word = kHandleMagic | static_cast<uint64_t>(kind) << kKindShift |
                        (graph ? kGraphBit : 0) |
                        static_cast<uint64_t>(gen & kGenMask) << kGenShift | (index & kIndexMask);
  return reinterpret_cast<void*>(static_cast<uintptr_t>(word));
}

struct Handle {
  uint32_t kind = 0;  // 0 = not ours
  uint32_t gen = 0;
  uint32_t index = 0;
  bool graph = false;
};

Handle DecodeHandle(const void* handle) {
  const uint64_t word = reinterpret_cast<uintptr_t>(handle);
  Handle h;
  if ((word & (0xFFull << 56)) != kHandleMagic) return h;
  h.kind = static_cast<uint32_t>(word >> kKindShift) & 0xF;
  h.graph = (word & kGraphBit) != 0;
  h.gen = static_cast<uint32_t>(word >> kGenShift) & kGenMask;
  h.index = static_cast<uint32_t>(word) & kIndexMask;
  return h;
}

// A context is (magic 0xFC | pid low 16 bits | generation 24 | index 16): contexts from another
// process (PXN, ABI §6.6) do not decode as ours even when that process runs this plugin.
constexpr uint64_t kContextMagic = 0xFCull << 56;
constexpr uint32_t kMaxContexts = 1024;

// ---- Slot state words ------------------------------------------------------------------------
// Pooled slots carry one atomic word: generation (bits 32-58) | STOPPED (31) | CLOSED (30) |
// live holds (0-29). A free slot has no flags and no holds. An op starts with one hold (its own,
// released by stopEvent); each attached child (ProxyOp, KernelCh) adds one until it stops.
constexpr uint64_t kStopped = 1ull << 31;
constexpr uint64_t kClosed = 1ull << 30;
constexpr uint64_t kLiveMask = (1ull << 30) - 1;

uint32_t WordGen(uint64_t w) { return static_cast<uint32_t>(w >> 32) & kGenMask; }
uint64_t GenWord(uint32_t gen) { return static_cast<uint64_t>(gen & kGenMask) << 32; }

// Adds one hold if the slot still has generation `gen` and is not closed.
bool Attach(std::atomic<uint64_t>& word, uint32_t gen) {
  uint64_t w = word.load(std::memory_order_acquire);
  for (;;) {
    if (WordGen(w) != gen || (w & kClosed) != 0 || (w & kLiveMask) == 0) return false;
    if (word.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel)) return true;
  }
}

// Releases one hold if the slot still has generation `gen` (a force-closed slot ignores it).
void Detach(std::atomic<uint64_t>& word, uint32_t gen) {
  uint64_t w = word.load(std::memory_order_acquire);
  for (;;) {
    if (WordGen(w) != gen || (w & kLiveMask) == 0) return;
    if (word.compare_exchange_weak(w, w - 1, std::memory_order_acq_rel)) return;
  }
}

// Marks the slot stopped (and releases the owner's hold) once per generation.
bool MarkStopped(std::atomic<uint64_t>& word, uint32_t gen) {
  uint64_t w = word.load(std::memory_order_acquire);
  for (;;) {
    if (WordGen(w) != gen || (w & (kStopped | kClosed)) != 0 || (w & kLiveMask) == 0) return false;
    if (word.compare_exchange_weak(w, (w | kStopped) - 1, std::memory_order_acq_rel)) return true;
  }
}

bool IsLive(const std::atomic<uint64_t>& word, uint32_t gen) {
  const uint64_t w = word.load(std::memory_order_acquire);
  return WordGen(w) == gen && (w & (kStopped | kClosed)) == 0 && (w & kLiveMask) != 0;
}

void AtomicMin(std::atomic<int64_t>& a, int64_t v) {
  int64_t cur = a.load(std::memory_order_relaxed);
  while (v < cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}
void AtomicMax(std::atomic<int64_t>& a, int64_t v) {
  int64_t cur = a.load(std::memory_order_relaxed);
  while (v > cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

constexpr int64_t kNone64 = INT64_MAX;

// ---- Pools -----------------------------------------------------------------------------------
struct ContextSlot {
  std::atomic<uint32_t> gen{0};
  std::atomic<bool> live{false};
  uint64_t comm_hash = 0;
  int32_t rank = 0;
  int32_t nranks = 0;
  int32_t nnodes = 0;
  char name[48] = {};
  std::atomic<uint64_t> p2p_seq[2] = {};  // Send, Recv
  // GPU->CPU offset estimate: min of (CPU arrival - GPU timer) over this and the last window.
  std::atomic<int64_t> offset_current{kNone64};
  std::atomic<int64_t> offset_previous{kNone64};
  // Set by init (and for live contexts at every reconnect), cleared once its CommRecord was
  // sent; a finalized context's slot is not reused before that.
  std::atomic<bool> unsent{false};
};

struct alignas(64) OpSlot {
  std::atomic<uint64_t> word{0};
  uint32_t ctx_index = 0;
  uint32_t ctx_gen = 0;
  uint64_t comm_hash = 0;
  uint64_t seq = 0;
  uint64_t count = 0;
  const char* func = nullptr;  // static literals inside libnccl (ABI §4)
  const char* datatype = nullptr;
  const char* algo = nullptr;
  const char* proto = nullptr;
  int32_t rank = 0;
  int32_t nranks = 0;
  int32_t root = -1;
  int32_t peer = -1;
  uint8_t kind = 0;
  uint8_t nchannels = 0;
  uint8_t graph = 0;
  uint8_t expect_kernel_ch = 0;
  int64_t enqueue_start_ns = 0;
  std::atomic<int64_t> enqueue_end_ns{0};
  std::atomic<int64_t> last_activity_ns{0};
  std::atomic<int64_t> gpu_start_min{kNone64};
  std::atomic<int64_t> gpu_end_max{0};
  std::atomic<int64_t> offset_snapshot{kNone64};
  std::atomic<int64_t> proxy_start_min{kNone64};
  std::atomic<int64_t> proxy_end_max{0};
  std::atomic<uint64_t> proxy_bytes{0};
  std::atomic<uint32_t> proxy_ops{0};
  std::atomic<uint32_t> kernel_ch_done{0};
};

struct alignas(64) ProxyOpSlot {
  std::atomic<uint64_t> word{0};
  bool has_parent = false;
  uint32_t parent_index = 0;
  uint32_t parent_gen = 0;
  uint32_t ctx_index = UINT32_MAX;  // UINT32_MAX: foreign (PXN)
  uint32_t ctx_gen = 0;
  ProxyOpRecord record{};
  std::atomic<uint64_t> bytes{0};
  std::atomic<int32_t> steps{0};
};

struct alignas(64) KernelChSlot {
  std::atomic<uint64_t> word{0};
  bool has_parent = false;
  uint32_t parent_index = 0;
  uint32_t parent_gen = 0;
  uint32_t ctx_index = 0;
  uint64_t gpu_start = 0;
  int64_t cpu_start = 0;
  std::atomic<uint64_t> gpu_end{0};
  std::atomic<int64_t> cpu_end{0};
};

// Pending op reference kept by the flush thread.
struct OpRef {
  uint32_t index;
  uint32_t gen;
};

PluginOptions* g_options_for_testing = nullptr;

int ParseInt(const char* s, int fallback) {
  if (s == nullptr || *s == '\0') return fallback;
  char* end = nullptr;
  const long v = std::strtol(s, &end, 0);
  while (end != nullptr && (*end == ' ' || *end == '\n' || *end == '\t')) ++end;
  if (end == s || (end != nullptr && *end != '\0') || v < 0 || v > INT32_MAX) return fallback;
  return static_cast<int>(v);
}

// ---- The plugin --------------------------------------------------------------------------------
class Plugin {
 public:
  explicit Plugin(const PluginOptions& options)
      : options_(options),
        pid_(getpid()),
        contexts_(new ContextSlot[kMaxContexts]),
        ops_(new OpSlot[options.pool_ops]),
        op_free_(options.pool_ops),
        proxy_ops_(new ProxyOpSlot[options.pool_proxy_ops]),
        proxy_free_(options.pool_proxy_ops),
        kernel_ch_(new KernelChSlot[options.pool_kernel_ch]),
        kernel_ch_free_(options.pool_kernel_ch),
        stopped_(options.pool_ops),
        proxy_records_(options.pool_proxy_ops),
        pending_(new OpRef[options.pool_ops]),
        buffer_(new uint8_t[gpu::kMaxDatagramBytes]),
        writer_(buffer_.get(), gpu::kMaxDatagramBytes, gpu::Source::kNcclProfiler, pid_),
        channel_(gpu::Source::kNcclProfiler, options.socket_path),
        desired_mask_(options.event_mask) {}

  ~Plugin() { StopFlushThread(); }

  size_t MemoryBytes() const {
    return sizeof(*this) + kMaxContexts * sizeof(ContextSlot) +
           options_.pool_ops * (sizeof(OpSlot) + sizeof(OpRef)) + op_free_.memory_bytes() +
           options_.pool_proxy_ops * sizeof(ProxyOpSlot) + proxy_free_.memory_bytes() +
           options_.pool_kernel_ch * sizeof(KernelChSlot) + kernel_ch_free_.memory_bytes() +
           stopped_.memory_bytes() + proxy_records_.memory_bytes() + gpu::kMaxDatagramBytes;
  }

  void StartFlushThread() {
    flush_thread_ = std::thread([this] { FlushLoop(); });
  }
  void StopFlushThread() {
    if (!flush_thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    flush_thread_.join();
  }

  // Called under the lifecycle mutex.
  NcclResult AddContext(void** context, uint64_t comm_hash, int* mask, const char* name, int nnodes,
                        int nranks, int rank) {
    for (uint32_t i = 0; i < kMaxContexts; ++i) {
      ContextSlot& c = contexts_[i];
      if (c.live.load(std::memory_order_relaxed) || c.unsent.load(std::memory_order_acquire)) {
        continue;
      }
      c.comm_hash = comm_hash;
      c.rank = rank;
      c.nranks = nranks;
      c.nnodes = nnodes;
      CopyFixed(c.name, name);
      c.p2p_seq[0].store(0, std::memory_order_relaxed);
      c.p2p_seq[1].store(0, std::memory_order_relaxed);
      c.offset_current.store(kNone64, std::memory_order_relaxed);
      c.offset_previous.store(kNone64, std::memory_order_relaxed);
      const uint32_t gen = (c.gen.load(std::memory_order_relaxed) + 1) & 0xFFFFFF;
      c.gen.store(gen, std::memory_order_relaxed);
      c.live.store(true, std::memory_order_release);
      c.unsent.store(true, std::memory_order_release);
      *context = reinterpret_cast<void*>(
          static_cast<uintptr_t>(kContextMagic | static_cast<uint64_t>(pid_ & 0xFFFF) << 40 |
                                 static_cast<uint64_t>(gen) << 16 | i));
      mask_ptr_.store(mask, std::memory_order_release);
      std::atomic_ref<int>(*mask).store(desired_mask_.load(std::memory_order_relaxed),
                                        std::memory_order_relaxed);
      return kNcclSuccess;
    }
    return kNcclInternalError;  // more than kMaxContexts communicators
  }

  // Called under the lifecycle mutex; returns false when `context` is not a live context of ours.
  bool RemoveContext(void* context) {
    ContextSlot* c = LookupContext(context, nullptr);
    if (c == nullptr) return false;
    c->live.store(false, std::memory_order_release);
    c->gen.store((c->gen.load(std::memory_order_relaxed) + 1) & 0xFFFFFF,
                 std::memory_order_release);
    finalized_contexts_.store(true, std::memory_order_release);
    cv_.notify_all();
    return true;
  }

  ContextSlot* LookupContext(const void* context, uint32_t* index_out) {
    const uint64_t v = reinterpret_cast<uintptr_t>(context);
    if ((v & (0xFFull << 56)) != kContextMagic) return nullptr;
    if (((v >> 40) & 0xFFFF) != static_cast<uint64_t>(pid_ & 0xFFFF)) return nullptr;
    const uint32_t index = static_cast<uint32_t>(v & 0xFFFF);
    const uint32_t gen = static_cast<uint32_t>(v >> 16) & 0xFFFFFF;
    if (index >= kMaxContexts) return nullptr;
    ContextSlot& c = contexts_[index];
    if (!c.live.load(std::memory_order_acquire) || c.gen.load(std::memory_order_acquire) != gen) {
      return nullptr;
    }
    if (index_out != nullptr) *index_out = index;
    return &c;
  }

  // ---- Hot path ----
  void* StartOp(void* context, const EventDescrV5& d, bool p2p) {
    uint32_t ctx_index = 0;
    ContextSlot* ctx = LookupContext(context, &ctx_index);
    if (ctx == nullptr) return nullptr;
    const uint32_t index = op_free_.Pop();
    if (index == IndexFreeList::kNone) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    OpSlot& s = ops_[index];
    const uint32_t gen = WordGen(s.word.load(std::memory_order_relaxed));
    const int64_t now = MonotonicNowNs();
    s.ctx_index = ctx_index;
    s.ctx_gen = ctx->gen.load(std::memory_order_relaxed);
    s.comm_hash = ctx->comm_hash;
    s.rank = ctx->rank;
    s.nranks = ctx->nranks;
    s.kind = static_cast<uint8_t>(p2p ? gpu::OpKind::kP2p : gpu::OpKind::kCollective);
    const Handle parent = DecodeHandle(d.parent_obj);
    s.graph = parent.kind == kKindApi && parent.graph ? 1 : 0;
    if (p2p) {
      s.func = d.p2p.func;
      s.datatype = d.p2p.datatype;
      s.count = d.p2p.count;
      s.peer = d.p2p.peer;
      s.root = -1;
      s.nchannels = d.p2p.n_channels;
      s.algo = nullptr;
      s.proto = nullptr;
      const int which = (s.func != nullptr && s.func[0] == 'R') ? 1 : 0;
      s.seq = ctx->p2p_seq[which].fetch_add(1, std::memory_order_relaxed);
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
    int* mask = mask_ptr_.load(std::memory_order_relaxed);
    const int m = mask != nullptr ? std::atomic_ref<int>(*mask).load(std::memory_order_relaxed) : 0;
    s.expect_kernel_ch = (m & kEventKernelCh) != 0 ? 1 : 0;
    s.enqueue_start_ns = now;
    s.enqueue_end_ns.store(0, std::memory_order_relaxed);
    s.last_activity_ns.store(now, std::memory_order_relaxed);
    s.gpu_start_min.store(kNone64, std::memory_order_relaxed);
    s.gpu_end_max.store(0, std::memory_order_relaxed);
    s.offset_snapshot.store(kNone64, std::memory_order_relaxed);
    s.proxy_start_min.store(kNone64, std::memory_order_relaxed);
    s.proxy_end_max.store(0, std::memory_order_relaxed);
    s.proxy_bytes.store(0, std::memory_order_relaxed);
    s.proxy_ops.store(0, std::memory_order_relaxed);
    s.kernel_ch_done.store(0, std::memory_order_relaxed);
    s.word.store(GenWord(gen) | 1, std::memory_order_release);
    return MakeHandle(kKindOp, gen, index);
  }

  void StopOp(const Handle& h) {
    if (h.index >= options_.pool_ops) return;
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

  void* StartProxyOp(void* context, const EventDescrV5& d) {
    uint32_t ctx_index = UINT32_MAX;
    ContextSlot* ctx = nullptr;
    const bool foreign = d.proxy_op.pid != pid_;  // PXN: context and parent are not ours
    if (!foreign) {
      ctx = LookupContext(context, &ctx_index);
      if (ctx == nullptr) return nullptr;
    }
    const uint32_t index = proxy_free_.Pop();
    if (index == IndexFreeList::kNone) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    ProxyOpSlot& s = proxy_ops_[index];
    const uint32_t gen = WordGen(s.word.load(std::memory_order_relaxed));
    ProxyOpRecord& r = s.record;
    r = ProxyOpRecord{};
    r.op_seq = UINT64_MAX;
    r.start_ns = MonotonicNowNs();
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
      if (parent.kind == kKindOp && parent.index < options_.pool_ops) {
        OpSlot& op = ops_[parent.index];
        if (Attach(op.word, parent.gen)) {
          s.has_parent = true;
          s.parent_index = parent.index;
          s.parent_gen = parent.gen;
          r.op_seq = op.seq;
          r.kind = op.kind;
          CopyFixed(r.func, op.func);
        }
      }
    }
    s.bytes.store(0, std::memory_order_relaxed);
    s.steps.store(0, std::memory_order_relaxed);
    s.word.store(GenWord(gen) | 1, std::memory_order_release);
    return MakeHandle(kKindProxyOp, gen, index);
  }

  void* StartProxyStep(const EventDescrV5& d) {
    const Handle parent = DecodeHandle(d.parent_obj);
    if (parent.kind != kKindProxyOp || parent.index >= options_.pool_proxy_ops) return nullptr;
    if (!IsLive(proxy_ops_[parent.index].word, parent.gen)) return nullptr;
    return MakeHandle(kKindProxyStep, parent.gen, parent.index);
  }

  void RecordStep(const Handle& h, EventState state, const EventStateArgs* args) {
    if (args == nullptr || h.index >= options_.pool_proxy_ops) return;
    if (state != kStateProxyStepSendWait && state != kStateProxyStepRecvFlushWait) return;
    ProxyOpSlot& s = proxy_ops_[h.index];
    if (!IsLive(s.word, h.gen)) return;  // the step's ProxyOp stopped: update after stop
    s.bytes.fetch_add(args->proxy_step.trans_size, std::memory_order_relaxed);
    s.steps.fetch_add(1, std::memory_order_relaxed);
  }

  void StopProxyOp(const Handle& h) {
    if (h.index >= options_.pool_proxy_ops) return;
    ProxyOpSlot& s = proxy_ops_[h.index];
    if (!MarkStopped(s.word, h.gen)) return;
    ProxyOpRecord& r = s.record;
    r.end_ns = MonotonicNowNs();
    r.bytes = s.bytes.load(std::memory_order_relaxed);
    r.steps = s.steps.load(std::memory_order_relaxed);
    if (s.has_parent) {
      OpSlot& op = ops_[s.parent_index];
      if (WordGen(op.word.load(std::memory_order_acquire)) == s.parent_gen) {
        AtomicMin(op.proxy_start_min, r.start_ns);
        AtomicMax(op.proxy_end_max, r.end_ns);
        op.proxy_bytes.fetch_add(r.bytes, std::memory_order_relaxed);
        op.proxy_ops.fetch_add(1, std::memory_order_relaxed);
        op.last_activity_ns.store(r.end_ns, std::memory_order_relaxed);
      }
      Detach(op.word, s.parent_gen);
    }
    if (!proxy_records_.TryPush(r)) dropped_.fetch_add(1, std::memory_order_relaxed);
    FreeSlot(s.word, proxy_free_, h.index, h.gen);
  }

  void* StartKernelCh(void* context, const EventDescrV5& d) {
    uint32_t ctx_index = 0;
    if (LookupContext(context, &ctx_index) == nullptr) return nullptr;
    const Handle parent = DecodeHandle(d.parent_obj);
    if (parent.kind != kKindOp || parent.index >= options_.pool_ops) return nullptr;
    const uint32_t index = kernel_ch_free_.Pop();
    if (index == IndexFreeList::kNone) return nullptr;  // a lost timer, not a lost record
    OpSlot& op = ops_[parent.index];
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
    s.cpu_start = MonotonicNowNs();
    s.gpu_end.store(0, std::memory_order_relaxed);
    s.cpu_end.store(0, std::memory_order_relaxed);
    s.word.store(GenWord(gen) | 1, std::memory_order_release);
    return MakeHandle(kKindKernelCh, gen, index);
  }

  void RecordKernelCh(const Handle& h, EventState state, const EventStateArgs* args) {
    if (args == nullptr || state != kStateKernelChStop || h.index >= options_.pool_kernel_ch) {
      return;
    }
    KernelChSlot& s = kernel_ch_[h.index];
    if (!IsLive(s.word, h.gen)) return;  // stale handle of a recycled NCCL slot (ABI §6.9)
    s.gpu_end.store(args->kernel_ch.p_timer, std::memory_order_relaxed);
    s.cpu_end.store(MonotonicNowNs(), std::memory_order_relaxed);
  }

  void StopKernelCh(const Handle& h) {
    if (h.index >= options_.pool_kernel_ch) return;
    KernelChSlot& s = kernel_ch_[h.index];
    if (!MarkStopped(s.word, h.gen)) return;
    const uint64_t gs = s.gpu_start;
    const uint64_t ge = s.gpu_end.load(std::memory_order_relaxed);
    OpSlot& op = ops_[s.parent_index];
    if (WordGen(op.word.load(std::memory_order_acquire)) == s.parent_gen) {
      // pTimer 0 or end <= start: this channel's timers are missing (ABI §6.9).
      if (gs != 0 && ge > gs && ge < static_cast<uint64_t>(INT64_MAX)) {
        ContextSlot& ctx = contexts_[s.ctx_index];
        const int64_t cpu_end = s.cpu_end.load(std::memory_order_relaxed);
        AtomicMin(ctx.offset_current, s.cpu_start - static_cast<int64_t>(gs));
        if (cpu_end != 0) AtomicMin(ctx.offset_current, cpu_end - static_cast<int64_t>(ge));
        AtomicMin(op.gpu_start_min, static_cast<int64_t>(gs));
        AtomicMax(op.gpu_end_max, static_cast<int64_t>(ge));
        op.offset_snapshot.store(OffsetEstimate(ctx), std::memory_order_relaxed);
      }
      op.kernel_ch_done.fetch_add(1, std::memory_order_relaxed);
      op.last_activity_ns.store(MonotonicNowNs(), std::memory_order_relaxed);
    }
    Detach(op.word, s.parent_gen);
    FreeSlot(s.word, kernel_ch_free_, h.index, h.gen);
  }

  uint32_t pid() const { return pid_; }
  void SetLogger(NcclDebugLogger logfn) {
    if (logfn_ == nullptr) logfn_ = logfn;
  }
  NcclDebugLogger logger() const { return logfn_; }

  PluginStats Stats() const {
    PluginStats s;
    s.records_emitted = emitted_.load(std::memory_order_relaxed);
    s.records_sent = sent_.load(std::memory_order_relaxed);
    s.dropped = dropped_.load(std::memory_order_relaxed);
    s.datagrams_sent = datagrams_.load(std::memory_order_relaxed);
    s.connects = connects_.load(std::memory_order_relaxed);
    s.pool_bytes = MemoryBytes();
    return s;
  }

  const PluginOptions& options() const { return options_; }

 private:
  static int64_t OffsetEstimate(const ContextSlot& ctx) {
    return std::min(ctx.offset_current.load(std::memory_order_relaxed),
                    ctx.offset_previous.load(std::memory_order_relaxed));
  }

  static void FreeSlot(std::atomic<uint64_t>& word, IndexFreeList& list, uint32_t index,
                       uint32_t gen) {
    word.store(GenWord(gen + 1), std::memory_order_release);
    list.Push(index);
  }

  // ---- Flush thread ----
  void FlushLoop() {
    int64_t next_mask_check = 0;
    int64_t next_rotation = MonotonicNowNs() + options_.offset_window_ns;
    for (;;) {
      bool stopping;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::nanoseconds(options_.flush_period_ns), [this] {
          return stop_ || finalized_contexts_.load(std::memory_order_acquire);
        });
        stopping = stop_;
      }
      const int64_t now = MonotonicNowNs();
      if (now >= next_mask_check) {
        CheckMaskFile();
        next_mask_check = now + options_.mask_check_period_ns;
      }
      if (now >= next_rotation) {
        RotateOffsets();
        next_rotation = now + options_.offset_window_ns;
      }
      FlushOnce(now, stopping);
      if (stopping) return;
    }
  }

  void FlushOnce(int64_t now, bool final_pass) {
    const bool finalized = finalized_contexts_.exchange(false, std::memory_order_acq_rel);
    SendComms();
    OpRef ref;
    while (stopped_.TryPop(&ref)) pending_[pending_count_++] = ref;
    if (finalized || final_pass) ForceCloseOrphans(final_pass);
    uint32_t kept = 0;
    for (uint32_t i = 0; i < pending_count_; ++i) {
      const OpRef r = pending_[i];
      if (!TryClose(r, now, final_pass)) pending_[kept++] = r;
    }
    pending_count_ = kept;
    ProxyOpRecord pr;
    while (proxy_records_.TryPop(&pr)) Emit(pr);
    SendDatagram();
  }

  bool ContextAlive(uint32_t index, uint32_t gen) const {
    const ContextSlot& c = contexts_[index];
    return c.live.load(std::memory_order_acquire) && c.gen.load(std::memory_order_acquire) == gen;
  }

  // Closes a stopped op when complete (or forced); returns false to keep it pending.
  bool TryClose(const OpRef& r, int64_t now, bool force) {
    OpSlot& s = ops_[r.index];
    uint64_t w = s.word.load(std::memory_order_acquire);
    if (WordGen(w) != r.gen || (w & kClosed) != 0) return true;  // cannot happen; forget it
    const bool ctx_alive = ContextAlive(s.ctx_index, s.ctx_gen);
    if (!force && ctx_alive) {
      if ((w & kLiveMask) != 0) return false;
      // Complete when every expected KernelCh (one per channel) has stopped. Otherwise wait
      // for quiet: linger_ns after the last activity when KernelCh is not expected or at least
      // one channel has reported (the others belong to the same kernel, so they come together
      // or not at all), kernel_wait_ns while none has (the kernel may still be queued).
      const uint32_t kernels = s.kernel_ch_done.load(std::memory_order_relaxed);
      const bool complete = s.expect_kernel_ch != 0 && kernels >= s.nchannels;
      if (!complete) {
        const int64_t quiet = now - s.last_activity_ns.load(std::memory_order_relaxed);
        const bool waiting_for_kernel = s.expect_kernel_ch != 0 && kernels == 0;
        if (quiet < (waiting_for_kernel ? options_.kernel_wait_ns : options_.linger_ns)) {
          return false;
        }
      }
    }
    // Close: children that attach later become orphans; a forced close ignores live holds.
    while (!s.word.compare_exchange_weak(w, w | kClosed, std::memory_order_acq_rel)) {
      if (WordGen(w) != r.gen) return true;
      if (!force && ctx_alive && (w & kLiveMask) != 0) return false;
    }
    EmitOp(s, ctx_alive);
    FreeSlot(s.word, op_free_, r.index, r.gen);
    return true;
  }

  // After a finalize: ops and proxy ops of dead contexts that were never stopped (and, at the
  // last finalize, everything) are closed so that every started record is emitted.
  void ForceCloseOrphans(bool all) {
    for (uint32_t i = 0; i < options_.pool_ops; ++i) {
      OpSlot& s = ops_[i];
      const uint64_t w = s.word.load(std::memory_order_acquire);
      if ((w & kLiveMask) == 0 || (w & (kStopped | kClosed)) != 0) continue;
      if (!all && ContextAlive(s.ctx_index, s.ctx_gen)) continue;
      if (MarkStopped(s.word, WordGen(w))) pending_[pending_count_++] = OpRef{i, WordGen(w)};
    }
    for (uint32_t i = 0; i < options_.pool_proxy_ops; ++i) {
      ProxyOpSlot& s = proxy_ops_[i];
      const uint64_t w = s.word.load(std::memory_order_acquire);
      if ((w & kLiveMask) == 0 || (w & (kStopped | kClosed)) != 0) continue;
      if (!all && (s.ctx_index == UINT32_MAX || ContextAlive(s.ctx_index, s.ctx_gen))) continue;
      StopProxyOp(Handle{kKindProxyOp, WordGen(w), i, false});
    }
    if (!all) return;
    for (uint32_t i = 0; i < options_.pool_kernel_ch; ++i) {
      const uint64_t w = kernel_ch_[i].word.load(std::memory_order_acquire);
      if ((w & kLiveMask) != 0 && (w & kStopped) == 0) {
        StopKernelCh(Handle{kKindKernelCh, WordGen(w), i, false});
      }
    }
  }

  void EmitOp(const OpSlot& s, bool ctx_alive) {
    CollectiveRecord r{};
    r.comm_hash = s.comm_hash;
    r.seq = s.seq;
    r.count = s.count;
    r.bytes = s.count * DatatypeSize(s.datatype);
    r.enqueue_start_ns = s.enqueue_start_ns;
    r.enqueue_end_ns = s.enqueue_end_ns.load(std::memory_order_relaxed);
    r.proxy_bytes = s.proxy_bytes.load(std::memory_order_relaxed);
    r.proxy_ops = s.proxy_ops.load(std::memory_order_relaxed);
    r.rank = s.rank;
    r.nranks = s.nranks;
    const bool rooted = s.func != nullptr && (std::strcmp(s.func, "Broadcast") == 0 ||
                                              std::strcmp(s.func, "Reduce") == 0);
    r.root = rooted ? s.root : -1;
    r.peer = s.peer;
    r.kind = s.kind;
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
    if (gs != kNone64 && ge > gs && offset != kNone64) {
      r.timing_source = static_cast<uint8_t>(gpu::TimingSource::kKernelChannel);
      r.start_ns = gs + offset;
      r.end_ns = ge + offset;
    } else if (ps != kNone64 && pe > ps) {
      r.timing_source = static_cast<uint8_t>(gpu::TimingSource::kProxyOp);
      r.start_ns = ps;
      r.end_ns = pe;
    } else {
      r.timing_source = static_cast<uint8_t>(gpu::TimingSource::kEnqueueOnly);
      r.start_ns = r.enqueue_start_ns;
      r.end_ns = r.enqueue_end_ns;
    }
    Emit(r);
  }

  template <typename T>
  void Emit(const T& record) {
    emitted_.fetch_add(1, std::memory_order_relaxed);
    if (writer_.Append(record)) return;
    SendDatagram();
    writer_.Append(record);
  }

  void SendDatagram() {
    if (writer_.empty()) return;
    const uint32_t n = writer_.record_count();
    const size_t size =
        writer_.Finish(++sequence_, dropped_.load(std::memory_order_relaxed), MonotonicNowNs());
    if (channel_.Send(buffer_.get(), size)) {
      sent_.fetch_add(n, std::memory_order_relaxed);
      datagrams_.fetch_add(1, std::memory_order_relaxed);
    } else {
      dropped_.fetch_add(n, std::memory_order_relaxed);
    }
    connects_.store(channel_.connects(), std::memory_order_relaxed);
    writer_.Reset();
  }

  // CommRecords go first on every connection, in their own datagrams, and are not counted as
  // drops (they describe state, not events): they are retried until a send succeeds.
  void SendComms() {
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

  void CheckMaskFile() {
    int desired = options_.event_mask;
    if (!options_.mask_file.empty()) {
      const int fd = ::open(options_.mask_file.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd >= 0) {
        char buf[32];
        const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
        ::close(fd);
        if (n > 0) {
          buf[n] = '\0';
          desired = ParseInt(buf, desired);
        }
      }
    }
    if (desired == desired_mask_.load(std::memory_order_relaxed)) return;
    desired_mask_.store(desired, std::memory_order_relaxed);
    int* mask = mask_ptr_.load(std::memory_order_acquire);
    if (mask != nullptr) std::atomic_ref<int>(*mask).store(desired, std::memory_order_relaxed);
  }

  void RotateOffsets() {
    for (uint32_t i = 0; i < kMaxContexts; ++i) {
      ContextSlot& c = contexts_[i];
      if (!c.live.load(std::memory_order_acquire)) continue;
      c.offset_previous.store(c.offset_current.exchange(kNone64, std::memory_order_relaxed),
                              std::memory_order_relaxed);
    }
  }

  static constexpr uint32_t kCommsPerDatagram = 64;

  const PluginOptions options_;
  const int32_t pid_;
  std::unique_ptr<ContextSlot[]> contexts_;
  std::unique_ptr<OpSlot[]> ops_;
  IndexFreeList op_free_;
  std::unique_ptr<ProxyOpSlot[]> proxy_ops_;
  IndexFreeList proxy_free_;
  std::unique_ptr<KernelChSlot[]> kernel_ch_;
  IndexFreeList kernel_ch_free_;
  MpmcQueue<OpRef> stopped_;
  MpmcQueue<ProxyOpRecord> proxy_records_;
  std::atomic<int*> mask_ptr_{nullptr};
  NcclDebugLogger logfn_ = nullptr;

  // Flush thread state.
  std::unique_ptr<OpRef[]> pending_;
  uint32_t pending_count_ = 0;
  std::unique_ptr<uint8_t[]> buffer_;
  gpu::DatagramWriter writer_;
  uint8_t comm_buffer_[sizeof(gpu::DatagramHeader) +
                       kCommsPerDatagram * (sizeof(gpu::RecordHeader) + sizeof(CommRecord))];
  gpu::ProducerChannel channel_;
  uint64_t sequence_ = 0;
  uint64_t comm_epoch_ = 0;
  std::atomic<int> desired_mask_;

  std::atomic<bool> finalized_contexts_{false};
  alignas(64) std::atomic<uint64_t> dropped_{0};
  alignas(64) std::atomic<uint64_t> emitted_{0};
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> datagrams_{0};
  std::atomic<uint64_t> connects_{0};

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread flush_thread_;
};

// Lifecycle: the plugin object exists from the first successful init to the last finalize.
std::mutex g_lifecycle_mu;
std::atomic<Plugin*> g_plugin{nullptr};
int g_context_count = 0;

void Log(Plugin* p, int level, const char* fmt, uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  NcclDebugLogger logfn = p != nullptr ? p->logger() : nullptr;
  if (logfn != nullptr) logfn(level, kNcclLogProfile, __FILE__, __LINE__, fmt, a, b, c, d);
}

}  // namespace

PluginOptions PluginOptions::FromEnvironment() {
  PluginOptions o;
  o.event_mask = ParseInt(std::getenv(kEventMaskEnv), kDefaultEventMask);
  const char* file = std::getenv(kMaskFileEnv);
  if (file != nullptr) o.mask_file = file;
  const int pool = ParseInt(std::getenv(kPoolEnv), 0);
  if (pool >= 16 && pool <= (1 << 22)) {
    o.pool_ops = static_cast<uint32_t>(pool);
    o.pool_proxy_ops = 4 * static_cast<uint32_t>(pool);
    o.pool_kernel_ch = static_cast<uint32_t>(pool);
  }
  o.socket_path = gpu::ResolveSocketPath();
  return o;
}

size_t DatatypeSize(const char* t) {
  if (t == nullptr) return 0;
  struct Entry {
    const char* name;
    size_t size;
  };
  static constexpr Entry kSizes[] = {
      {"ncclInt8", 1},       {"ncclChar", 1},       {"ncclUint8", 1},  {"Unknown", 1},
      {"ncclInt32", 4},      {"ncclInt", 4},        {"ncclUint32", 4}, {"ncclInt64", 8},
      {"ncclUint64", 8},     {"ncclFloat16", 2},    {"ncclHalf", 2},   {"ncclFloat32", 4},
      {"ncclFloat", 4},      {"ncclFloat64", 8},    {"ncclDouble", 8}, {"ncclBfloat16", 2},
      {"ncclFloat8e4m3", 1}, {"ncclFloat8e5m2", 1},
  };
  for (const Entry& e : kSizes) {
    if (std::strcmp(t, e.name) == 0) return e.size;
  }
  return 0;
}

void SetOptionsForTesting(const PluginOptions& options) {
  std::lock_guard<std::mutex> lock(g_lifecycle_mu);
  delete g_options_for_testing;
  g_options_for_testing = new PluginOptions(options);
}

PluginStats CurrentStats() {
  std::lock_guard<std::mutex> lock(g_lifecycle_mu);
  Plugin* p = g_plugin.load(std::memory_order_acquire);
  PluginStats s = p != nullptr ? p->Stats() : PluginStats{};
  s.contexts = g_context_count;
  return s;
}

NcclResult Init(void** context, uint64_t comm_hash, int* activation_mask, const char* comm_name,
                int n_nodes, int nranks, int rank, NcclDebugLogger logfn) {
  if (context == nullptr) return kNcclInvalidArgument;
  *context = nullptr;
  if (activation_mask == nullptr || nranks <= 0 || rank < 0 || rank >= nranks) {
    if (logfn != nullptr) {
      logfn(kNcclLogWarn, kNcclLogProfile, __FILE__, __LINE__,
            "fabricscope profiler: init refused (mask %p, rank %d of %d)", activation_mask, rank,
            nranks);
    }
    return kNcclInvalidArgument;
  }
  std::lock_guard<std::mutex> lock(g_lifecycle_mu);
  Plugin* p = g_plugin.load(std::memory_order_relaxed);
  bool created = false;
  if (p == nullptr) {
    const PluginOptions options = g_options_for_testing != nullptr
                                      ? *g_options_for_testing
                                      : PluginOptions::FromEnvironment();
    try {
      p = new Plugin(options);
    } catch (const std::exception&) {  // std::bad_alloc: pools too large for this host
      return kNcclSystemError;
    }
    p->SetLogger(logfn);
    created = true;
  }
  const NcclResult result =
      p->AddContext(context, comm_hash, activation_mask, comm_name, n_nodes, nranks, rank);
  if (result != kNcclSuccess) {
    if (created) delete p;
    return result;
  }
  ++g_context_count;
  if (created) {
    g_plugin.store(p, std::memory_order_release);
    try {
      p->StartFlushThread();
    } catch (const std::exception&) {  // std::system_error: no thread; records stay unsent
      Log(p, kNcclLogWarn, "fabricscope profiler: no flush thread (%lu %lu %lu %lu)", 0, 0, 0, 0);
    }
    Log(p, kNcclLogInfo,
        "fabricscope profiler: mask %lu, pools %lu bytes, %lu collectives in flight, pid %lu",
        static_cast<uint64_t>(p->options().event_mask), p->MemoryBytes(), p->options().pool_ops,
        p->pid());
  }
  return kNcclSuccess;
}

NcclResult InitV4(void** context, int* activation_mask, const char* comm_name, uint64_t comm_hash,
                  int n_nodes, int nranks, int rank, NcclDebugLogger logfn) {
  return Init(context, comm_hash, activation_mask, comm_name, n_nodes, nranks, rank, logfn);
}

NcclResult Finalize(void* context) {
  std::lock_guard<std::mutex> lock(g_lifecycle_mu);
  Plugin* p = g_plugin.load(std::memory_order_relaxed);
  if (p == nullptr || !p->RemoveContext(context)) return kNcclSuccess;
  if (--g_context_count > 0) return kNcclSuccess;
  // The last communicator: flush what is left (without blocking), join, free. NCCL dlclose()s
  // the library next (ABI §1).
  p->StopFlushThread();
  g_plugin.store(nullptr, std::memory_order_release);
  const PluginStats s = p->Stats();
  Log(p, kNcclLogInfo,
      "fabricscope profiler: finalized; records %lu, sent %lu, dropped %lu, datagrams %lu",
      s.records_emitted, s.records_sent, s.dropped, s.datagrams_sent);
  delete p;
  return kNcclSuccess;
}

NcclResult StartEvent(void* context, void** event_handle, EventDescrV5* descr) {
  if (event_handle == nullptr) return kNcclSuccess;
  *event_handle = nullptr;  // always written (ABI §6.9)
  if (descr == nullptr) return kNcclSuccess;
  Plugin* p = g_plugin.load(std::memory_order_acquire);
  if (p == nullptr) return kNcclSuccess;
  switch (descr->type) {
    case kEventColl:
      *event_handle = p->StartOp(context, *descr, /*p2p=*/false);
      break;
    case kEventP2p:
      *event_handle = p->StartOp(context, *descr, /*p2p=*/true);
      break;
    case kEventProxyOp:
      *event_handle = p->StartProxyOp(context, *descr);
      break;
    case kEventProxyStep:
      *event_handle = p->StartProxyStep(*descr);
      break;
    case kEventKernelCh:
      *event_handle = p->StartKernelCh(context, *descr);
      break;
    case kEventCollApi:
      *event_handle = MakeHandle(kKindApi, 0, 0, descr->coll_api.graph_captured);
      break;
    case kEventP2pApi:
      *event_handle = MakeHandle(kKindApi, 0, 0, descr->p2p_api.graph_captured);
      break;
    default:
      *event_handle = MakeHandle(kKindOther, 0, 0);
      break;
  }
  return kNcclSuccess;
}

NcclResult StartEventV4(void* context, void** event_handle, EventDescrV4* descr) {
  if (event_handle == nullptr) return kNcclSuccess;
  *event_handle = nullptr;
  if (descr == nullptr) return kNcclSuccess;
  EventDescrV5 d{};
  d.type = descr->type;  // one byte; the padding after it may be garbage (ABI §4)
  d.parent_obj = descr->parent_obj;
  d.rank = descr->rank;
  // From offset 24 the v4 union has the v5 layout for the members we read, except that v4
  // coll/p2p lack parentGroup (left NULL here).
  static_assert(sizeof(EventDescrV4) - 24 <= sizeof(EventDescrV5) - 24);
  std::memcpy(reinterpret_cast<char*>(&d) + 24, reinterpret_cast<const char*>(descr) + 24,
              sizeof(EventDescrV4) - 24);
  if (d.type == kEventP2p) d.p2p.parent_group = nullptr;
  return StartEvent(context, event_handle, &d);
}

NcclResult StopEvent(void* event_handle) {
  const Handle h = DecodeHandle(event_handle);
  if (h.kind != kKindOp && h.kind != kKindProxyOp && h.kind != kKindKernelCh) return kNcclSuccess;
  Plugin* p = g_plugin.load(std::memory_order_acquire);
  if (p == nullptr) return kNcclSuccess;
  if (h.kind == kKindOp) {
    p->StopOp(h);
  } else if (h.kind == kKindProxyOp) {
    p->StopProxyOp(h);
  } else {
    p->StopKernelCh(h);
  }
  return kNcclSuccess;
}

NcclResult RecordEventState(void* event_handle, EventState state, EventStateArgs* args) {
  const Handle h = DecodeHandle(event_handle);
  if (h.kind != kKindProxyStep && h.kind != kKindKernelCh) return kNcclSuccess;
  Plugin* p = g_plugin.load(std::memory_order_acquire);
  if (p == nullptr) return kNcclSuccess;
  if (h.kind == kKindProxyStep) {
    p->RecordStep(h, state, args);
  } else {
    p->RecordKernelCh(h, state, args);
  }
  return kNcclSuccess;
}

}  // namespace fabricscope::collectors::nccl
