#pragma once

// The lanes of plugin calls NCCL 2.28.9's proxy progress thread makes for one posted collective
// (tests/common/nccl_proxy_engine.h cites the sources of each ordering). Part of FakeNccl
// (tests/common/nccl_harness.h); the types below are its CollSpec and Expected.

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "collectors/nccl/profiler_abi.h"
#include "collectors/nccl/proxy_bytes.h"
#include "tests/common/nccl_proxy_engine.h"

namespace fabricscope::testing {

namespace nccl_abi = ::fabricscope::collectors::nccl;

// CLOCK_MONOTONIC ns, the plugin's and the agent's time base.
inline int64_t HarnessNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// GPU %globaltimer = CPU CLOCK_MONOTONIC + kGpuClockOffsetNs in the synthetic timers; each
// channel "began" kStartLagNs before the proxy reports it and "ended" kEndLagNs before.
inline constexpr int64_t kGpuClockOffsetNs = 1'700'000'000'000'000'000;
inline constexpr int64_t kStartLagNs = 3000;
inline constexpr int64_t kEndLagNs = 1000;

// A proxy operation of one collective: one peer, one direction, one channel.
struct ProxyWork {
  int peer = 1;
  bool is_send = true;
  uint8_t channel = 0;
  std::vector<size_t> step_bytes;  // transSize per step
  bool pxn = false;                // created by another process: pid and pointers foreign
  // The descriptor's chunkSize: NCCL's args->chunkSize * sliceSteps
  // (src/plugin/profiler.cc ncclProfilerStartProxyOpEvent), which for ring SIMPLE is
  // chunkSteps (4) times what one step moves (collectors/nccl/proxy_bytes.h).
  int32_t chunk_size = 131072;
};
// One kernel channel's timers. kMissing: NCCL never reports this channel.
enum class TimerKind { kValid, kZeroStart, kEndBeforeStart, kMissing };
struct KernelWork {
  uint8_t channel = 0;
  TimerKind timers = TimerKind::kValid;
};
struct CollSpec {
  const char* func = "AllReduce";
  bool p2p = false;
  size_t count = 1024;
  const char* datatype = "ncclFloat32";
  int root = 0;
  int peer = -1;  // P2p
  const char* algo = "RING";
  const char* proto = "SIMPLE";
  bool graph_captured = false;
  std::vector<ProxyWork> proxy;
  std::vector<KernelWork> kernels;  // one per channel: nChannels = kernels.size() (>= 1)
  // A caller that really runs the collective reports its times here; the KernelCh start waits
  // for started_ns, the steps and the KernelCh stop for ended_ns (as NCCL's proxy waits for
  // the GPU's counters). nullptr: synthetic times.
  std::shared_ptr<GpuGate> gate;
};

// What the plugin should report for one operation; read after FakeNccl::Drain().
struct Expected {
  bool coll_emitted = false;  // a Coll/P2p event was started (else no record is due)
  uint64_t comm_hash = 0;
  uint64_t seq = 0;
  int rank = 0;
  int nranks = 0;
  CollSpec spec;
  int64_t enqueue_start_lo = 0, enqueue_start_hi = 0, enqueue_end_lo = 0, enqueue_end_hi = 0;
  // Valid kernel timers (GPU domain), INT64_MAX / 0 when none.
  int64_t gpu_start_min = INT64_MAX, gpu_end_max = 0;
  // Attached (own-process) proxy ops.
  uint32_t proxy_ops = 0;
  uint64_t proxy_bytes = 0;
  int64_t proxy_start_lo = INT64_MAX, proxy_start_hi = INT64_MAX;
  int64_t proxy_end_lo = 0, proxy_end_hi = 0;
  // Its attached ProxyOps were untimed (Plugin::ProxyOpsTimed): the proxy_op fallback then runs
  // from the Coll's stop to the KernelCh stop that completed its channels, issued within
  // [kernel_done_lo, kernel_done_hi] (0: no such stop reached the plugin).
  bool proxy_untimed = false;
  int kernel_stops = 0;
  int64_t kernel_done_lo = 0, kernel_done_hi = 0;
  bool steps_emitted = false;
  bool kernel_after_proxy = false;  // this schedule ran every KernelCh after every ProxyOp stop
  bool child_before_stop = false;   // a child started before the Coll's stop
  std::string kernel_log;           // per KernelCh: channel, handle, GPU start and end (failures)
  // Valid KernelCh timers by channel: GPU start and end (the plugin's channel spans).
  std::map<int, std::pair<int64_t, int64_t>> channel_gpu;
};
struct ExpectedProxyOp {
  uint64_t comm_hash = 0;  // 0 for PXN
  uint64_t op_seq = UINT64_MAX;
  int rank = 0, peer = 0, pid = 0;
  uint8_t channel = 0, is_send = 0;
  int32_t steps = 0;
  uint64_t bytes = 0;
  int32_t chunk_size = 0;
  bool estimated = false;  // no ProxyStep events: bytes and steps from the descriptor
  bool untimed = false;    // KernelCh times its collective and no ProxyStep: times 0
  std::string func;
  int64_t start_lo = 0, start_hi = 0, end_lo = 0, end_hi = 0;
};

// The per-channel order of KernelCh on one communicator: the profiler connection of a channel
// (one per side: Recv uses the recv connection, everything else the send one,
// src/proxy.cc SaveProxyProfiler:551) is not shared, so a later op's profiler op is chained as
// nextPeer and only activated after the earlier one is removed (proxy.cc:440-447, 727-736):
// on one (side, channel), KernelCh(A) start < A stop < KernelCh(B) start < B stop.
// Used on the proxy side only (AddProxyLanes runs there, in post order): a KernelCh lane enters
// the engine when its turn comes.
struct ChannelOrder {
  uint64_t next[2][64] = {};
  uint64_t served[2][64] = {};
  std::map<uint64_t, ProxyEngine::Lane> waiting[2][64];
};

// Everything the lanes of one posted collective share.
struct ProxyJob {
  const nccl_abi::ProfilerV5* table;  // v6/v5 shape (v4 is adapted by FakeNccl)
  void* context;
  uint64_t comm_hash;
  int rank;
  void* coll_handle;
  int mask;
  std::shared_ptr<Expected> expected;
  std::atomic<bool>* coll_stopped;  // set by the user thread after the Coll's stop
  std::mutex* mu;                   // guards *issued and *done_ops
  uint64_t* issued;
  std::vector<ExpectedProxyOp>* done_ops;
  // Filled by the lanes.
  struct Op {
    void* handle = nullptr;
    ExpectedProxyOp x;
    bool started = false, done = false;
    void* last_step = nullptr;
  };
  std::vector<Op> ops;
  bool kernel_waits_for_proxy = false;  // schedule choice: KernelCh after all ProxyOps stopped
  std::shared_ptr<ChannelOrder> order;  // of this communicator
};

inline int KernelSide(const CollSpec& s) { return s.p2p && s.func[0] == 'R' ? 1 : 0; }

inline void* LaneStart(const ProxyJob& j, void* ctx, nccl_abi::EventDescrV5& d) {
  void* h = reinterpret_cast<void*>(0x2);  // NCCL's slot may hold anything before the call
  j.table->start_event(ctx, &h, &d);
  return h;
}

inline void LaneStartProxyOp(ProxyJob& j, size_t i) {
  using namespace nccl_abi;
  const ProxyWork& p = j.expected->spec.proxy[i];
  ProxyJob::Op& o = j.ops[i];
  EventDescrV5 d{};
  d.type = kEventProxyOp;
  d.rank = j.rank;
  d.proxy_op.pid = p.pxn ? getpid() + 100000 : getpid();
  d.proxy_op.channel_id = p.channel;
  d.proxy_op.peer = p.peer;
  d.proxy_op.n_steps = static_cast<int>(p.step_bytes.size());
  d.proxy_op.chunk_size = p.chunk_size;
  d.proxy_op.is_send = p.is_send ? 1 : 0;
  // PXN: another process's parent and context; dereferencing them would crash (ABI §6.6).
  d.parent_obj = p.pxn ? reinterpret_cast<void*>(0xdead0000beef0000) : j.coll_handle;
  void* ctx = p.pxn ? reinterpret_cast<void*>(0xFC00ABCD00010001) : j.context;
  if (!j.coll_stopped->load(std::memory_order_acquire)) j.expected->child_before_stop = true;
  o.x.start_lo = HarnessNowNs();
  o.handle = LaneStart(j, ctx, d);
  o.x.start_hi = HarnessNowNs();
  // The plugin reads the mask NCCL posted this op under (the same int, ABI §3).
  o.x.untimed = (j.mask & kEventKernelCh) != 0 && (j.mask & kEventProxyStep) == 0;
  if (o.x.untimed) o.x.start_lo = o.x.start_hi = 0;
  EventStateArgs a{};
  j.table->record_event_state(o.handle, kStateProxyOpInProgress, &a);
  const bool live = j.context != nullptr && j.coll_handle != nullptr;
  o.x.comm_hash = p.pxn ? 0 : j.comm_hash;
  o.x.op_seq = p.pxn || !live ? UINT64_MAX : j.expected->seq;
  o.x.rank = j.rank;
  o.x.peer = p.peer;
  o.x.pid = d.proxy_op.pid;
  o.x.channel = p.channel;
  o.x.is_send = p.is_send ? 1 : 0;
  o.x.chunk_size = p.chunk_size;
  o.x.func = p.pxn || !live ? "" : j.expected->spec.func;
  o.started = true;
  // A NULL handle here means a full pool: dropped by the plugin, issued for the harness.
  if (p.pxn || j.context != nullptr) {
    std::lock_guard<std::mutex> lock(*j.mu);
    ++*j.issued;
  }
}

inline void LaneStep(ProxyJob& j, size_t i, size_t k) {
  using namespace nccl_abi;
  const ProxyWork& p = j.expected->spec.proxy[i];
  ProxyJob::Op& o = j.ops[i];
  EventDescrV5 d{};
  d.type = kEventProxyStep;
  d.parent_obj = o.handle;
  d.rank = j.rank;
  d.proxy_step.step = static_cast<int>(k);
  void* h = LaneStart(j, p.pxn ? reinterpret_cast<void*>(0xFC00ABCD00010001) : j.context, d);
  EventStateArgs a{};
  a.proxy_step.trans_size = k > 0 ? p.step_bytes[k - 1] : 0;  // before 9/11: previous size
  if (p.is_send) {
    j.table->record_event_state(h, kStateProxyStepSendGpuWait, &a);
    j.table->record_event_state(h, kStateProxyStepSendPeerWait, &a);
    a.proxy_step.trans_size = p.step_bytes[k];
    j.table->record_event_state(h, kStateProxyStepSendWait, &a);
  } else {
    j.table->record_event_state(h, kStateProxyStepRecvWait, &a);
    a.proxy_step.trans_size = p.step_bytes[k];
    j.table->record_event_state(h, kStateProxyStepRecvFlushWait, &a);
    j.table->record_event_state(h, kStateProxyStepRecvGpuWait, &a);
  }
  j.table->stop_event(h);
  if (o.handle != nullptr) {
    o.x.bytes += p.step_bytes[k];
    ++o.x.steps;
  }
  o.last_step = h;
}

// Without ProxyStep events the plugin reports the descriptor's step count and its estimate of
// the bytes (collectors/nccl/proxy_bytes.h, tested against NCCL's chunking on its own); here
// the harness checks that each op gets it with its own collective's fields, or none (PXN).
inline void ExpectEstimate(const Expected& e, const ProxyWork& p, bool attached,
                           ExpectedProxyOp& x) {
  if (!attached) return;  // PXN, or no collective: bytes unknown, no estimate (proxy_bytes.h)
  const CollSpec& s = e.spec;
  // Bytes per element of NCCL's type names (src/misc/... ncclTypeSize; ABI §4).
  const std::string t = s.datatype != nullptr ? s.datatype : "";
  size_t type_size = 4;
  if (t == "ncclInt8" || t == "ncclUint8" || t == "ncclChar" || t == "Unknown" ||
      t.rfind("ncclFloat8", 0) == 0) {
    type_size = 1;
  } else if (t.find("16") != std::string::npos || t == "ncclHalf") {
    type_size = 2;
  } else if (t.find("64") != std::string::npos || t == "ncclDouble") {
    type_size = 8;
  }
  collectors::nccl::ProxyOpParent parent;
  parent.func = s.func;
  parent.algo = s.algo;
  parent.proto = s.proto;
  parent.bytes = s.count * type_size;
  parent.nranks = e.nranks;
  parent.nchannels = static_cast<int32_t>(std::max<size_t>(1, s.kernels.size()));  // as posted
  parent.p2p = s.p2p;
  x.steps = static_cast<int32_t>(p.step_bytes.size());
  x.bytes = collectors::nccl::EstimateProxyOpBytes(x.steps, p.chunk_size, &parent);
  x.estimated = true;
}

// ProxyOp stops: every sub of one args (same peer and direction here) stops once all are done
// (src/transport/net.cc:1362-1365, 1632-1636).
inline void LaneFinishProxyOp(ProxyJob& j, size_t i) {
  using namespace nccl_abi;
  const std::vector<ProxyWork>& works = j.expected->spec.proxy;
  j.ops[i].done = true;
  for (size_t m = 0; m < works.size(); ++m) {
    const bool same_args = works[m].peer == works[i].peer && works[m].is_send == works[i].is_send;
    if (same_args && !j.ops[m].done) return;
  }
  const bool live = j.context != nullptr && j.coll_handle != nullptr;
  Expected& e = *j.expected;
  for (size_t m = 0; m < works.size(); ++m) {
    const ProxyWork& p = works[m];
    if (p.peer != works[i].peer || p.is_send != works[i].is_send) continue;
    ProxyJob::Op& o = j.ops[m];
    o.x.end_lo = o.x.untimed ? 0 : HarnessNowNs();
    j.table->stop_event(o.handle);
    o.x.end_hi = o.x.untimed ? 0 : HarnessNowNs();
    j.table->stop_event(o.handle);  // repeated stop: ignored
    // A state update after stop: must not add bytes.
    EventStateArgs a{};
    a.proxy_step.trans_size = 1 << 30;
    j.table->record_event_state(
        o.last_step, p.is_send ? kStateProxyStepSendWait : kStateProxyStepRecvFlushWait, &a);
    if (!e.steps_emitted && o.handle != nullptr) ExpectEstimate(e, p, !p.pxn && live, o.x);
    if (!p.pxn && live && o.handle != nullptr && o.x.untimed) {
      ++e.proxy_ops;
      e.proxy_bytes += o.x.bytes;
      e.proxy_untimed = true;
    } else if (!p.pxn && live && o.handle != nullptr) {
      ++e.proxy_ops;
      e.proxy_bytes += o.x.bytes;
      e.proxy_start_lo = std::min(e.proxy_start_lo, o.x.start_lo);
      e.proxy_start_hi = std::min(e.proxy_start_hi, o.x.start_hi);
      e.proxy_end_lo = std::max(e.proxy_end_lo, o.x.end_lo);
      e.proxy_end_hi = std::max(e.proxy_end_hi, o.x.end_hi);
    }
    if (o.handle != nullptr) {
      std::lock_guard<std::mutex> lock(*j.mu);
      j.done_ops->push_back(o.x);
    }
  }
}

// KernelCh of one channel: start (descriptor pTimer), later state 22 (end pTimer) + stop, then
// NCCL's recycled-slot hazard: 22 + stop again on the stopped handle (ABI §6.9).
struct KernelLane {
  void* handle = nullptr;
  int64_t gpu_start = 0;
};

inline void LaneKernelStart(ProxyJob& j, const KernelWork& k, KernelLane& kl) {
  using namespace nccl_abi;
  const GpuGate* gate = j.expected->spec.gate.get();
  EventDescrV5 d{};
  d.type = kEventKernelCh;
  d.parent_obj = j.coll_handle;
  d.rank = 0;  // NCCL leaves rank 0 for KernelCh (ABI §4)
  d.kernel_ch.channel_id = k.channel;
  const int64_t cpu_start = gate != nullptr ? gate->started_ns.load(std::memory_order_acquire)
                                            : HarnessNowNs() - kStartLagNs;
  kl.gpu_start = k.timers == TimerKind::kZeroStart ? 0 : cpu_start + kGpuClockOffsetNs;
  d.kernel_ch.p_timer = static_cast<uint64_t>(kl.gpu_start);
  if (!j.coll_stopped->load(std::memory_order_acquire)) j.expected->child_before_stop = true;
  kl.handle = LaneStart(j, j.context, d);
}

inline void LaneKernelStop(ProxyJob& j, const KernelWork& k, KernelLane& kl) {
  using namespace nccl_abi;
  const GpuGate* gate = j.expected->spec.gate.get();
  Expected& e = *j.expected;
  const int64_t cpu_end =
      gate != nullptr ? gate->ended_ns.load(std::memory_order_acquire) : HarnessNowNs() - kEndLagNs;
  int64_t gpu_end = cpu_end + kGpuClockOffsetNs;
  if (k.timers == TimerKind::kEndBeforeStart) gpu_end = kl.gpu_start - 500;
  EventStateArgs args{};
  args.kernel_ch.p_timer = static_cast<uint64_t>(gpu_end);
  j.table->record_event_state(kl.handle, kStateKernelChStop, &args);
  const int64_t stop_lo = HarnessNowNs();
  j.table->stop_event(kl.handle);
  // The stop that completes the collective's channels (each KernelCh one; the Coll announced
  // one per KernelWork) is when the plugin sees its kernel done (Plugin::StopKernelCh).
  if (kl.handle != nullptr &&
      ++e.kernel_stops == static_cast<int>(std::max<size_t>(1, e.spec.kernels.size()))) {
    e.kernel_done_lo = stop_lo;
    e.kernel_done_hi = HarnessNowNs();
  }
  if (k.timers == TimerKind::kValid && kl.handle != nullptr) {
    e.gpu_start_min = std::min(e.gpu_start_min, kl.gpu_start);
    e.gpu_end_max = std::max(e.gpu_end_max, gpu_end);
    e.channel_gpu[k.channel] = {kl.gpu_start, gpu_end};
  }
  e.kernel_log += " ch" + std::to_string(k.channel) + " " +
                  std::to_string(reinterpret_cast<uintptr_t>(kl.handle)) + " [" +
                  std::to_string(kl.gpu_start - kGpuClockOffsetNs) + ", " +
                  std::to_string(gpu_end - kGpuClockOffsetNs) + "]";
  EventStateArgs late{};
  late.kernel_ch.p_timer = static_cast<uint64_t>(gpu_end + 1'000'000'000);
  j.table->record_event_state(kl.handle, kStateKernelChStop, &late);
  j.table->stop_event(kl.handle);
}

// ProxyCtrl around the append of this job's ops (src/proxy.cc ncclProxyGetPostedOps:795-855).
inline void LaneProxyCtrl(const ProxyJob& j) {
  using namespace nccl_abi;
  EventDescrV5 d{};
  d.type = kEventProxyCtrl;
  void* h = LaneStart(j, j.context, d);
  EventStateArgs a{};
  for (EventState st : {kStateProxyCtrlSleep, kStateProxyCtrlWakeup, kStateProxyCtrlAppend}) {
    j.table->record_event_state(h, st, &a);
  }
  a.proxy_ctrl.appended_proxy_ops = static_cast<int>(j.expected->spec.proxy.size());
  j.table->record_event_state(h, kStateProxyCtrlAppendEnd, &a);
  j.table->record_event_state(h, kStateProxyCtrlIdle, &a);
  j.table->record_event_state(h, kStateProxyCtrlActive, &a);
  j.table->stop_event(h);
}

// Builds the lanes of one posted collective into `engine`.
inline void AddProxyLanes(std::shared_ptr<ProxyJob> job, ProxyEngine& engine) {
  using namespace nccl_abi;
  const CollSpec& s = job->expected->spec;
  const int m = job->mask;
  const bool emit_op = (m & (kEventProxyOp | kEventProxyStep | kEventNetPlugin)) != 0;
  const bool emit_step = (m & (kEventProxyStep | kEventNetPlugin)) != 0;
  const bool emit_kch = (m & kEventKernelCh) != 0;
  job->expected->steps_emitted = emit_step;
  job->ops.resize(s.proxy.size());
  job->kernel_waits_for_proxy = std::bernoulli_distribution(0.3)(engine.rng());
  job->expected->kernel_after_proxy =
      job->kernel_waits_for_proxy && emit_op && emit_kch && !s.proxy.empty();
  std::shared_ptr<GpuGate> gate = s.gate;
  auto gate_ended = [gate] { return !gate || gate->ended_ns.load() != 0; };
  if ((m & kEventProxyCtrl) != 0) engine.Add({{nullptr, [job] { LaneProxyCtrl(*job); }}});
  for (size_t i = 0; emit_op && i < s.proxy.size(); ++i) {
    ProxyEngine::Lane lane;
    lane.push_back({nullptr, [job, i] { LaneStartProxyOp(*job, i); }});
    for (size_t k = 0; emit_step && k < s.proxy[i].step_bytes.size(); ++k) {
      lane.push_back({gate_ended, [job, i, k] { LaneStep(*job, i, k); }});
    }
    lane.push_back({gate_ended, [job, i] { LaneFinishProxyOp(*job, i); }});
    engine.Add(std::move(lane));
  }
  ProxyEngine* eng = &engine;
  for (size_t n = 0; n < s.kernels.size(); ++n) {
    const KernelWork k = s.kernels[n];
    const int side = KernelSide(s);
    const int ch = k.channel & 63;
    ChannelOrder* order = job->order.get();
    const uint64_t ticket = order->next[side][ch]++;
    auto pass_turn = [job, order, side, ch, eng] {
      const uint64_t turn = ++order->served[side][ch];
      auto it = order->waiting[side][ch].find(turn);
      if (it == order->waiting[side][ch].end()) return;
      eng->Add(std::move(it->second));
      order->waiting[side][ch].erase(it);
    };
    ProxyEngine::Lane lane;
    if (!emit_kch || k.timers == TimerKind::kMissing) {  // no KernelCh: only keep the order
      lane.push_back({nullptr, pass_turn});
    } else {
      auto kl = std::make_shared<KernelLane>();
      // The KernelCh of a channel starts on a later progress pass than the append of that
      // channel's ops (src/enqueue.cc:595-596 enqueues the net op before the profiler op), and
      // after the previous op's KernelCh on that channel (ChannelOrder).
      auto ready = [job, k, gate, emit_op] {
        if (gate && gate->started_ns.load() == 0) return false;
        const std::vector<ProxyWork>& works = job->expected->spec.proxy;
        for (size_t i = 0; emit_op && i < works.size(); ++i) {
          if (works[i].pxn) continue;
          if (works[i].channel == k.channel && !job->ops[i].started) return false;
          if (job->kernel_waits_for_proxy && !job->ops[i].done) return false;
        }
        return true;
      };
      lane.push_back({ready, [job, k, kl] { LaneKernelStart(*job, k, *kl); }});
      lane.push_back({gate_ended, [job, k, kl, pass_turn] {
                        LaneKernelStop(*job, k, *kl);
                        pass_turn();
                      }});
    }
    if (ticket == order->served[side][ch]) {
      engine.Add(std::move(lane));
    } else {
      order->waiting[side][ch].emplace(ticket, std::move(lane));
    }
  }
}

}  // namespace fabricscope::testing
