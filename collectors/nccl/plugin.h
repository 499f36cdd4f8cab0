#pragma once

// Internal to the NCCL profiler plugin: the Plugin object behind the table functions of
// collectors/nccl/profiler.h. Hot-path members (plugin_events.cc) run on NCCL's threads and use
// atomics only; flush-thread members (plugin_flush.cc) close records, batch and send them.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "collectors/gpu/job_identity.h"
#include "collectors/gpu/producer.h"
#include "collectors/gpu/wire.h"
#include "collectors/nccl/chain.h"
#include "collectors/nccl/lockfree.h"
#include "collectors/nccl/profiler.h"
#include "collectors/nccl/profiler_abi.h"
#include "collectors/nccl/slot_pool.h"
#include "collectors/nccl/slots.h"

namespace fabricscope::collectors::nccl::internal {

// Parses a decimal or 0x-hex mask (the environment variable or the mask file, trailing
// whitespace allowed); `fallback` when malformed or outside [0, INT32_MAX]. (profiler.cc)
int ParseMask(const char* s, int fallback);

class Plugin {
 public:
  explicit Plugin(const PluginOptions& options);
  ~Plugin() { StopFlushThread(); }
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;

  size_t MemoryBytes() const;
  void StartFlushThread();
  void StopFlushThread();

  // Called under the lifecycle mutex.
  NcclResult AddContext(void** context, uint64_t comm_hash, int* mask, const char* name, int nnodes,
                        int nranks, int rank);
  // Called under the lifecycle mutex; returns false when `context` is not a live context of ours.
  bool RemoveContext(void* context);
  ContextSlot* LookupContext(const void* context, uint32_t* index_out);

  // ---- Hot path (any NCCL thread, concurrently; never locks, allocates or blocks) ----
  void* StartOp(void* context, const EventDescrV5& d, bool p2p);
  void StopOp(const Handle& h);
  void* StartProxyOp(void* context, const EventDescrV5& d);
  void* StartProxyStep(const EventDescrV5& d);
  void RecordStep(const Handle& h, EventState state, const EventStateArgs* args);
  void StopProxyOp(const Handle& h) { StopProxyOpAt(h, 0); }
  void* StartKernelCh(void* context, const EventDescrV5& d);
  void RecordKernelCh(const Handle& h, EventState state, const EventStateArgs* args);
  void StopKernelCh(const Handle& h);
  // Copy-engine collectives (ABI v6, NCCL 2.29+): CeColl is an op of its own; CeSync and CeBatch
  // are children on the same thread, nested inside it (src/ce_coll.cc ncclLaunchCeColl).
  void* StartCeColl(void* context, const EventDescrV6& d);
  void* StartCeChild(const EventDescrV6& d);
  void StopCeChild(const Handle& h);

  int32_t pid() const { return pid_; }
  void SetLogger(NcclDebugLogger logfn) {
    if (logfn_ == nullptr) logfn_ = logfn;
  }
  NcclDebugLogger logger() const { return logfn_; }
  PluginStats Stats() const;
  const PluginOptions& options() const { return options_; }
  ContextSlot& context_slot(uint32_t index) { return contexts_[index]; }
  // The mask a chained plugin asked for (collectors/nccl/chain.h), or-ed into ours.
  void SetExtraMask(int mask) { extra_mask_.store(mask, std::memory_order_relaxed); }
  // Chaining (chain.h): the loaded chained plugin, owned from the first init on; and where the
  // chained handle of one of our pooled events is kept (nullptr when `h` is not a pooled event
  // of ours in its current generation).
  void SetChain(std::unique_ptr<Chain> chain) { chain_ = std::move(chain); }
  Chain* chain() const { return chain_.get(); }
  std::atomic<void*>* ChainField(const Handle& h);
  int desired_mask() const {
    return desired_mask_.load(std::memory_order_relaxed) |
           extra_mask_.load(std::memory_order_relaxed);
  }

 private:
  static int64_t OffsetEstimate(const ContextSlot& ctx) {
    return std::min(ctx.offset_current.load(std::memory_order_relaxed),
                    ctx.offset_previous.load(std::memory_order_relaxed));
  }
  template <typename FreeList>
  static void FreeSlot(std::atomic<uint64_t>& word, FreeList& list, uint32_t index, uint32_t gen) {
    word.store(GenWord(gen + 1), std::memory_order_release);
    list.Push(index);
  }
  int CurrentMask() const {
    int* mask = mask_ptr_.load(std::memory_order_relaxed);
    return mask != nullptr ? std::atomic_ref<int>(*mask).load(std::memory_order_relaxed) : 0;
  }
  // Whether ProxyOps started under `mask` read the clock. Not where KernelCh events time the
  // collective and no ProxyStep asks for transfer detail (the default mask, 74): the records'
  // times are then 0 (gpu::kProxyOpUntimed), which saves two clock reads and the collective's
  // min/max per ProxyOp on NCCL's proxy thread (issue 38). Nothing downstream reads a single
  // transfer's times: the rank-pair bytes take its peer and bytes, the transfer ledger the
  // collective's interval.
  static bool ProxyOpsTimed(int mask) {
    return (mask & kEventKernelCh) == 0 || (mask & kEventProxyStep) != 0;
  }
  // Pops and initializes an op slot for `ctx`; kNone when the pool is empty (counted).
  uint32_t NewOp(ContextSlot& ctx, uint32_t ctx_index, int64_t now);
  // NewOp for a live context of ours, with its kind and graph flag (from an API parent); kNone
  // for a context that is not ours or an empty pool.
  uint32_t BeginOp(void* context, const void* parent_obj, uint8_t kind, const char* func = nullptr);
  // Which of a context's Send/Recv counters (ContextSlot::p2p_seq) a P2p op of `func` takes.
  static int P2pDirection(const char* func) { return func != nullptr && func[0] == 'R' ? 1 : 0; }
  // Stops a ProxyOp; end_ns 0 = now (a real stop), else the time of its last step (expired).
  void StopProxyOpAt(const Handle& h, int64_t end_ns);
  // Fills a stopped ProxyOp's record without step events: bytes from EstimateProxyOpBytes,
  // steps = the descriptor's nSteps, flags |= kProxyOpBytesEstimated.
  void EstimateBytes(ProxyOpSlot& s);

  // ---- Flush thread (plugin_flush.cc) ----
  void FlushLoop();
  void FlushOnce(int64_t now, bool final_pass);
  bool ContextAlive(uint32_t index, uint32_t gen) const;
  bool Complete(OpSlot& s, uint64_t w, int64_t now);
  bool TryClose(const OpRef& r, int64_t now, bool force);
  void ForceCloseOrphans(bool all);
  void ExpireProxyOps(int64_t now);
  void EmitOp(OpSlot& s, bool ctx_alive);
  // Pushes a stopped, timed KernelCh slot onto its open op's channel list (channel_spans).
  // False when the op was closed meanwhile: the caller frees the slot.
  static bool LinkChannel(OpSlot& op, KernelChSlot& s, uint32_t index);
  // LinkChannel while fewer than half the KernelCh pool are linked; else (or when the op
  // closed) false and the span counted dropped. The caller frees the slot on false.
  bool KeepForSpans(OpSlot& op, KernelChSlot& s, uint32_t index);
  // Flush thread, as it closes an op: takes the op's channel list (closing it), sends the spans
  // (GPU times + offset) as ChannelSpansRecords before the op's record, and frees the slots.
  void EmitChannels(OpSlot& s, const gpu::CollectiveRecord& r, int64_t offset);
  template <typename T>
  void Emit(const T& record);
  // Sends the datagram being built. A full socket (the agent reads slower than we close) holds
  // it for a retry on the next cycle, up to kHoldNs, while records wait in the pools; no agent
  // or a longer hold drops it (counted). The final pass (the last finalize) waits for a full
  // socket until kFinalDrainNs after it began, then drops. True when nothing is held.
  bool SendDatagram(bool final_pass);
  // channel_.Send, retried every 1 ms on a full socket of a connected agent while the final
  // pass's time lasts (the agent reads behind by a few datagrams; the pools die with us).
  bool Send(size_t size, bool final_pass);
  bool RetryHeld(bool final_pass);
  // Whether one more record fits now (sending or retrying as needed).
  bool Room(bool final_pass);
  void SendComms();
  // Flush thread, once, first thing: constructs the rest of each pool, chunk by chunk, freeing each
  // chunk's indices as it is built, and faults the record queues' pages in
  // (MpmcQueue::Prefault); logs "pools ready" (INFO) when done. NCCL's comm init goes on after
  // the profiler's init (src/init.cc: ncclProxyCreate, the ring and tree connects, a barrier),
  // so the pools are whole before its first collective; one sooner than that finds the first
  // chunk only, and a full pool drops and counts.
  void GrowPools();
  void CheckMaskFile();
  void RotateOffsets();

  static constexpr uint32_t kCommsPerDatagram = 64;

  const PluginOptions options_;
  const int32_t pid_;
  std::unique_ptr<ContextSlot[]> contexts_;
  // Pools: reserved whole, constructed a chunk at init and the rest by GrowPools.
  SlotPool<OpSlot> ops_;
  IndexFreeList op_free_;
  SlotPool<ProxyOpSlot> proxy_ops_;
  IndexStack proxy_free_;  // LIFO: the proxy thread takes and frees them (lockfree.h)
  SlotPool<KernelChSlot> kernel_ch_;
  IndexStack kernel_ch_free_;
  MpmcQueue<OpRef> stopped_;
  MpmcQueue<gpu::ProxyOpRecord> proxy_records_;
  std::atomic<int*> mask_ptr_{nullptr};
  NcclDebugLogger logfn_ = nullptr;

  // Flush thread state.
  std::unique_ptr<OpRef[]> pending_;
  uint32_t pending_count_ = 0;
  std::unique_ptr<uint8_t[]> buffer_;
  gpu::DatagramWriter writer_;
  uint8_t comm_buffer_[sizeof(gpu::DatagramHeader) +
                       kCommsPerDatagram * (sizeof(gpu::RecordHeader) + sizeof(gpu::CommRecord))];
  gpu::ProducerChannel channel_;
  uint64_t sequence_ = 0;
  uint64_t comm_epoch_ = 0;
  static constexpr int64_t kHoldNs = 10'000'000'000;
  static constexpr int64_t kFinalDrainNs = 500'000'000;
  int64_t final_deadline_ns_ = 0;  // set when the final pass begins
  size_t held_size_ = 0;           // a finished datagram in buffer_ the socket did not take yet
  int64_t held_since_ns_ = 0;
  std::atomic<int> desired_mask_;
  std::atomic<int> extra_mask_{0};
  int applied_mask_ = -1;  // flush thread: the mask CheckMaskFile last stored
  const int64_t created_ns_;

  std::atomic<bool> finalized_contexts_{false};
  alignas(64) std::atomic<uint64_t> dropped_{0};
  alignas(64) std::atomic<uint64_t> emitted_{0};
  std::atomic<uint64_t> sent_{0};
  std::atomic<uint64_t> datagrams_{0};
  std::atomic<uint64_t> connects_{0};
  std::atomic<uint64_t> expired_proxy_ops_{0};
  // Channel spans: KernelCh slots linked to open ops, and spans not sent (KeepForSpans).
  std::atomic<uint32_t> channel_slots_held_{0};
  std::atomic<uint64_t> channel_spans_dropped_{0};
  std::atomic<uint64_t> timing_counts_[4] = {};  // closed ops per gpu::TimingSource

  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::unique_ptr<Chain> chain_;  // destroyed (dlclose) after the flush thread is joined
  std::thread flush_thread_;
};

}  // namespace fabricscope::collectors::nccl::internal
