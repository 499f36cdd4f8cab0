#pragma once

// FakeNccl: loads an NCCL profiler plugin with dlopen(RTLD_NOW | RTLD_LOCAL), as NCCL 2.28 does,
// and drives its ABI the way NCCL does (ABI §6.2 and §8; the topics and their NCCL sources are
// listed in collectors/nccl/profiler_abi.h): per-communicator init, the application ("user")
// thread's API, group and collective events in the §6.2 order, and a proxy thread that runs ProxyOp
// / ProxyStep state sequences, ProxyCtrl events and KernelCh start / state 22 / stop with synthetic
// GPU timer values. Events are emitted according to the live activation mask, with NCCL's parent
// rules (ABI §6.3).
//
// It remembers what each collective should have produced (Expected) so that a test can compare
// the records a receiver got. Header-only; used by the plugin's ABI tests, its end-to-end test
// through the agent, and the cluster-in-a-box test.
//
// Threading: one user thread per FakeNccl calls Init/Run*/Finalize (Finalize may come from
// another thread); the proxy thread is owned by the FakeNccl.

#include <dlfcn.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "collectors/nccl/profiler_abi.h"

namespace fabricscope::testing {

namespace nccl_abi = ::fabricscope::collectors::nccl;

inline int64_t HarnessNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

// NCCL's logger stand-in: keeps every line (process-wide, since the plugin keeps the first one).
class HarnessLog {
 public:
  static HarnessLog& Get() {
    static HarnessLog* log = new HarnessLog();
    return *log;
  }
  static void Logger(int /*level*/, unsigned long /*flags*/, const char* /*file*/, int /*line*/,
                     const char* fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    std::lock_guard<std::mutex> lock(Get().mu_);
    Get().lines_.push_back(buf);
  }
  std::vector<std::string> Lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    lines_.clear();
  }
  // The plugin's last "finalized; records R, sent S, dropped D, datagrams G" line.
  bool LastFinalStats(uint64_t* records, uint64_t* sent, uint64_t* dropped) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = lines_.rbegin(); it != lines_.rend(); ++it) {
      unsigned long r, s, d, g;
      const char* p = std::strstr(it->c_str(), "finalized; records ");
      if (p != nullptr &&
          std::sscanf(p, "finalized; records %lu, sent %lu, dropped %lu, datagrams %lu", &r, &s, &d,
                      &g) == 4) {
        *records = r;
        *sent = s;
        *dropped = d;
        return true;
      }
    }
    return false;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
};

class FakeNccl {
 public:
  // GPU %globaltimer = CPU CLOCK_MONOTONIC + kGpuClockOffsetNs in the synthetic timers; each
  // channel "began" kStartLagNs before the proxy reports it and "ended" kEndLagNs before.
  static constexpr int64_t kGpuClockOffsetNs = 1'700'000'000'000'000'000;
  static constexpr int64_t kStartLagNs = 3000;
  static constexpr int64_t kEndLagNs = 1000;
  static constexpr int kFuncCount = 8;

  struct Comm {
    void* context = nullptr;
    uint64_t hash = 0;
    int rank = 0;
    int nranks = 2;
    int nnodes = 1;
    std::string name;
    uint64_t seq[kFuncCount] = {};  // Coll seqNumber per function; P2p counters (Send, Recv)
  };

  // A proxy operation of one collective: one peer, one direction, one channel.
  struct ProxyWork {
    int peer = 1;
    bool is_send = true;
    uint8_t channel = 0;
    std::vector<size_t> step_bytes;  // transSize per step
    bool pxn = false;                // created by another process: pid and pointers foreign
  };
  // One kernel channel's timers. kind: valid, zero start, or end before start.
  // kMissing: NCCL never reports this channel (the plugin must not wait for it forever).
  enum class TimerKind { kValid, kZeroStart, kEndBeforeStart, kMissing };
  struct KernelWork {
    uint8_t channel = 0;
    TimerKind timers = TimerKind::kValid;
    bool before_coll_stop = false;  // reported while the Coll is still open
    // Explicit work interval in CPU CLOCK_MONOTONIC ns (e.g. a real transfer measured by the
    // caller; must lie before the report); 0 = synthetic (just before the report). The plugin
    // fits the GPU clock from report times, so the reported interval keeps its length but comes
    // out later by the smallest report lag it has seen on that communicator.
    int64_t cpu_start_ns = 0;
    int64_t cpu_end_ns = 0;
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
  };

  // What the plugin should report for one operation. Filled by the user and proxy threads; read
  // it after Drain().
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
    bool steps_emitted = false;
  };
  // One expected ProxyOpRecord.
  struct ExpectedProxyOp {
    uint64_t comm_hash = 0;  // 0 for PXN
    uint64_t op_seq = UINT64_MAX;
    int rank = 0, peer = 0, pid = 0;
    uint8_t channel = 0, is_send = 0;
    int32_t steps = 0;
    uint64_t bytes = 0;
    std::string func;
    int64_t start_lo = 0, start_hi = 0, end_lo = 0, end_hi = 0;
  };

  // A ring all-reduce of `bytes` (float32) on `channels` channels as NCCL's proxy would run it:
  // per channel one send to rank+1 and one receive from rank-1, each moving 2(n-1)/n of the
  // channel's share in steps of at most `chunk` bytes (ABI §7). When
  // cpu_start_ns/cpu_end_ns are set, every channel reports that work interval (e.g. a real
  // transfer the caller timed); else synthetic times.
  static CollSpec AllReduceSpec(size_t bytes, int rank, int nranks, int channels = 2,
                                size_t chunk = 512 * 1024, int64_t cpu_start_ns = 0,
                                int64_t cpu_end_ns = 0) {
    CollSpec s;
    s.func = "AllReduce";
    s.datatype = "ncclFloat32";
    s.count = bytes / 4;
    const size_t per_channel = bytes / static_cast<size_t>(channels);
    const size_t moved = nranks > 1 ? per_channel * 2 * (nranks - 1) / nranks : 0;
    for (int c = 0; c < channels; ++c) {
      for (int dir = 0; dir < 2 && nranks > 1; ++dir) {
        ProxyWork w;
        w.is_send = dir == 0;
        w.peer = w.is_send ? (rank + 1) % nranks : (rank + nranks - 1) % nranks;
        w.channel = static_cast<uint8_t>(c);
        for (size_t left = moved; left > 0;) {
          const size_t step = std::min(left, chunk);
          w.step_bytes.push_back(step);
          left -= step;
        }
        s.proxy.push_back(w);
      }
      KernelWork k;
      k.channel = static_cast<uint8_t>(c);
      k.cpu_start_ns = cpu_start_ns;
      k.cpu_end_ns = cpu_end_ns;
      s.kernels.push_back(k);
    }
    return s;
  }

  // Loads the plugin; nullptr (and *error) when dlopen or dlsym fails.
  static std::unique_ptr<FakeNccl> Load(const std::string& path, std::string* error) {
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      *error = dlerror();
      return nullptr;
    }
    auto* v5 = static_cast<const nccl_abi::ProfilerV5*>(dlsym(lib, "ncclProfiler_v5"));
    auto* v4 = static_cast<const nccl_abi::ProfilerV4*>(dlsym(lib, "ncclProfiler_v4"));
    if (v5 == nullptr) {
      *error = "no ncclProfiler_v5";
      dlclose(lib);
      return nullptr;
    }
    return std::unique_ptr<FakeNccl>(new FakeNccl(lib, v5, v4));
  }

  ~FakeNccl() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    proxy_thread_.join();
    dlclose(lib_);
  }

  const nccl_abi::ProfilerV5& v5() const { return *v5_; }
  const nccl_abi::ProfilerV4* v4() const { return v4_; }
  // The process-wide activation mask NCCL hands to every init (ABI §6.3).
  int* mask() { return &mask_; }
  int LoadMask() const { return __atomic_load_n(&mask_, __ATOMIC_RELAXED); }

  nccl_abi::NcclResult Init(Comm& comm) {
    return v5_->init(&comm.context, comm.hash, &mask_, comm.name.c_str(), comm.nnodes, comm.nranks,
                     comm.rank, &HarnessLog::Logger);
  }
  nccl_abi::NcclResult Finalize(Comm& comm) {
    if (comm.context == nullptr) return nccl_abi::kNcclSuccess;  // NCCL skips NULL contexts
    const nccl_abi::NcclResult r = v5_->finalize(comm.context);
    comm.context = nullptr;
    return r;
  }

  // One operation without a user group (6.2): returns its expectation (completed by the proxy
  // thread later; read after Drain()).
  std::shared_ptr<Expected> Run(Comm& comm, const CollSpec& spec) {
    return RunGroup(comm, {spec}, /*user_group=*/false).front();
  }

  // Several operations: inside one user group (depth 2) when `user_group`, else one implicit
  // group each.
  std::vector<std::shared_ptr<Expected>> RunGroup(Comm& comm, const std::vector<CollSpec>& specs,
                                                  bool user_group = true) {
    std::vector<std::shared_ptr<Expected>> out;
    if (!user_group) {
      for (const CollSpec& s : specs) out.push_back(RunGroupImpl(comm, {s}, 1).front());
      return out;
    }
    return RunGroupImpl(comm, specs, 2);
  }

  // Waits until the proxy thread has finished everything posted so far.
  void Drain() {
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
  }

  // Every ProxyOp the harness started (own and PXN); read after Drain().
  std::vector<ExpectedProxyOp> expected_proxy_ops() {
    std::lock_guard<std::mutex> lock(mu_);
    return expected_proxy_ops_;
  }
  // Events that should have produced a record (Coll/P2p + ProxyOp starts on live contexts).
  uint64_t issued() {
    std::lock_guard<std::mutex> lock(mu_);
    return issued_;
  }

  // The edge cases of ABI §8.4 that need no collective: NULL handles and arguments, a NULL
  // context (failed init), poisoned handles. The plugin must ignore all of them.
  void CallWithBadArguments(Comm& comm) {
    nccl_abi::EventDescrV5 d{};
    d.type = nccl_abi::kEventColl;
    void* h = reinterpret_cast<void*>(0x1);
    v5_->start_event(comm.context, nullptr, &d);
    v5_->start_event(comm.context, &h, nullptr);
    h = reinterpret_cast<void*>(0x1);
    v5_->start_event(nullptr, &h, &d);  // context of a failed init
    bad_handles_written_ += h == nullptr ? 0 : 1;
    v5_->stop_event(nullptr);
    v5_->record_event_state(nullptr, nccl_abi::kStateKernelChStop, nullptr);
    nccl_abi::EventStateArgs args{};
    v5_->record_event_state(nullptr, nccl_abi::kStateProxyStepSendWait, &args);
    for (uintptr_t poison : {uintptr_t{0xdeadbeefdeadbeef}, uintptr_t{0xFB00000000000001},
                             uintptr_t{0xFB1FFFFFFFFFFFFF}, uintptr_t{0xFB30000001000000}}) {
      v5_->stop_event(reinterpret_cast<void*>(poison));
      v5_->record_event_state(reinterpret_cast<void*>(poison), nccl_abi::kStateKernelChStop, &args);
      v5_->record_event_state(reinterpret_cast<void*>(poison),
                              nccl_abi::kStateProxyStepRecvFlushWait, &args);
    }
  }
  // Times StartEvent left *eHandle non-NULL where it had to write NULL.
  int bad_handles_written() const { return bad_handles_written_; }

 private:
  struct Job {
    Comm* comm;
    void* coll_handle;
    int mask;
    std::shared_ptr<Expected> expected;
    std::atomic<bool>* started;
  };

  FakeNccl(void* lib, const nccl_abi::ProfilerV5* v5, const nccl_abi::ProfilerV4* v4)
      : lib_(lib), v5_(v5), v4_(v4) {
    proxy_thread_ = std::thread([this] { ProxyLoop(); });
  }

  static int FuncIndex(const char* func) {
    static const char* kFuncs[kFuncCount] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast",
                                             "Reduce",    "Send",      "Recv",          "Other"};
    for (int i = 0; i < kFuncCount - 1; ++i) {
      if (std::strcmp(func, kFuncs[i]) == 0) return i;
    }
    return kFuncCount - 1;
  }

  void* Start(void* context, nccl_abi::EventDescrV5& d) {
    void* h = reinterpret_cast<void*>(0x2);  // NCCL's slot may hold anything before the call
    v5_->start_event(context, &h, &d);
    return h;
  }

  std::vector<std::shared_ptr<Expected>> RunGroupImpl(Comm& comm,
                                                      const std::vector<CollSpec>& specs,
                                                      int depth) {
    using namespace nccl_abi;
    const int m = LoadMask();
    const int coll_bits = kEventProxyOp | kEventProxyStep | kEventKernelCh | kEventNetPlugin;
    const bool emit_group = (m & (kEventGroup | kEventColl | kEventP2p | coll_bits)) != 0;
    const bool emit_group_api = (m & ~kEventProxyCtrl) != 0;
    const bool graph = !specs.empty() && specs[0].graph_captured;
    std::vector<std::shared_ptr<Expected>> out;

    void* group_api = nullptr;
    if (emit_group_api) {
      EventDescrV5 d{};
      d.type = kEventGroupApi;
      d.group_api.graph_captured = graph;
      d.group_api.group_depth = depth;
      group_api = Start(comm.context, d);
    }
    std::vector<void*> api_handles;
    for (size_t i = 0; i < specs.size(); ++i) {
      const CollSpec& s = specs[i];
      const bool emit_op = (m & ((s.p2p ? kEventP2p : kEventColl) | coll_bits)) != 0;
      const bool emit_api = emit_op || (m & (s.p2p ? kEventP2pApi : kEventCollApi)) != 0;
      void* api = nullptr;
      if (emit_api) {
        EventDescrV5 d{};
        d.type = s.p2p ? kEventP2pApi : kEventCollApi;
        d.parent_obj = group_api;
        if (s.p2p) {
          d.p2p_api = {s.func, s.count, s.datatype, nullptr, s.graph_captured};
        } else {
          d.coll_api = {s.func, s.count, s.datatype, s.root, nullptr, s.graph_captured};
        }
        api = Start(comm.context, d);
        v5_->stop_event(api);
      }
      api_handles.push_back(api);
      if (i == 0 && group_api != nullptr) {
        v5_->record_event_state(group_api, kStateGroupStartApiStop, nullptr);
      }
    }
    if (group_api != nullptr) v5_->record_event_state(group_api, kStateGroupEndApiStart, nullptr);
    if ((m & kEventKernelLaunch) != 0) {
      EventDescrV5 d{};
      d.type = kEventKernelLaunch;
      d.parent_obj = group_api;
      v5_->stop_event(Start(comm.context, d));
    }
    void* group = nullptr;
    if (emit_group) {
      EventDescrV5 d{};
      d.type = kEventGroup;
      group = Start(comm.context, d);
    }
    std::vector<void*> op_handles;
    std::vector<std::unique_ptr<std::atomic<bool>>> started;
    for (size_t i = 0; i < specs.size(); ++i) {
      const CollSpec& s = specs[i];
      auto e = std::make_shared<Expected>();
      e->spec = s;
      e->comm_hash = comm.hash;
      e->rank = comm.rank;
      e->nranks = comm.nranks;
      out.push_back(e);
      const bool emit_op = (m & ((s.p2p ? kEventP2p : kEventColl) | coll_bits)) != 0;
      if (!emit_op) {
        op_handles.push_back(nullptr);
        continue;
      }
      const int fi = FuncIndex(s.func);
      EventDescrV5 d{};
      d.type = s.p2p ? kEventP2p : kEventColl;
      d.parent_obj = api_handles[i];
      d.rank = comm.rank;
      const uint8_t nch = static_cast<uint8_t>(std::max<size_t>(1, s.kernels.size()));
      if (s.p2p) {
        d.p2p = {s.func, nullptr, s.datatype, s.count, s.peer, nch, group};
      } else {
        d.coll.seq_number = comm.seq[fi];
        d.coll.func = s.func;
        d.coll.count = s.count;
        d.coll.root = s.root;
        d.coll.datatype = s.datatype;
        d.coll.n_channels = nch;
        d.coll.n_warps = 16;
        d.coll.algo = s.algo;
        d.coll.proto = s.proto;
        d.coll.parent_group = group;
      }
      e->seq = comm.seq[fi]++;
      e->enqueue_start_lo = HarnessNowNs();
      void* h = Start(comm.context, d);
      e->enqueue_start_hi = HarnessNowNs();
      // A record is due for every Coll/P2p of a live context; a NULL handle from a live
      // context means the plugin's pool was full and it counted a drop.
      e->coll_emitted = comm.context != nullptr && h != nullptr;
      if (comm.context != nullptr) {
        std::lock_guard<std::mutex> lock(mu_);
        ++issued_;
      }
      op_handles.push_back(h);
      started.push_back(std::make_unique<std::atomic<bool>>(false));
      Post(Job{&comm, h, m, e, started.back().get()});
    }
    // Proxy ops are posted before the Coll stops (6.2); wait until the proxy thread started them.
    for (auto& s : started) {
      while (!s->load(std::memory_order_acquire)) std::this_thread::yield();
    }
    for (size_t i = 0; i < op_handles.size(); ++i) {
      if (op_handles[i] == nullptr) continue;
      out[i]->enqueue_end_lo = HarnessNowNs();
      v5_->stop_event(op_handles[i]);
      out[i]->enqueue_end_hi = HarnessNowNs();
    }
    if (group != nullptr) v5_->stop_event(group);
    if (group_api != nullptr) v5_->stop_event(group_api);
    // NCCL 2.28 stops the never-cleared CollApi slot again on later calls (ABI §6.9).
    if (last_api_handle_ != nullptr) v5_->stop_event(last_api_handle_);
    if (!api_handles.empty()) last_api_handle_ = api_handles.back();
    return out;
  }

  void Post(Job job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(job);
    }
    cv_.notify_all();
  }

  void ProxyLoop() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (stop_ && queue_.empty()) return;
        job = queue_.front();
        queue_.pop_front();
        busy_ = true;
      }
      RunProxy(job);
      {
        std::lock_guard<std::mutex> lock(mu_);
        busy_ = false;
      }
      idle_cv_.notify_all();
    }
  }

  void KernelChannel(const Job& job, const KernelWork& k) {
    using namespace nccl_abi;
    Expected& e = *job.expected;
    if (k.timers == TimerKind::kMissing) return;
    const int64_t t0 = HarnessNowNs();
    EventDescrV5 d{};
    d.type = kEventKernelCh;
    d.parent_obj = job.coll_handle;
    d.rank = 0;  // NCCL leaves rank 0 for KernelCh (ABI §4)
    d.kernel_ch.channel_id = k.channel;
    const int64_t cpu_start = k.cpu_start_ns != 0 ? k.cpu_start_ns : t0 - kStartLagNs;
    const int64_t gpu_start = k.timers == TimerKind::kZeroStart ? 0 : cpu_start + kGpuClockOffsetNs;
    d.kernel_ch.p_timer = static_cast<uint64_t>(gpu_start);
    void* h = Start(job.comm->context, d);
    const int64_t t1 = HarnessNowNs();
    int64_t gpu_end = (k.cpu_end_ns != 0 ? k.cpu_end_ns : t1 - kEndLagNs) + kGpuClockOffsetNs;
    if (k.timers == TimerKind::kEndBeforeStart) gpu_end = gpu_start - 500;
    EventStateArgs args{};
    args.kernel_ch.p_timer = static_cast<uint64_t>(gpu_end);
    v5_->record_event_state(h, kStateKernelChStop, &args);
    v5_->stop_event(h);
    if (k.timers == TimerKind::kValid && h != nullptr) {
      e.gpu_start_min = std::min(e.gpu_start_min, gpu_start);
      e.gpu_end_max = std::max(e.gpu_end_max, gpu_end);
    }
    // NCCL's recycled KernelCh slot: state 22 and stop again on the stopped handle (ABI §6.9),
    // with a later batch's time that must not count.
    EventStateArgs late{};
    late.kernel_ch.p_timer = static_cast<uint64_t>(gpu_end + 1'000'000'000);
    v5_->record_event_state(h, kStateKernelChStop, &late);
    v5_->stop_event(h);
  }

  void RunProxy(const Job& job) {
    using namespace nccl_abi;
    Expected& e = *job.expected;
    const CollSpec& s = e.spec;
    const int m = job.mask;
    const bool emit_op = (m & (kEventProxyOp | kEventProxyStep | kEventNetPlugin)) != 0;
    const bool emit_step = (m & (kEventProxyStep | kEventNetPlugin)) != 0;
    const bool emit_kch = (m & kEventKernelCh) != 0;
    const bool live = job.comm->context != nullptr && job.coll_handle != nullptr;
    e.steps_emitted = emit_step;

    // ProxyCtrl: sleep/wakeup, append/append-end, idle/active (needs its own bit).
    if ((m & kEventProxyCtrl) != 0) {
      EventDescrV5 d{};
      d.type = kEventProxyCtrl;
      void* h = Start(job.comm->context, d);
      EventStateArgs a{};
      for (EventState st : {kStateProxyCtrlSleep, kStateProxyCtrlWakeup, kStateProxyCtrlAppend}) {
        v5_->record_event_state(h, st, &a);
      }
      a.proxy_ctrl.appended_proxy_ops = static_cast<int>(s.proxy.size());
      v5_->record_event_state(h, kStateProxyCtrlAppendEnd, &a);
      v5_->record_event_state(h, kStateProxyCtrlIdle, &a);
      v5_->record_event_state(h, kStateProxyCtrlActive, &a);
      v5_->stop_event(h);
    }

    struct OpState {
      void* handle = nullptr;
      ExpectedProxyOp x;
    };
    std::vector<OpState> ops;
    if (emit_op) {
      for (const ProxyWork& p : s.proxy) {
        EventDescrV5 d{};
        d.type = kEventProxyOp;
        d.rank = job.comm->rank;
        d.proxy_op.pid = p.pxn ? getpid() + 100000 : getpid();
        d.proxy_op.channel_id = p.channel;
        d.proxy_op.peer = p.peer;
        d.proxy_op.n_steps = static_cast<int>(p.step_bytes.size());
        d.proxy_op.chunk_size = 131072;
        d.proxy_op.is_send = p.is_send ? 1 : 0;
        // PXN: another process's parent and context; dereferencing them would crash.
        d.parent_obj = p.pxn ? reinterpret_cast<void*>(0xdead0000beef0000) : job.coll_handle;
        void* ctx = p.pxn ? reinterpret_cast<void*>(0xFC00ABCD00010001) : job.comm->context;
        OpState o;
        o.x.start_lo = HarnessNowNs();
        o.handle = Start(ctx, d);
        o.x.start_hi = HarnessNowNs();
        EventStateArgs a{};
        v5_->record_event_state(o.handle, kStateProxyOpInProgress, &a);
        o.x.comm_hash = p.pxn ? 0 : job.comm->hash;
        o.x.op_seq = p.pxn || !live ? UINT64_MAX : e.seq;
        o.x.rank = job.comm->rank;
        o.x.peer = p.peer;
        o.x.pid = d.proxy_op.pid;
        o.x.channel = p.channel;
        o.x.is_send = p.is_send ? 1 : 0;
        o.x.func = p.pxn || !live ? "" : s.func;
        // A NULL handle here means a full pool: dropped by the plugin, issued for the harness.
        if (p.pxn || job.comm->context != nullptr) {
          std::lock_guard<std::mutex> lock(mu_);
          ++issued_;
        }
        ops.push_back(o);
      }
    }
    std::vector<KernelWork> late_kernels;
    for (const KernelWork& k : s.kernels) {
      if (!emit_kch) break;
      if (k.before_coll_stop) {
        KernelChannel(job, k);
      } else {
        late_kernels.push_back(k);
      }
    }
    job.started->store(true, std::memory_order_release);
    // The other channels finish while the proxy ops are still open (they hold the collective
    // open, so no wait in the plugin decides the outcome, however slow this thread is).
    for (const KernelWork& k : late_kernels) KernelChannel(job, k);

    for (size_t i = 0; i < ops.size(); ++i) {
      const ProxyWork& p = s.proxy[i];
      OpState& o = ops[i];
      size_t previous = 0;
      void* last_step = nullptr;
      if (emit_step) {
        for (size_t k = 0; k < p.step_bytes.size(); ++k) {
          EventDescrV5 d{};
          d.type = kEventProxyStep;
          d.parent_obj = o.handle;
          d.rank = job.comm->rank;
          d.proxy_step.step = static_cast<int>(k);
          void* h = Start(job.comm->context, d);
          EventStateArgs a{};
          a.proxy_step.trans_size = previous;  // before 9/11 it holds the previous step's size
          if (p.is_send) {
            v5_->record_event_state(h, kStateProxyStepSendGpuWait, &a);
            v5_->record_event_state(h, kStateProxyStepSendPeerWait, &a);
            a.proxy_step.trans_size = p.step_bytes[k];
            v5_->record_event_state(h, kStateProxyStepSendWait, &a);
          } else {
            v5_->record_event_state(h, kStateProxyStepRecvWait, &a);
            a.proxy_step.trans_size = p.step_bytes[k];
            v5_->record_event_state(h, kStateProxyStepRecvFlushWait, &a);
            v5_->record_event_state(h, kStateProxyStepRecvGpuWait, &a);
          }
          v5_->stop_event(h);
          previous = p.step_bytes[k];
          if (o.handle != nullptr) {
            o.x.bytes += p.step_bytes[k];
            ++o.x.steps;
          }
          last_step = h;
        }
      }
      o.x.end_lo = HarnessNowNs();
      v5_->stop_event(o.handle);
      o.x.end_hi = HarnessNowNs();
      v5_->stop_event(o.handle);  // repeated stop: ignored
      // A state update after stop: must not add bytes.
      EventStateArgs a{};
      a.proxy_step.trans_size = 1 << 30;
      v5_->record_event_state(
          last_step, p.is_send ? kStateProxyStepSendWait : kStateProxyStepRecvFlushWait, &a);
      if (!p.pxn && live && o.handle != nullptr) {
        ++e.proxy_ops;
        e.proxy_bytes += o.x.bytes;
        e.proxy_start_lo = std::min(e.proxy_start_lo, o.x.start_lo);
        e.proxy_start_hi = std::min(e.proxy_start_hi, o.x.start_hi);
        e.proxy_end_lo = std::max(e.proxy_end_lo, o.x.end_lo);
        e.proxy_end_hi = std::max(e.proxy_end_hi, o.x.end_hi);
      }
      if (o.handle != nullptr) {
        std::lock_guard<std::mutex> lock(mu_);
        expected_proxy_ops_.push_back(o.x);
      }
    }
  }

  void* lib_;
  const nccl_abi::ProfilerV5* v5_;
  const nccl_abi::ProfilerV4* v4_;
  int mask_ = 0;
  void* last_api_handle_ = nullptr;
  int bad_handles_written_ = 0;

  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<Job> queue_;
  bool busy_ = false;
  bool stop_ = false;
  uint64_t issued_ = 0;
  std::vector<ExpectedProxyOp> expected_proxy_ops_;
  std::thread proxy_thread_;
};

}  // namespace fabricscope::testing
