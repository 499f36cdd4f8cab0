// The NCCL profiler plugin's lifetime and communicator contexts (collectors/nccl/plugin.h): its
// pools and flush thread, and the context slots that the init and finalize of the ABI §3
// function table create and free (the hot path is plugin_events.cc; "ABI §N" names the topics
// listed in collectors/nccl/profiler_abi.h).

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "collectors/nccl/plugin.h"

namespace fabricscope::collectors::nccl::internal {

using gpu::CopyFixed;
using gpu::MonotonicNowNs;

namespace {

// Slots constructed at init, and per step of GrowPools after it: a 16th of the pool (at least
// 256), so that init constructs 1.4 MiB of the 21.6 MiB at the defaults; the flush thread
// builds the rest, chunk by chunk, before its first cycle.
uint32_t FirstChunk(uint32_t capacity) {
  return std::min(capacity, std::max<uint32_t>(256, capacity / 16));
}

}  // namespace

Plugin::Plugin(const PluginOptions& options)
    : options_(options),
      pid_(getpid()),
      contexts_(new ContextSlot[kMaxContexts]),
      ops_(options.pool_ops, FirstChunk(options.pool_ops)),
      op_free_(options.pool_ops, FirstChunk(options.pool_ops)),
      proxy_ops_(options.pool_proxy_ops, FirstChunk(options.pool_proxy_ops)),
      proxy_free_(options.pool_proxy_ops, FirstChunk(options.pool_proxy_ops)),
      kernel_ch_(options.pool_kernel_ch, FirstChunk(options.pool_kernel_ch)),
      kernel_ch_free_(options.pool_kernel_ch, FirstChunk(options.pool_kernel_ch)),
      stopped_(options.pool_ops),
      proxy_records_(options.pool_proxy_ops),  // every ProxyOp may stop while a datagram is held
      pending_(new OpRef[options.pool_ops]),
      buffer_(new uint8_t[gpu::kMaxDatagramBytes]),
      writer_(buffer_.get(), gpu::kMaxDatagramBytes, gpu::Source::kNcclProfiler, pid_),
      channel_(gpu::Source::kNcclProfiler, options.socket_path),
      desired_mask_(options.event_mask),
      created_ns_(MonotonicNowNs()) {
  // The job this process claims goes first on every connection (collectors/gpu/job_identity.h).
  channel_.SetJob(gpu::JobOfThisProcess(), pid_);
}

size_t Plugin::MemoryBytes() const {
  return sizeof(*this) + kMaxContexts * sizeof(ContextSlot) +
         options_.pool_ops * (sizeof(OpSlot) + sizeof(OpRef)) + op_free_.memory_bytes() +
         options_.pool_proxy_ops * sizeof(ProxyOpSlot) + proxy_free_.memory_bytes() +
         options_.pool_kernel_ch * sizeof(KernelChSlot) + kernel_ch_free_.memory_bytes() +
         stopped_.memory_bytes() + proxy_records_.memory_bytes() + gpu::kMaxDatagramBytes;
}

void Plugin::GrowPools() {
  stopped_.Prefault();
  proxy_records_.Prefault();
  auto grow = [](auto& pool, auto& free_list) {
    for (;;) {  // chunk by chunk: each chunk's indices are usable as soon as it is built
      const auto [first, last] = pool.Grow(FirstChunk(pool.capacity()));
      for (uint32_t i = first; i < last; ++i) free_list.Push(i);
      if (last == pool.capacity()) return;
    }
  };
  grow(ops_, op_free_);
  grow(proxy_ops_, proxy_free_);
  grow(kernel_ch_, kernel_ch_free_);
  if (logfn_ != nullptr) {
    logfn_(kNcclLogInfo, kNcclLogProfile, __FILE__, __LINE__,
           "fabricscope profiler: pools ready, %lu collectives, %lu proxy ops, %lu kernel "
           "channels in flight, %lu us after init",
           static_cast<uint64_t>(options_.pool_ops), static_cast<uint64_t>(options_.pool_proxy_ops),
           static_cast<uint64_t>(options_.pool_kernel_ch),
           static_cast<uint64_t>((MonotonicNowNs() - created_ns_) / 1000));
  }
}

void Plugin::StartFlushThread() {
  flush_thread_ = std::thread([this] { FlushLoop(); });
}

void Plugin::StopFlushThread() {
  if (!flush_thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  flush_thread_.join();
}

NcclResult Plugin::AddContext(void** context, uint64_t comm_hash, int* mask, const char* name,
                              int nnodes, int nranks, int rank) {
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
    for (auto& done : c.kernels_done_enqueue_ns) done.store(0, std::memory_order_relaxed);
    c.chain_context = nullptr;
    const uint32_t gen = (c.gen.load(std::memory_order_relaxed) + 1) & 0xFFFFFF;
    c.gen.store(gen, std::memory_order_relaxed);
    c.live.store(true, std::memory_order_release);
    c.unsent.store(true, std::memory_order_release);
    *context = reinterpret_cast<void*>(
        static_cast<uintptr_t>(kContextMagic | static_cast<uint64_t>(pid_ & 0xFFFF) << 40 |
                               static_cast<uint64_t>(gen) << 16 | i));
    mask_ptr_.store(mask, std::memory_order_release);
    std::atomic_ref<int>(*mask).store(desired_mask(), std::memory_order_relaxed);
    return kNcclSuccess;
  }
  return kNcclInternalError;  // more than kMaxContexts communicators
}

bool Plugin::RemoveContext(void* context) {
  ContextSlot* c = LookupContext(context, nullptr);
  if (c == nullptr) return false;
  c->live.store(false, std::memory_order_release);
  c->gen.store((c->gen.load(std::memory_order_relaxed) + 1) & 0xFFFFFF, std::memory_order_release);
  finalized_contexts_.store(true, std::memory_order_release);
  cv_.notify_all();
  return true;
}

ContextSlot* Plugin::LookupContext(const void* context, uint32_t* index_out) {
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

}  // namespace fabricscope::collectors::nccl::internal
