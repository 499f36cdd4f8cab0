#pragma once

// The NCCL profiler plugin's core: the functions of the ncclProfiler_v6 / _v5 / _v4 tables
// (collectors/nccl/plugin_exports.cc exports them as libnccl-profiler-fabricscope.so).
//
// What it records ("ABI §N": the topics and their NCCL sources listed in profiler_abi.h):
// - one CollectiveRecord per Coll, P2p or CeColl event: identity (comm hash, func, seq), sizes,
//   algorithm, protocol, channels, enqueue interval (CPU start/stop of the event), and the work
//   interval from the kernel-channel timers (GPU %globaltimer fitted to CLOCK_MONOTONIC), else
//   from the ProxyOp start/stop times, else the enqueue interval; copy-engine collectives carry
//   their CeColl interval; timing_source says which (ABI §6.4). Children attach in any order
//   NCCL produces (ABI §6.2): before or after the Coll's stop, after their siblings stopped;
//   collectors/nccl/plugin_flush.cc (Plugin::Complete) says when a record is closed;
// - one ProxyOpRecord per ProxyOp: peer, direction, channel, steps and bytes (sum of ProxyStep
//   transSize at states 9/11, so bytes need the ProxyStep bit), times, creating pid (PXN);
// - one CommRecord per communicator init, re-sent after every reconnect to the agent.
//
// Threads: the table functions are called by NCCL from any thread, concurrently (ABI §6.1).
// startEvent/stopEvent/recordEventState never lock, allocate, block or make system calls
// (clock_gettime is a vDSO call): events live in fixed pools allocated at the first init, handles
// are (magic, kind, generation, index) words that are validated before use, so stale, repeated,
// foreign (PXN) or NULL handles are ignored. A flush thread (started at the first init, joined at
// the last finalize) closes completed records, batches them into datagrams (collectors/gpu/wire.h)
// and sends them with ProducerChannel; a full pool or queue, or a failed send, drops records and
// counts them in DatagramHeader::dropped_records_total. Only init returns an error.
//
// Chaining (collectors/nccl/chain.h): with FABRICSCOPE_NCCL_CHAIN=/path/other.so, every call is
// also forwarded to that plugin, with its own contexts and handles.

#include <cstddef>
#include <cstdint>
#include <string>

#include "collectors/nccl/profiler_abi.h"

namespace fabricscope::collectors::nccl {

// Default activation mask: Coll | ProxyOp | KernelCh = 2|8|64 = 74, the events whose evidence
// the diagnosis uses (collectors/nccl/README.md "What each event costs and gives"): the Coll's
// identity and bytes, the ProxyOps' peers, channels and (estimated, proxy_bytes.h) bytes, the
// KernelCh GPU times. ProxyStep (16) is the deep dive's: exact wire bytes per op, at one start,
// three state records and one stop per transfer on NCCL's proxy thread; switch it on at run
// time with the mask file (90), without restarting the job.
inline constexpr int kDefaultEventMask = kEventColl | kEventProxyOp | kEventKernelCh;

// Environment variables (read at the first init).
inline constexpr char kEventMaskEnv[] = "FABRICSCOPE_NCCL_EVENT_MASK";  // decimal or 0x hex
inline constexpr char kMaskFileEnv[] = "FABRICSCOPE_NCCL_MASK_FILE";
inline constexpr char kDefaultMaskFile[] = "/run/fabricscope/nccl-mask";
inline constexpr char kPoolEnv[] = "FABRICSCOPE_NCCL_POOL_EVENTS";  // collectives in flight
inline constexpr char kChainEnv[] = "FABRICSCOPE_NCCL_CHAIN";       // path of a plugin to chain
// PluginOptions::linger_ns in ms (1..60000): how long a stopped collective without an expected
// KernelCh waits for its ProxyOps. NCCL's proxy thread starts a ProxyOp whenever it gets to it
// (src/proxy.cc ncclProxyOpToArgs), after the Coll stopped; one started later than this is not
// attached to its collective.
inline constexpr char kLingerEnv[] = "FABRICSCOPE_NCCL_LINGER_MS";
// "1": send each operation's per-channel kernel spans (PluginOptions::channel_spans).
inline constexpr char kChannelSpansEnv[] = "FABRICSCOPE_NCCL_CHANNEL_SPANS";

struct PluginOptions {
  int event_mask = kDefaultEventMask;
  std::string socket_path;  // ResolveSocketPath()
  std::string mask_file = kDefaultMaskFile;
  std::string chain_path;  // FABRICSCOPE_NCCL_CHAIN: another profiler plugin to forward to
  // Pools, allocated once at the first init. A Coll/P2p holds its slot from its start until the
  // flush thread closes it (normally within one flush period of its last KernelCh stop), so
  // pool_ops is the number of collectives in flight: 16,384 covers a burst of 10,000 enqueued
  // before the GPU runs any. collectors/nccl/README.md "NCCL profiler plugin" gives the memory.
  uint32_t pool_ops = 16384;
  uint32_t pool_proxy_ops = 4 * 16384;  // ProxyOps in flight (one per channel, peer, direction)
  uint32_t pool_kernel_ch = 16384;      // KernelCh events in flight
  int64_t flush_period_ns = 5'000'000;  // flush thread cycle
  // Closing (plugin_flush.cc Plugin::Complete): at once when every expected KernelCh stopped and
  // no child is open; open_child_wait_ns without a step when a child stays open after that (NCCL
  // never stops non-NET ProxyOps); linger_ns of quiet when no KernelCh is expected; max_wait_ns
  // while a KernelCh is still due (the kernel may queue behind compute, a channel may lag),
  // unless a later Coll of the communicator completed its kernel (then linger_ns).
  int64_t linger_ns = 100'000'000;
  int64_t open_child_wait_ns = 1'000'000'000;  // kernel done, a ProxyOp without steps this long
  int64_t max_wait_ns = 10'000'000'000;
  int64_t mask_check_period_ns = 1'000'000'000;
  int64_t offset_window_ns = 10'000'000'000;  // GPU->CPU offset: min over the last 1-2 windows
  // Per-channel kernel spans (gpu::ChannelSpansRecord), for the timeline's deep dive: a stopped
  // KernelCh's slot is linked to its operation instead of freed (one compare-and-swap on the
  // proxy thread, where the free list's push was), and the flush thread sends its GPU times
  // with the operation and frees it. Off by default: 24 bytes per channel per operation on the
  // wire and in the agent's batches (an all-reduce on 32 channels: 8 records, 1.1 KB), and the
  // KernelCh slots stay held until their operation closes (one flush period; longer while the
  // agent's socket is full): at most half the pool, past which spans are dropped and counted
  // (PluginStats::channel_spans_dropped), so that kernels keep their slots.
  bool channel_spans = false;

  // Defaults overridden by the environment: FABRICSCOPE_NCCL_EVENT_MASK,
  // FABRICSCOPE_NCCL_MASK_FILE, FABRICSCOPE_NCCL_POOL_EVENTS (scales all three pools),
  // FABRICSCOPE_NCCL_CHAIN, FABRICSCOPE_NCCL_LINGER_MS, FABRICSCOPE_NCCL_CHANNEL_SPANS,
  // FABRICSCOPE_GPU_SOCKET (wire.h).
  static PluginOptions FromEnvironment();
};

// Counters of the live plugin (all zero when no communicator is initialized).
struct PluginStats {
  uint64_t records_emitted = 0;  // Collective, ProxyOp, ChannelSpans records put in datagrams
  uint64_t records_sent = 0;     // of those, in datagrams the kernel accepted
  uint64_t dropped = 0;          // records dropped (full pool/queue, failed send)
  uint64_t datagrams_sent = 0;
  uint64_t connects = 0;
  uint64_t expired_proxy_ops = 0;     // ProxyOps NCCL never stopped, closed after max_wait_ns
  uint64_t closed_by_timing[4] = {};  // Collective records per gpu::TimingSource
  uint64_t chain_dropped = 0;         // events not forwarded to the chained plugin (pool full)
  // Channel spans not sent: half the KernelCh pool already held by spans of open ops, or the op
  // closed before its channel stopped (PluginOptions::channel_spans).
  uint64_t channel_spans_dropped = 0;
  size_t pool_bytes = 0;  // memory of pools, queues and buffers allocated at the first init
  int contexts = 0;
  bool chained = false;  // a chained plugin is loaded and initialized
};

// The table functions, v5/v6 shapes (ABI §3; v6 has the same shapes with the v6 descriptor,
// which adds the copy-engine events CeColl, CeSync, CeBatch). Exposed for the benchmark, which
// links the core statically and calls them through a function table like NCCL does.
NcclResult Init(void** context, uint64_t comm_hash, int* activation_mask, const char* comm_name,
                int n_nodes, int nranks, int rank, NcclDebugLogger logfn);
NcclResult StartEvent(void* context, void** event_handle, EventDescrV5* descr);
NcclResult StopEvent(void* event_handle);
NcclResult RecordEventState(void* event_handle, EventState state, EventStateArgs* args);
NcclResult Finalize(void* context);
// v4 adapters (ABI §3-4).
NcclResult InitV4(void** context, int* activation_mask, const char* comm_name, uint64_t comm_hash,
                  int n_nodes, int nranks, int rank, NcclDebugLogger logfn);
NcclResult StartEventV4(void* context, void** event_handle, EventDescrV4* descr);
// The v5 startEvent: as StartEvent, but a v5 NCCL never sends CE events and their bits are not
// ours to ask for, so CE types are ignored as NCCL 2.29's v5 adapter does.
NcclResult StartEventV5(void* context, void** event_handle, EventDescrV5* descr);

// Sets the options the next first init uses instead of FromEnvironment() (tests, benchmark).
// Call only while no communicator is initialized.
void SetOptionsForTesting(const PluginOptions& options);
PluginStats CurrentStats();

// Bytes per element of an NCCL datatype name as the profiler reports it ("ncclFloat32", ...;
// "Unknown" is what NCCL 2.28.9 reports for ncclUint8, ABI §4); 0 when unknown.
size_t DatatypeSize(const char* datatype);

}  // namespace fabricscope::collectors::nccl
