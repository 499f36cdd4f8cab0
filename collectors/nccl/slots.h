#pragma once

// Internal to the NCCL profiler plugin (collectors/nccl): event handles, the per-slot state word
// and the pooled event slots. Everything here is allocated once, at the first init, and touched
// by the hot path with atomics only (no locks, no allocation). "ABI §N": the topics listed in
// collectors/nccl/profiler_abi.h.

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "collectors/gpu/wire.h"

namespace fabricscope::collectors::nccl::internal {

// ---- Handles ---------------------------------------------------------------------------------
// An event handle is not a pointer: it is the word
//   magic (8 bits) | kind (4) | graph flag (1) | generation (27) | slot index (24)
// so decoding a stale, repeated, foreign or poisoned handle reads no memory outside our pools.
inline constexpr uint64_t kHandleMagic = 0xFBull << 56;
inline constexpr int kKindShift = 52;
inline constexpr uint64_t kGraphBit = 1ull << 51;
inline constexpr int kGenShift = 24;
inline constexpr uint32_t kGenMask = (1u << 27) - 1;
inline constexpr uint32_t kIndexMask = (1u << 24) - 1;

enum HandleKind : uint32_t {
  kKindOp = 1,         // Coll / P2p / CeColl, pooled
  kKindProxyOp = 2,    // pooled
  kKindKernelCh = 3,   // pooled
  kKindProxyStep = 4,  // token naming its ProxyOp slot and generation
  kKindApi = 5,        // CollApi / P2pApi token, carries graphCaptured
  kKindOther = 6,      // Group, GroupApi, KernelLaunch, ProxyCtrl, NetPlugin: token, no state
  kKindCeChild = 7,    // CeSync / CeBatch: token naming its CeColl op slot and generation
  kKindChain = 8,      // chaining on (collectors/nccl/chain.h): a ChainSlot index
};

inline void* MakeHandle(uint32_t kind, uint32_t gen, uint32_t index, bool graph = false) {
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

inline Handle DecodeHandle(const void* handle) {
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
inline constexpr uint64_t kContextMagic = 0xFCull << 56;
inline constexpr uint32_t kMaxContexts = 1024;

// ---- Slot state words ------------------------------------------------------------------------
// Pooled slots carry one atomic word: generation (bits 32-58) | STOPPED (31) | CLOSED (30) |
// live holds (0-29). A free slot has no flags and no holds. An event starts with one hold (its
// own, released by its stopEvent); each attached child (ProxyOp, KernelCh, CE child) adds one
// until it stops. A Coll stays attachable after its own stop until the flush thread closes it:
// NCCL's proxy thread starts ProxyOp and KernelCh events on its own schedule, usually after the
// Coll stopped (ABI §6.2, §6.5).
inline constexpr uint64_t kStopped = 1ull << 31;
inline constexpr uint64_t kClosed = 1ull << 30;
inline constexpr uint64_t kLiveMask = (1ull << 30) - 1;

inline uint32_t WordGen(uint64_t w) { return static_cast<uint32_t>(w >> 32) & kGenMask; }
inline uint64_t GenWord(uint32_t gen) { return static_cast<uint64_t>(gen & kGenMask) << 32; }

// Adds one hold if the slot still has generation `gen`, is in use and not closed: whether or
// not the event itself has stopped, and whether or not other children still hold it.
inline bool Attach(std::atomic<uint64_t>& word, uint32_t gen) {
  uint64_t w = word.load(std::memory_order_acquire);
  for (;;) {
    if (WordGen(w) != gen || (w & kClosed) != 0) return false;
    if ((w & (kStopped | kLiveMask)) == 0) return false;  // free (never started this gen)
    if (word.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel)) return true;
  }
}

// Releases one hold if the slot still has generation `gen`. Returns true when that was the last
// hold of a CLOSED slot: the word then already names the next generation, and the caller pushes
// the index back to its free list. (A slot closed while children still held it, after a wait,
// is freed by the last of them, never under them.)
inline bool Detach(std::atomic<uint64_t>& word, uint32_t gen) {
  uint64_t w = word.load(std::memory_order_acquire);
  for (;;) {
    if (WordGen(w) != gen || (w & kLiveMask) == 0) return false;
    const bool last_of_closed = (w & kClosed) != 0 && (w & kLiveMask) == 1;
    const uint64_t next = last_of_closed ? GenWord(gen + 1) : w - 1;
    if (word.compare_exchange_weak(w, next, std::memory_order_acq_rel)) return last_of_closed;
  }
}

// Marks the slot stopped (and releases the owner's hold) once per generation.
inline bool MarkStopped(std::atomic<uint64_t>& word, uint32_t gen) {
  uint64_t w = word.load(std::memory_order_acquire);
  for (;;) {
    if (WordGen(w) != gen || (w & (kStopped | kClosed)) != 0 || (w & kLiveMask) == 0) return false;
    if (word.compare_exchange_weak(w, (w | kStopped) - 1, std::memory_order_acq_rel)) return true;
  }
}

// Started in this generation and neither stopped nor closed.
inline bool IsLive(const std::atomic<uint64_t>& word, uint32_t gen) {
  const uint64_t w = word.load(std::memory_order_acquire);
  return WordGen(w) == gen && (w & (kStopped | kClosed)) == 0 && (w & kLiveMask) != 0;
}

// Started in this generation and not closed yet (possibly stopped).
inline bool IsOpen(const std::atomic<uint64_t>& word, uint32_t gen) {
  const uint64_t w = word.load(std::memory_order_acquire);
  return WordGen(w) == gen && (w & kClosed) == 0 && (w & (kStopped | kLiveMask)) != 0;
}

inline void AtomicMin(std::atomic<int64_t>& a, int64_t v) {
  int64_t cur = a.load(std::memory_order_relaxed);
  while (v < cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}
inline void AtomicMax(std::atomic<int64_t>& a, int64_t v) {
  int64_t cur = a.load(std::memory_order_relaxed);
  while (v > cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

inline constexpr int64_t kNone64 = INT64_MAX;

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
  // The latest enqueue start of a Coll of this context whose every expected KernelCh stopped.
  // KernelCh events of one channel come in enqueue order (the per-channel profiler connection
  // is not shared: a later op is chained as nextPeer and activated after the earlier one is
  // removed, src/proxy.cc ProxyAppend:440-447, removeOp:727-736), and every Coll uses channel 0
  // on the send-side connection (src/proxy.cc SaveProxyProfiler:551), so an older Coll still
  // waiting for its first KernelCh will get none: it waits the linger, not max_wait_ns. (P2p
  // ops use per-peer channels and the recv side its own connection: no such inference.) Indexed
  // by the later Coll's channel count: a Coll on channels 0..n-1 only vouches for ops with at
  // most n channels.
  static constexpr int kMaxChannels = 64;
  std::atomic<int64_t> kernels_done_enqueue_ns[kMaxChannels + 1] = {};
  // Set by init (and for live contexts at every reconnect), cleared once its CommRecord was
  // sent; a finalized context's slot is not reused before that.
  std::atomic<bool> unsent{false};
  void* chain_context = nullptr;  // the chained plugin's context (collectors/nccl/chain.h)
};

// Kinds of pooled op (a CollectiveRecord when closed).
enum OpSlotKind : uint8_t { kOpColl = 0, kOpP2p = 1, kOpCe = 2 };

inline constexpr uint32_t kChannelListEmpty = UINT32_MAX;
inline constexpr uint32_t kChannelListClosed = UINT32_MAX - 1;

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
  uint8_t kind = 0;  // OpSlotKind
  uint8_t nchannels = 0;
  uint8_t graph = 0;
  uint8_t expect_kernel_ch = 0;
  uint8_t proxy_timed = 1;  // Plugin::ProxyOpsTimed of the mask it started under
  int64_t enqueue_start_ns = 0;
  std::atomic<int64_t> enqueue_end_ns{0};
  std::atomic<int64_t> last_activity_ns{0};
  std::atomic<int64_t> gpu_start_min{kNone64};
  std::atomic<int64_t> gpu_end_max{0};
  std::atomic<int64_t> offset_snapshot{kNone64};
  std::atomic<int64_t> proxy_start_min{kNone64};
  std::atomic<int64_t> proxy_end_max{0};
  // CPU time the proxy thread saw the last expected KernelCh stop (0: not yet): the completion
  // signal of proxy_op timing where the ProxyOps are untimed and no GPU timer is usable.
  std::atomic<int64_t> kernel_done_ns{0};
  // Its ProxyOps' bytes and count in one word, one locked add per ProxyOp (AddProxySum): the
  // bytes in the low kProxySumBytesBits (16 TiB), the count above them (2^20 ops). Each op's
  // bytes are clamped to 1 TiB, so the bytes carry into the count only past 16 TiB in one
  // collective (16 ops of 1 TiB: no collective moves that); more than 2^20 ops wrap the count.
  std::atomic<uint64_t> proxy_sum{0};
  // PackShare(ShareOf(this op)) once a ProxyOp without step events stopped (proxy_bytes.h);
  // 0 until then. Set by whichever proxy thread gets there first (the same value).
  std::atomic<uint64_t> proxy_share{0};
  std::atomic<uint32_t> kernel_ch_done{0};
  // Changes at every step of an attached ProxyOp (a store, not a clock read, on the hot path);
  // the flush thread notes when it last saw it change (seen_*, flush thread only).
  std::atomic<uint64_t> child_progress{0};
  uint64_t seen_progress = 0;
  int64_t seen_at_ns = 0;
  std::atomic<void*> chain_handle{nullptr};  // the chained plugin's handle (chain.h)
  // With PluginOptions::channel_spans: the stopped KernelCh slots of this op, linked through
  // KernelChSlot::next_in_op (a lock-free stack the proxy thread pushes to); the flush thread
  // swaps in kChannelListClosed when it closes the op, after which a stop frees its own slot.
  std::atomic<uint32_t> channel_list{kChannelListEmpty};
};

inline constexpr int kProxySumBytesBits = 44;
inline constexpr uint64_t kProxySumBytesMask = (uint64_t{1} << kProxySumBytesBits) - 1;
inline constexpr uint64_t kProxyOpBytesMax = (uint64_t{1} << 40) - 1;
// Adds one ProxyOp of `bytes` to an OpSlot::proxy_sum.
inline void AddProxySum(std::atomic<uint64_t>& sum, uint64_t bytes) {
  sum.fetch_add((uint64_t{1} << kProxySumBytesBits) | std::min(bytes, kProxyOpBytesMax),
                std::memory_order_relaxed);
}
inline uint64_t ProxySumBytes(uint64_t sum) { return sum & kProxySumBytesMask; }
inline uint32_t ProxySumOps(uint64_t sum) {
  return static_cast<uint32_t>(sum >> kProxySumBytesBits);
}

// Not cache-line aligned: one proxy thread writes them (the memory goes to the pool size).
struct ProxyOpSlot {
  std::atomic<uint64_t> word{0};
  bool has_parent = false;
  // Its start and stop read the clock (Plugin::ProxyOpsTimed): false at a mask whose KernelCh
  // times the collective and that has no ProxyStep, where the record's times stay 0.
  bool timed = true;
  uint32_t parent_index = 0;
  uint32_t parent_gen = 0;
  uint32_t ctx_index = UINT32_MAX;  // UINT32_MAX: foreign (PXN)
  uint32_t ctx_gen = 0;
  gpu::ProxyOpRecord record{};
  std::atomic<uint64_t> bytes{0};
  std::atomic<int32_t> steps{0};
  int32_t announced_steps = 0;  // the descriptor's nSteps (one per ProxyStep event NCCL would send)
  // Flush thread only (ExpireProxyOps): the generation, step count and time it last saw.
  uint32_t seen_gen = UINT32_MAX;
  int32_t seen_steps = 0;
  int64_t seen_at_ns = 0;
  std::atomic<void*> chain_handle{nullptr};
};

struct alignas(64) KernelChSlot {
  std::atomic<uint64_t> word{0};
  bool has_parent = false;
  uint32_t parent_index = 0;
  uint32_t parent_gen = 0;
  uint32_t ctx_index = 0;
  uint64_t gpu_start = 0;
  std::atomic<uint64_t> gpu_end{0};
  std::atomic<void*> chain_handle{nullptr};
  uint32_t next_in_op = kChannelListEmpty;  // OpSlot::channel_list's link
  uint8_t channel = 0;                      // NCCL's channel id (EventDescrV5 kernel_ch)
};

// Pending op reference kept by the flush thread.
struct OpRef {
  uint32_t index;
  uint32_t gen;
};

}  // namespace fabricscope::collectors::nccl::internal
