#pragma once

// FakeNccl: loads an NCCL profiler plugin with dlopen(RTLD_NOW | RTLD_LOCAL), as NCCL does, and
// drives its ABI the way NCCL 2.28.9 does (ABI §6.2 and §8; the topics and their NCCL sources are
// listed in collectors/nccl/profiler_abi.h). The user thread (RunGroup) follows
// src/enqueue.cc: the API events, KernelLaunch around the kernel launch (ncclLaunchKernel,
// enqueue.cc:1575-1662, before the Group: the kernel may run before the Coll starts), then
// hostStreamPlanTask (enqueue.cc:1307-1321): Group start, Coll/P2p starts, the proxy ops posted
// (ncclProxyStart, which waits for nothing), Coll/P2p stops at once, Group stop. The proxy side
// (tests/common/nccl_proxy_lanes.h) picks posted ops up on its own schedule, as
// src/proxy.cc ncclProxyProgress does: on a proxy thread of its own, or, in inline mode, on the
// user thread at random points chosen by a seeded RNG, so that a test can replay any of the
// orders NCCL allows (children before or after the Coll's stop, KernelCh after every ProxyOp
// stopped, several collectives in flight) from a seed. Events follow the live activation mask
// with NCCL's parent rules (ABI §6.3), and PluginVersion picks the v6, v5 or v4 table.
//
// It remembers what each collective should have produced (Expected) so that a test can compare
// the records a receiver got. Header-only; used by the plugin's ABI tests, its end-to-end test
// through the agent, the cluster-in-a-box tool (tests/tools/ring_allreduce.cc) and the benchmark.
//
// Threading: one user thread per FakeNccl calls Init/Run*/Drain/Finalize (Finalize may come from
// another thread); the proxy thread (not in inline mode) is owned by the FakeNccl.

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
#include "tests/common/nccl_proxy_engine.h"
#include "tests/common/nccl_proxy_lanes.h"

namespace fabricscope::testing {

namespace nccl_abi = ::fabricscope::collectors::nccl;

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

struct FakeNcclOptions {
  // Inline: no proxy thread; the proxy lanes run on the calling thread, at random points of
  // the user thread's calls (Run, RunGroup) and in Drain, in an order drawn from `seed`.
  bool inline_proxy = false;
  uint64_t seed = 1;
  int table_version = 6;  // 6, 5 or 4: which exported table NCCL 2.29 / 2.28 / 2.27 would pick
};

class FakeNccl {
 public:
  static constexpr int64_t kGpuClockOffsetNs = ::fabricscope::testing::kGpuClockOffsetNs;
  static constexpr int64_t kStartLagNs = ::fabricscope::testing::kStartLagNs;
  static constexpr int64_t kEndLagNs = ::fabricscope::testing::kEndLagNs;
  static constexpr int kFuncCount = 8;
  using ProxyWork = ::fabricscope::testing::ProxyWork;
  using KernelWork = ::fabricscope::testing::KernelWork;
  using TimerKind = ::fabricscope::testing::TimerKind;
  using CollSpec = ::fabricscope::testing::CollSpec;
  using Expected = ::fabricscope::testing::Expected;
  using ExpectedProxyOp = ::fabricscope::testing::ExpectedProxyOp;

  struct Comm {
    void* context = nullptr;
    uint64_t hash = 0;
    int rank = 0;
    int nranks = 2;
    int nnodes = 1;
    std::string name;
    uint64_t seq[kFuncCount] = {};  // Coll seqNumber per function; P2p counters (Send, Recv)
  };

  using Options = FakeNcclOptions;

  // A ring all-reduce of `bytes` (float32) on `channels` channels as NCCL's proxy would run it:
  // per channel one send to rank+1 and one receive from rank-1, each moving 2(n-1)/n of the
  // channel's share in steps of at most `chunk` bytes (ABI §7).
  static CollSpec AllReduceSpec(size_t bytes, int rank, int nranks, int channels = 2,
                                size_t chunk = 512 * 1024) {
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
        w.chunk_size = static_cast<int32_t>(chunk * 4);  // ProxyWork::chunk_size: ring SIMPLE
        for (size_t left = moved; left > 0;) {
          const size_t step = std::min(left, chunk);
          w.step_bytes.push_back(step);
          left -= step;
        }
        s.proxy.push_back(w);
      }
      KernelWork k;
      k.channel = static_cast<uint8_t>(c);
      s.kernels.push_back(k);
    }
    return s;
  }

  // Loads the plugin; nullptr (and *error) when dlopen or dlsym fails.
  static std::unique_ptr<FakeNccl> Load(const std::string& path, std::string* error,
                                        Options options = Options()) {
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      *error = dlerror();
      return nullptr;
    }
    auto* v6 = static_cast<const nccl_abi::ProfilerV6*>(dlsym(lib, "ncclProfiler_v6"));
    auto* v5 = static_cast<const nccl_abi::ProfilerV5*>(dlsym(lib, "ncclProfiler_v5"));
    auto* v4 = static_cast<const nccl_abi::ProfilerV4*>(dlsym(lib, "ncclProfiler_v4"));
    const nccl_abi::ProfilerV5* table = options.table_version == 6 ? v6 : v5;
    if (table == nullptr || (options.table_version == 4 && v4 == nullptr)) {
      *error = "no ncclProfiler_v" + std::to_string(options.table_version);
      dlclose(lib);
      return nullptr;
    }
    return std::unique_ptr<FakeNccl>(new FakeNccl(lib, table, v6, v5, v4, options));
  }

  ~FakeNccl() {
    if (proxy_thread_.joinable()) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
      }
      cv_.notify_all();
      proxy_thread_.join();
    }
    dlclose(lib_);
  }

  const nccl_abi::ProfilerV5& v5() const { return *v5_; }
  const nccl_abi::ProfilerV6* v6() const { return v6_; }
  const nccl_abi::ProfilerV4* v4() const { return v4_; }
  // The table the harness drives (v4 calls go through V4Table below).
  const nccl_abi::ProfilerV5& table() const { return *table_; }
  // The process-wide activation mask NCCL hands to every init (ABI §6.3).
  int* mask() { return &mask_; }
  int LoadMask() const { return __atomic_load_n(&mask_, __ATOMIC_RELAXED); }
  // NCCL's own store to the mask (relaxed atomic: the plugin's flush thread stores it too).
  void StoreMask(int m) { __atomic_store_n(&mask_, m, __ATOMIC_RELAXED); }
  // Inline mode: a new schedule from `seed`.
  void Reseed(uint64_t seed) {
    engine_.Reseed(seed);
    user_rng_.seed(seed ^ 0x9e3779b97f4a7c15ull);
  }

  nccl_abi::NcclResult Init(Comm& comm) {
    if (options_.table_version == 4) {
      return v4_->init(&comm.context, &mask_, comm.name.c_str(), comm.hash, comm.nnodes,
                       comm.nranks, comm.rank, &HarnessLog::Logger);
    }
    return table_->init(&comm.context, comm.hash, &mask_, comm.name.c_str(), comm.nnodes,
                        comm.nranks, comm.rank, &HarnessLog::Logger);
  }
  nccl_abi::NcclResult Finalize(Comm& comm) {
    if (comm.context == nullptr) return nccl_abi::kNcclSuccess;  // NCCL skips NULL contexts
    const nccl_abi::NcclResult r = table_->finalize(comm.context);
    comm.context = nullptr;
    return r;
  }

  // One operation without a user group (6.2): returns its expectation (completed by the proxy
  // side later; read after Drain()).
  std::shared_ptr<Expected> Run(Comm& comm, const CollSpec& spec) {
    return RunGroup(comm, {spec}, /*user_group=*/false).front();
  }

  // Several operations: inside one user group (depth 2) when `user_group`, else one implicit
  // group each. In one plan they are fused: one Group, all Coll starts, one post, all stops.
  std::vector<std::shared_ptr<Expected>> RunGroup(Comm& comm, const std::vector<CollSpec>& specs,
                                                  bool user_group = true) {
    std::vector<std::shared_ptr<Expected>> out;
    if (!user_group) {
      for (const CollSpec& s : specs) out.push_back(RunGroupImpl(comm, {s}, 1).front());
      return out;
    }
    return RunGroupImpl(comm, specs, 2);
  }

  // Waits until the proxy side has finished everything posted so far (inline mode: runs it).
  void Drain() {
    if (options_.inline_proxy) {
      while (engine_.RunOne()) {
      }
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    idle_cv_.wait(lock, [this] { return inbox_.empty() && proxy_idle_; });
  }
  // Wakes the proxy thread after a GpuGate was set.
  void Notify() { cv_.notify_all(); }

  // Every ProxyOp the harness started and stopped (own and PXN); read after Drain().
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
    table_->start_event(comm.context, nullptr, &d);
    table_->start_event(comm.context, &h, nullptr);
    h = reinterpret_cast<void*>(0x1);
    table_->start_event(nullptr, &h, &d);  // context of a failed init
    bad_handles_written_ += h == nullptr ? 0 : 1;
    table_->stop_event(nullptr);
    table_->record_event_state(nullptr, nccl_abi::kStateKernelChStop, nullptr);
    nccl_abi::EventStateArgs args{};
    table_->record_event_state(nullptr, nccl_abi::kStateProxyStepSendWait, &args);
    // Poisoned words shaped like our handles, with generations no live event reaches in a
    // test (a small generation can name a live KernelCh: then this would stop it early).
    for (uintptr_t poison : {uintptr_t{0xdeadbeefdeadbeef}, uintptr_t{0xFB00000000000001},
                             uintptr_t{0xFB1FFFFFFFFFFFFF}, uintptr_t{0xFB37FFFFFF000000},
                             uintptr_t{0xFB87FFFFFF000000}}) {
      table_->stop_event(reinterpret_cast<void*>(poison));
      table_->record_event_state(reinterpret_cast<void*>(poison), nccl_abi::kStateKernelChStop,
                                 &args);
      table_->record_event_state(reinterpret_cast<void*>(poison),
                                 nccl_abi::kStateProxyStepRecvFlushWait, &args);
    }
  }
  // Times StartEvent left *eHandle non-NULL where it had to write NULL.
  int bad_handles_written() const { return bad_handles_written_; }

 private:
  FakeNccl(void* lib, const nccl_abi::ProfilerV5* table, const nccl_abi::ProfilerV6* v6,
           const nccl_abi::ProfilerV5* v5, const nccl_abi::ProfilerV4* v4, Options options)
      : lib_(lib),
        table_(options.table_version == 4 ? &V4Table() : table),
        v6_(v6),
        v5_(v5),
        v4_(v4),
        options_(options),
        engine_(options.seed),
        user_rng_(options.seed ^ 0x9e3779b97f4a7c15ull) {
    if (options.table_version == 4) CurrentV4() = v4;
    if (!options_.inline_proxy) proxy_thread_ = std::thread([this] { ProxyLoop(); });
  }

  // NCCL 2.27 drives the v4 table: the 104-byte descriptor with a one-byte type and no API
  // events (the harness's v5-shaped calls are converted; API events are not sent).
  static const nccl_abi::ProfilerV4*& CurrentV4() {
    static const nccl_abi::ProfilerV4* v4 = nullptr;
    return v4;
  }
  static const nccl_abi::ProfilerV5& V4Table() {
    static const nccl_abi::ProfilerV5 t = {
        "v4",
        nullptr,
        [](void* ctx, void** h, nccl_abi::EventDescrV5* d) -> nccl_abi::NcclResult {
          if (d != nullptr && d->type > nccl_abi::kEventNetPlugin) {
            if (h != nullptr) *h = nullptr;
            return 0;
          }
          nccl_abi::EventDescrV4 v4;
          std::memset(&v4, 0xA5, sizeof(v4));  // garbage in the padding after the type byte
          if (d != nullptr) {
            v4.type = static_cast<uint8_t>(d->type);
            // NCCL's v4 adapter parents a Coll/P2p on its Group (profiler_v4.cc).
            v4.parent_obj = d->type == nccl_abi::kEventColl  ? d->coll.parent_group
                            : d->type == nccl_abi::kEventP2p ? d->p2p.parent_group
                                                             : d->parent_obj;
            v4.rank = d->rank;
            std::memcpy(reinterpret_cast<char*>(&v4) + 24, reinterpret_cast<const char*>(d) + 24,
                        sizeof(v4) - 24);
          }
          return CurrentV4()->start_event(ctx, h, d != nullptr ? &v4 : nullptr);
        },
        [](void* h) { return CurrentV4()->stop_event(h); },
        [](void* h, nccl_abi::EventState s, nccl_abi::EventStateArgs* a) {
          return CurrentV4()->record_event_state(h, s, a);
        },
        [](void* c) { return CurrentV4()->finalize(c); }};
    return t;
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
    table_->start_event(context, &h, &d);
    return h;
  }

  // Inline mode: the proxy thread "runs" for a random number of steps here.
  void MaybePump() {
    if (!options_.inline_proxy) return;
    const int n = std::uniform_int_distribution<int>(0, 6)(user_rng_);
    for (int i = 0; i < n && engine_.RunOne(); ++i) {
    }
  }

  // The API side (ABI §6.2): GroupApi, CollApi/P2pApi per call, KernelLaunch.
  void* ApiEvents(Comm& comm, const std::vector<CollSpec>& specs, int depth, int m,
                  std::vector<void*>* api_handles) {
    using namespace nccl_abi;
    const int coll_bits = kEventProxyOp | kEventProxyStep | kEventKernelCh | kEventNetPlugin;
    void* group_api = nullptr;
    if ((m & ~kEventProxyCtrl) != 0) {
      EventDescrV5 d{};
      d.type = kEventGroupApi;
      d.group_api.graph_captured = !specs.empty() && specs[0].graph_captured;
      d.group_api.group_depth = depth;
      group_api = Start(comm.context, d);
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      const CollSpec& s = specs[i];
      const bool emit_op = (m & ((s.p2p ? kEventP2p : kEventColl) | coll_bits)) != 0;
      void* api = nullptr;
      if (emit_op || (m & (s.p2p ? kEventP2pApi : kEventCollApi)) != 0) {
        EventDescrV5 d{};
        d.type = s.p2p ? kEventP2pApi : kEventCollApi;
        d.parent_obj = group_api;
        if (s.p2p) {
          d.p2p_api = {s.func, s.count, s.datatype, nullptr, s.graph_captured};
        } else {
          d.coll_api = {s.func, s.count, s.datatype, s.root, nullptr, s.graph_captured};
        }
        api = Start(comm.context, d);
        table_->stop_event(api);
      }
      api_handles->push_back(api);
      if (i == 0 && group_api != nullptr) {
        table_->record_event_state(group_api, kStateGroupStartApiStop, nullptr);
      }
    }
    if (group_api != nullptr)
      table_->record_event_state(group_api, kStateGroupEndApiStart, nullptr);
    if ((m & kEventKernelLaunch) != 0) {  // around cuLaunchKernelEx: before the Group
      EventDescrV5 d{};
      d.type = kEventKernelLaunch;
      d.parent_obj = group_api;
      table_->stop_event(Start(comm.context, d));
    }
    return group_api;
  }

  // The Coll/P2p start of one task (profiler.cc ncclProfilerStartTaskEvents); nullptr when the
  // mask asks for none.
  void* StartTask(Comm& comm, const CollSpec& s, void* api, void* group, int m, Expected& e) {
    using namespace nccl_abi;
    const int coll_bits = kEventProxyOp | kEventProxyStep | kEventKernelCh | kEventNetPlugin;
    if ((m & ((s.p2p ? kEventP2p : kEventColl) | coll_bits)) == 0) return nullptr;
    const int fi = FuncIndex(s.func);
    EventDescrV5 d{};
    d.type = s.p2p ? kEventP2p : kEventColl;
    d.parent_obj = api;
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
    e.seq = comm.seq[fi]++;
    e.enqueue_start_lo = HarnessNowNs();
    void* h = Start(comm.context, d);
    e.enqueue_start_hi = HarnessNowNs();
    // A record is due for every Coll/P2p of a live context; a NULL handle from a live
    // context means the plugin's pool was full and it counted a drop.
    e.coll_emitted = comm.context != nullptr && h != nullptr;
    if (comm.context != nullptr) {
      std::lock_guard<std::mutex> lock(mu_);
      ++issued_;
    }
    return h;
  }

  std::vector<std::shared_ptr<Expected>> RunGroupImpl(Comm& comm,
                                                      const std::vector<CollSpec>& specs,
                                                      int depth) {
    using namespace nccl_abi;
    const int m = LoadMask();
    const int coll_bits = kEventProxyOp | kEventProxyStep | kEventKernelCh | kEventNetPlugin;
    std::vector<void*> api_handles;
    void* group_api = ApiEvents(comm, specs, depth, m, &api_handles);
    MaybePump();
    void* group = nullptr;
    if ((m & (kEventGroup | kEventColl | kEventP2p | coll_bits)) != 0) {
      EventDescrV5 d{};
      d.type = kEventGroup;
      group = Start(comm.context, d);
    }
    std::vector<std::shared_ptr<Expected>> out;
    std::vector<void*> op_handles;
    for (size_t i = 0; i < specs.size(); ++i) {
      auto e = std::make_shared<Expected>();
      e->spec = specs[i];
      e->comm_hash = comm.hash;
      e->rank = comm.rank;
      e->nranks = comm.nranks;
      out.push_back(e);
      op_handles.push_back(StartTask(comm, specs[i], api_handles[i], group, m, *e));
    }
    // uploadProxyOps + ncclProxyStart (enqueue.cc:1310-1313): posted, nobody waits.
    auto stopped = std::make_shared<std::vector<std::atomic<bool>>>(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      if (op_handles[i] != nullptr) Post(comm, op_handles[i], m, out[i], &(*stopped)[i], stopped);
    }
    MaybePump();
    for (size_t i = 0; i < op_handles.size(); ++i) {  // enqueue.cc:1314
      if (op_handles[i] == nullptr) continue;
      out[i]->enqueue_end_lo = HarnessNowNs();
      table_->stop_event(op_handles[i]);
      out[i]->enqueue_end_hi = HarnessNowNs();
      (*stopped)[i].store(true, std::memory_order_release);
      MaybePump();
    }
    if (group != nullptr) table_->stop_event(group);
    if (group_api != nullptr) table_->stop_event(group_api);
    // NCCL 2.28 stops the never-cleared CollApi slot again on later calls (ABI §6.9).
    if (last_api_handle_ != nullptr) table_->stop_event(last_api_handle_);
    if (!api_handles.empty()) last_api_handle_ = api_handles.back();
    MaybePump();
    return out;
  }

  void Post(Comm& comm, void* handle, int m, std::shared_ptr<Expected> e,
            std::atomic<bool>* stopped, std::shared_ptr<void> keep_alive) {
    auto job = std::shared_ptr<ProxyJob>(new ProxyJob{table_,
                                                      comm.context,
                                                      comm.hash,
                                                      comm.rank,
                                                      handle,
                                                      m,
                                                      e,
                                                      stopped,
                                                      &mu_,
                                                      &issued_,
                                                      &expected_proxy_ops_,
                                                      {},
                                                      false,
                                                      {}},
                                         [keep_alive](ProxyJob* j) { delete j; });
    {
      std::lock_guard<std::mutex> lock(mu_);
      std::shared_ptr<ChannelOrder>& order = orders_[comm.context];
      if (order == nullptr) order = std::make_shared<ChannelOrder>();
      job->order = order;
    }
    if (options_.inline_proxy) {
      AddProxyLanes(job, engine_);
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      inbox_.push_back(std::move(job));
    }
    cv_.notify_all();
  }

  void ProxyLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      while (!inbox_.empty()) {
        std::shared_ptr<ProxyJob> job = std::move(inbox_.front());
        inbox_.pop_front();
        proxy_idle_ = false;
        lock.unlock();
        AddProxyLanes(job, engine_);
        lock.lock();
      }
      lock.unlock();
      const bool ran = engine_.RunOne();
      lock.lock();
      if (ran) continue;
      if (stop_) return;  // what is left waits for a gate nobody will set
      proxy_idle_ = engine_.idle();
      if (proxy_idle_) idle_cv_.notify_all();
      // Nothing ready: a gate (the caller's GPU times) or new ops; bounded so gates are seen.
      cv_.wait_for(lock, std::chrono::milliseconds(1), [this] { return stop_ || !inbox_.empty(); });
      proxy_idle_ = false;
    }
  }

  void* lib_;
  const nccl_abi::ProfilerV5* table_;
  const nccl_abi::ProfilerV6* v6_;
  const nccl_abi::ProfilerV5* v5_;
  const nccl_abi::ProfilerV4* v4_;
  const Options options_;
  int mask_ = 0;
  void* last_api_handle_ = nullptr;
  int bad_handles_written_ = 0;
  ProxyEngine engine_;  // the proxy thread's (or, inline, the user thread's)
  std::mt19937_64 user_rng_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<std::shared_ptr<ProxyJob>> inbox_;
  std::map<void*, std::shared_ptr<ChannelOrder>> orders_;  // per context
  bool proxy_idle_ = true;
  bool stop_ = false;
  uint64_t issued_ = 0;
  std::vector<ExpectedProxyOp> expected_proxy_ops_;
  std::thread proxy_thread_;
};

}  // namespace fabricscope::testing
