#pragma once

// Our own declarations of the NCCL profiler plugin ABI, v6 (NCCL 2.29-2.30), v5 (NCCL 2.28) and v4
// (NCCL 2.27), written from the facts of NCCL's headers (github.com/NVIDIA/nccl tag v2.28.9-1:
// src/include/plugin/profiler/profiler_v5.h and profiler_v4.h, src/include/nccl_common.h; tags
// v2.29.7-1 and v2.30.7-1: src/include/plugin/profiler/profiler_v6.h); the
// sizes and offsets below were measured with a test program compiled against those headers (LP64
// Linux). NCCL installs no plugin headers. Names follow our style; the comments give NCCL's names.
//
// "ABI §N" in the comments of collectors/nccl and tests/common/nccl_harness.h names a topic of
// the plugin ABI, with the NCCL v2.28.9-1 sources it was read from:
//   §1 loading: NCCL_PROFILER_PLUGIN, the exported ncclProfiler_v6/_v5/_v4 symbols (NCCL 2.29+
//      tries v6 first, then v5, v4, ...), dlclose at the last finalize (src/plugin/plugin_open.cc,
//      src/plugin/profiler.cc);
//   §2 basic types and the logger (src/include/nccl_common.h); §3 the function table
//      ncclProfiler_v5_t; §4 the event descriptor ncclProfilerEventDescr_v5_t; §5 event types,
//      states and state arguments (src/include/plugin/profiler/profiler_v5.h);
//   §6 semantics, from where NCCL emits events (src/enqueue.cc, src/group.cc, src/proxy.cc,
//      src/init.cc, src/transport/net.cc, src/device/common.h): §6.1 calling threads, §6.2 call
//      order of one collective, §6.3 the activation mask, §6.4 completion time (Coll stop means
//      enqueued; KernelCh timers or ProxyOp stops give completion), §6.5 parents stopping before
//      children, §6.6 PXN (ProxyOps of another process), §6.7 CUDA graphs, §6.8 errors (only init
//      can fail), §6.9 known 2.28 hazards (never-cleared CollApi and KernelCh slots stopped again,
//      zero or inverted timers: NVIDIA/nccl issues #1961, #1992, #2000, PR #2391);
//   §7 busBw and algBw (NVIDIA/nccl-tests doc/PERFORMANCE.md);
//   §8 testing without a GPU: a harness standing in for NCCL (tests/common/nccl_harness.h);
//      §8.4 its edge cases (PXN, stopped parents, repeated stops, NULL handles, bad timers, mask
//      changes, failing init).

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace fabricscope::collectors::nccl {

// ncclResult_t (public nccl.h, a 4-byte enum).
using NcclResult = int32_t;
inline constexpr NcclResult kNcclSuccess = 0;
inline constexpr NcclResult kNcclSystemError = 2;
inline constexpr NcclResult kNcclInternalError = 3;
inline constexpr NcclResult kNcclInvalidArgument = 4;

// ncclDebugLogger_t: void (*)(ncclDebugLogLevel level, unsigned long flags, const char* file,
// int line, const char* fmt, ...). Levels and subsystem flags: ABI §2.
using NcclDebugLogger = void (*)(int level, unsigned long flags, const char* file, int line,
                                 const char* fmt, ...);
inline constexpr int kNcclLogWarn = 2;
inline constexpr int kNcclLogInfo = 3;
inline constexpr unsigned long kNcclLogProfile = 0x4000;

// Event types (ncclProfileGroup ... ncclProfileKernelLaunch): bits of the activation mask.
enum EventType : uint64_t {
  kEventGroup = 1 << 0,
  kEventColl = 1 << 1,
  kEventP2p = 1 << 2,
  kEventProxyOp = 1 << 3,
  kEventProxyStep = 1 << 4,
  kEventProxyCtrl = 1 << 5,
  kEventKernelCh = 1 << 6,
  kEventNetPlugin = 1 << 7,
  kEventGroupApi = 1 << 8,
  kEventCollApi = 1 << 9,
  kEventP2pApi = 1 << 10,
  kEventKernelLaunch = 1 << 11,
  // ABI v6 (NCCL 2.29.2+, src/include/plugin/nccl_profiler.h): copy-engine (symmetric-memory)
  // collectives, which emit no Coll, ProxyOp or KernelCh events.
  kEventCeColl = 1 << 12,
  kEventCeSync = 1 << 13,
  kEventCeBatch = 1 << 14,
};

// ncclProfilerEventState_v5_t (4-byte enum), ABI §5.
enum EventState : int32_t {
  kStateProxyStepSendGpuWait = 8,
  kStateProxyStepSendWait = 9,
  kStateProxyStepRecvWait = 10,
  kStateProxyStepRecvFlushWait = 11,
  kStateProxyStepRecvGpuWait = 12,
  kStateProxyCtrlIdle = 13,
  kStateProxyCtrlActive = 14,
  kStateProxyCtrlSleep = 15,
  kStateProxyCtrlWakeup = 16,
  kStateProxyCtrlAppend = 17,
  kStateProxyCtrlAppendEnd = 18,
  kStateProxyOpInProgress = 19,
  kStateProxyStepSendPeerWait = 20,
  kStateNetPluginUpdate = 21,
  kStateKernelChStop = 22,
  kStateGroupStartApiStop = 23,
  kStateGroupEndApiStart = 24,
  // 25-30 (CeCollStart ... CeBatchComplete) are declared by v6 but never recorded by NCCL 2.29 /
  // 2.30: CE events get start and stop only (profiler_v6.h, "CE events do not use
  // recordEventState").
};

// ncclProfilerEventDescr_v5_t and _v6_t: 112 bytes, the union at offset 24. v6 (NCCL 2.29.2 to
// 2.30.7, src/include/plugin/profiler/profiler_v6.h) keeps every v5 member at its offset and adds
// ceColl, ceCollSync and ceCollBatch inside the same 88-byte union, so one declaration serves both
// (a v5 NCCL never sends the CE types).
struct EventDescrV5 {
  uint64_t type;     // EventType
  void* parent_obj;  // parentObj
  int rank;          // set for Coll, P2p, ProxyOp, ProxyStep, NetPlugin only
  union {
    struct {
      bool graph_captured;
      int group_depth;
    } group_api;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      int root;
      void* stream;
      bool graph_captured;
    } coll_api;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      void* stream;
      bool graph_captured;
    } p2p_api;
    struct {
      void* stream;
    } kernel_launch;
    struct {
      uint64_t seq_number;
      const char* func;
      const void* send_buff;
      void* recv_buff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t n_channels;
      uint8_t n_warps;
      const char* algo;
      const char* proto;
      void* parent_group;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t n_channels;
      void* parent_group;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channel_id;
      int peer;
      int n_steps;
      int chunk_size;
      int is_send;
    } proxy_op;
    struct {
      int step;
    } proxy_step;
    struct {
      uint8_t channel_id;
      uint64_t p_timer;  // GPU %globaltimer ns when the channel began its work batch
    } kernel_ch;
    struct {
      int64_t id;
      void* data;
    } net_plugin;
    struct {                // v6: CeColl
      uint64_t seq_number;  // comm->ceColl.ceSeqNum: counts CE syncs, not collectives
      const char* func;
      const void* send_buff;
      void* recv_buff;
      size_t count;  // AllGather: bytes with "ncclInt8", as for Coll
      int root;
      const char* datatype;
      const char* sync_strategy;  // "MC" (multicast) or "UC"
      bool intra_batch_sync;
      uint32_t batch_size;
      uint32_t num_batches;
      uint32_t ce_seq_num;
      void* stream;
    } ce_coll;
    struct {  // v6: CeSync
      bool is_complete;
      int nranks;
    } ce_sync;
    struct {  // v6: CeBatch
      int num_ops;
      size_t total_bytes;
      bool use_intra_sync;
    } ce_batch;
  };
};
using EventDescrV6 = EventDescrV5;

// ncclProfilerEventDescr_v4_t: 104 bytes. `type` is one byte (7 padding bytes that may hold
// garbage); no API members; coll/p2p lack parentGroup; other offsets as v5.
struct EventDescrV4 {
  uint8_t type;
  void* parent_obj;
  int rank;
  union {
    struct {
      uint64_t seq_number;
      const char* func;
      const void* send_buff;
      void* recv_buff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t n_channels;
      uint8_t n_warps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t n_channels;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channel_id;
      int peer;
      int n_steps;
      int chunk_size;
      int is_send;
    } proxy_op;
    struct {
      int step;
    } proxy_step;
    struct {
      uint8_t channel_id;
      uint64_t p_timer;
    } kernel_ch;
    struct {
      int64_t id;
      void* data;
    } net_plugin;
  };
};

// ncclProfilerEventStateArgs_v5_t (and _v4_t): an 8-byte union, every member at offset 0.
union EventStateArgs {
  struct {
    size_t trans_size;  // step bytes; valid from state 9 (send) or 11 (recv)
  } proxy_step;
  struct {
    int appended_proxy_ops;
  } proxy_ctrl;
  struct {
    void* data;
  } net_plugin;
  struct {
    uint64_t p_timer;  // GPU end ns (state 22)
  } kernel_ch;
};

// ncclProfiler_v5_t: 48 bytes, ABI §3.
struct ProfilerV5 {
  const char* name;
  NcclResult (*init)(void** context, uint64_t comm_id, int* activation_mask, const char* comm_name,
                     int n_nodes, int nranks, int rank, NcclDebugLogger logfn);
  NcclResult (*start_event)(void* context, void** event_handle, EventDescrV5* descr);
  NcclResult (*stop_event)(void* event_handle);
  NcclResult (*record_event_state)(void* event_handle, EventState state, EventStateArgs* args);
  NcclResult (*finalize)(void* context);
};

// ncclProfiler_v6_t: the v5 shape (48 bytes, the same init), with the v6 descriptor.
using ProfilerV6 = ProfilerV5;

// ncclProfiler_v4_t: same shape; init takes the mask before the name and the hash after it.
struct ProfilerV4 {
  const char* name;
  NcclResult (*init)(void** context, int* activation_mask, const char* comm_name,
                     uint64_t comm_hash, int n_nodes, int nranks, int rank, NcclDebugLogger logfn);
  NcclResult (*start_event)(void* context, void** event_handle, EventDescrV4* descr);
  NcclResult (*stop_event)(void* event_handle);
  NcclResult (*record_event_state)(void* event_handle, EventState state, EventStateArgs* args);
  NcclResult (*finalize)(void* context);
};

// Layout checks: ABI §3-5, the values measured against the v2.28.9-1 headers.
static_assert(sizeof(EventDescrV5) == 112 && alignof(EventDescrV5) == 8);
static_assert(offsetof(EventDescrV5, parent_obj) == 8 && offsetof(EventDescrV5, rank) == 16);
static_assert(offsetof(EventDescrV5, group_api.graph_captured) == 24);
static_assert(offsetof(EventDescrV5, group_api.group_depth) == 28);
static_assert(offsetof(EventDescrV5, coll_api.func) == 24);
static_assert(offsetof(EventDescrV5, coll_api.count) == 32);
static_assert(offsetof(EventDescrV5, coll_api.datatype) == 40);
static_assert(offsetof(EventDescrV5, coll_api.root) == 48);
static_assert(offsetof(EventDescrV5, coll_api.stream) == 56);
static_assert(offsetof(EventDescrV5, coll_api.graph_captured) == 64);
static_assert(offsetof(EventDescrV5, p2p_api.count) == 32);
static_assert(offsetof(EventDescrV5, p2p_api.datatype) == 40);
static_assert(offsetof(EventDescrV5, p2p_api.stream) == 48);
static_assert(offsetof(EventDescrV5, p2p_api.graph_captured) == 56);
static_assert(offsetof(EventDescrV5, kernel_launch.stream) == 24);
static_assert(offsetof(EventDescrV5, coll.seq_number) == 24);
static_assert(offsetof(EventDescrV5, coll.func) == 32);
static_assert(offsetof(EventDescrV5, coll.send_buff) == 40);
static_assert(offsetof(EventDescrV5, coll.recv_buff) == 48);
static_assert(offsetof(EventDescrV5, coll.count) == 56);
static_assert(offsetof(EventDescrV5, coll.root) == 64);
static_assert(offsetof(EventDescrV5, coll.datatype) == 72);
static_assert(offsetof(EventDescrV5, coll.n_channels) == 80);
static_assert(offsetof(EventDescrV5, coll.n_warps) == 81);
static_assert(offsetof(EventDescrV5, coll.algo) == 88);
static_assert(offsetof(EventDescrV5, coll.proto) == 96);
static_assert(offsetof(EventDescrV5, coll.parent_group) == 104);
static_assert(offsetof(EventDescrV5, p2p.func) == 24);
static_assert(offsetof(EventDescrV5, p2p.buff) == 32);
static_assert(offsetof(EventDescrV5, p2p.datatype) == 40);
static_assert(offsetof(EventDescrV5, p2p.count) == 48);
static_assert(offsetof(EventDescrV5, p2p.peer) == 56);
static_assert(offsetof(EventDescrV5, p2p.n_channels) == 60);
static_assert(offsetof(EventDescrV5, p2p.parent_group) == 64);
static_assert(offsetof(EventDescrV5, proxy_op.pid) == 24 && sizeof(pid_t) == 4);
static_assert(offsetof(EventDescrV5, proxy_op.channel_id) == 28);
static_assert(offsetof(EventDescrV5, proxy_op.peer) == 32);
static_assert(offsetof(EventDescrV5, proxy_op.n_steps) == 36);
static_assert(offsetof(EventDescrV5, proxy_op.chunk_size) == 40);
static_assert(offsetof(EventDescrV5, proxy_op.is_send) == 44);
static_assert(offsetof(EventDescrV5, proxy_step.step) == 24);
static_assert(offsetof(EventDescrV5, kernel_ch.channel_id) == 24);
static_assert(offsetof(EventDescrV5, kernel_ch.p_timer) == 32);
static_assert(offsetof(EventDescrV5, net_plugin.id) == 24);
static_assert(offsetof(EventDescrV5, net_plugin.data) == 32);
// v6 additions (profiler_v6.h at v2.29.7-1 and v2.30.7-1, measured the same way).
static_assert(offsetof(EventDescrV6, ce_coll.seq_number) == 24);
static_assert(offsetof(EventDescrV6, ce_coll.func) == 32);
static_assert(offsetof(EventDescrV6, ce_coll.send_buff) == 40);
static_assert(offsetof(EventDescrV6, ce_coll.recv_buff) == 48);
static_assert(offsetof(EventDescrV6, ce_coll.count) == 56);
static_assert(offsetof(EventDescrV6, ce_coll.root) == 64);
static_assert(offsetof(EventDescrV6, ce_coll.datatype) == 72);
static_assert(offsetof(EventDescrV6, ce_coll.sync_strategy) == 80);
static_assert(offsetof(EventDescrV6, ce_coll.intra_batch_sync) == 88);
static_assert(offsetof(EventDescrV6, ce_coll.batch_size) == 92);
static_assert(offsetof(EventDescrV6, ce_coll.num_batches) == 96);
static_assert(offsetof(EventDescrV6, ce_coll.ce_seq_num) == 100);
static_assert(offsetof(EventDescrV6, ce_coll.stream) == 104);
static_assert(offsetof(EventDescrV6, ce_sync.is_complete) == 24);
static_assert(offsetof(EventDescrV6, ce_sync.nranks) == 28);
static_assert(offsetof(EventDescrV6, ce_batch.num_ops) == 24);
static_assert(offsetof(EventDescrV6, ce_batch.total_bytes) == 32);
static_assert(offsetof(EventDescrV6, ce_batch.use_intra_sync) == 40);

static_assert(sizeof(EventDescrV4) == 104 && alignof(EventDescrV4) == 8);
static_assert(offsetof(EventDescrV4, parent_obj) == 8 && offsetof(EventDescrV4, rank) == 16);
static_assert(offsetof(EventDescrV4, coll.seq_number) == 24);
static_assert(offsetof(EventDescrV4, coll.count) == 56);
static_assert(offsetof(EventDescrV4, coll.datatype) == 72);
static_assert(offsetof(EventDescrV4, coll.algo) == 88);
static_assert(offsetof(EventDescrV4, coll.proto) == 96);
static_assert(offsetof(EventDescrV4, p2p.peer) == 56);
static_assert(offsetof(EventDescrV4, p2p.n_channels) == 60);
static_assert(offsetof(EventDescrV4, proxy_op.is_send) == 44);
static_assert(offsetof(EventDescrV4, kernel_ch.p_timer) == 32);

static_assert(sizeof(EventStateArgs) == 8);
static_assert(sizeof(EventState) == 4);
static_assert(sizeof(ProfilerV5) == 48 && offsetof(ProfilerV5, init) == 8);
static_assert(offsetof(ProfilerV5, start_event) == 16 && offsetof(ProfilerV5, stop_event) == 24);
static_assert(offsetof(ProfilerV5, record_event_state) == 32);
static_assert(offsetof(ProfilerV5, finalize) == 40);
static_assert(sizeof(ProfilerV4) == 48 && offsetof(ProfilerV4, finalize) == 40);

}  // namespace fabricscope::collectors::nccl
