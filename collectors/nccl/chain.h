#pragma once

// Plugin chaining: NCCL loads one profiler plugin per process (NVIDIA/nccl#1981), so a site that
// already runs another one (NCCL Inspector, its own) loads ours and names the other in
// FABRICSCOPE_NCCL_CHAIN=/path/other.so. Ours then forwards every call to it:
// - Load: dlopen(RTLD_NOW | RTLD_LOCAL) and the newest table it exports (ncclProfiler_v6, then
//   _v5, then _v4: NCCL 2.29's own order, src/plugin/profiler.cc); a failure is logged and
//   chaining stays off, ours is unaffected.
// - Init/Finalize: its own context per communicator; its init gets a private mask int, and the
//   mask NCCL sees is the union of both (Plugin::SetExtraMask).
// - Events: its own handles. Ours are returned to NCCL for pooled events (Coll, P2p, CeColl,
//   ProxyOp, KernelCh), with its handle kept in our slot; for the others, a ChainSlot handle
//   holding both. Parent objects are translated to its handles. Down-conversion follows NCCL's
//   adapters: v5 gets no copy-engine events (src/plugin/profiler/profiler_v5.cc), v4 gets the
//   104-byte descriptor, no API events, and a Coll/P2p parent that is the Group
//   (src/plugin/profiler/profiler_v4.cc).
//
// Threads: Load/InitContext/FinalizeContext under the plugin's lifecycle mutex; the event
// functions from any NCCL thread, lock-free (one pool pop/push for non-pooled events); Reclaim
// from the flush thread.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "collectors/nccl/lockfree.h"
#include "collectors/nccl/profiler_abi.h"
#include "collectors/nccl/slots.h"

namespace fabricscope::collectors::nccl::internal {

class Chain {
 public:
  // nullptr when `path` cannot be loaded or exports no profiler table; logs why through logfn.
  // `self` is our own v6 table: a chain to ourselves is refused.
  static std::unique_ptr<Chain> Load(const std::string& path, uint32_t slots, NcclDebugLogger logfn,
                                     const ProfilerV6* self);
  ~Chain();
  Chain(const Chain&) = delete;
  Chain& operator=(const Chain&) = delete;

  // The chained plugin's context for a new communicator, nullptr when its init failed.
  void* InitContext(uint64_t comm_hash, const char* name, int nnodes, int nranks, int rank,
                    NcclDebugLogger logfn);
  void FinalizeContext(void* chain_context);
  int mask() const { return std::atomic_ref<const int>(mask_).load(std::memory_order_relaxed); }
  int version() const { return version_; }
  const char* name() const { return name_; }

  // Forwards a start with `parent_theirs` in place of the descriptor's parent (and, for Coll /
  // P2p, `group_theirs` as its parentGroup); returns its handle or nullptr.
  void* Start(void* chain_context, const EventDescrV6& d, void* parent_theirs, void* group_theirs);
  void Stop(void* theirs);
  void Record(void* theirs, EventState state, EventStateArgs* args);

  // A ChainSlot handle holding {ours, theirs}; nullptr when the pool is empty (counted).
  void* Wrap(void* ours, void* theirs);
  // The two halves of a ChainSlot handle; false when `h` is not a live one.
  bool Unwrap(const Handle& h, void** ours, void** theirs) const;
  // Retires a ChainSlot at its stop: it stays readable (as a parent) for `keep_ns`.
  void Retire(const Handle& h, int64_t now_ns);
  // Flush thread: frees retired slots older than keep_ns.
  void Reclaim(int64_t now_ns, int64_t keep_ns);
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct Slot {
    std::atomic<uint32_t> gen{0};
    std::atomic<void*> ours{nullptr};
    std::atomic<void*> theirs{nullptr};
  };
  struct Retired {
    uint32_t index;
    uint32_t gen;
    int64_t at_ns;
  };
  Chain(void* lib, int version, const void* table, uint32_t slots);

  void* lib_;
  const int version_;               // 6, 5 or 4
  const ProfilerV6* v6_ = nullptr;  // v6 and v5 share the shape
  const ProfilerV4* v4_ = nullptr;
  const char* name_ = "";
  int mask_ = 0;  // the chained plugin's activation mask
  const uint32_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  IndexFreeList free_;
  MpmcQueue<Retired> retired_;
  Retired head_{UINT32_MAX, 0, 0};  // flush thread: a popped entry not old enough yet
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace fabricscope::collectors::nccl::internal
