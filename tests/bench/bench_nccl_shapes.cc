// The NCCL profiler plugin's cost per collective on each of NCCL's threads, for realistic shapes
// (tests/bench/nccl_shapes.h: 8 KB to 1 GB, 2 to 32 channels, ring, tree, all-gather, Send/Recv,
// with the ProxyStep counts NCCL's chunking gives them), against a table of empty callbacks
// driven the same way in the same run, at the default mask (74: Coll | ProxyOp | KernelCh) and
// at the deep dive's (90: + ProxyStep, the default before issue 38).
//
// Two threads, as in NCCL (ABI §6.1-6.2): the user thread runs each collective's launch events
// (GroupApi, record 23, CollApi, record 24, Group, Coll start and stop, Group stop, GroupApi stop;
// or the P2pApi/P2p pairs of a Send/Recv) and hands the Coll handle to the proxy thread, which
// runs ProxyOp start + record 19 for each op, KernelCh start per channel, the ProxyStep events
// (start, three state records, stop; only when the mask asks for them, §6.3) round-robin over the
// ops as NCCL's progress loop does, KernelCh record 22 + stop, then the ProxyOp stops. Each
// thread times its own part of each collective; p50 over the collectives.
//
// Per shape one line: callbacks per collective on each thread, the added ns per collective at
// p50 on each (plugin minus empty), the proxy thread's at mask 74 against mask 90, the added ns
// per callback, and the added time as a share of the collective's duration on a 400 Gb/s NIC
// under NCCL's tuning model. Then init's time and the plugin's memory.
// Plain binary: fabricscope_bench_nccl_shapes [--seconds-per-row=S] [--only=SUBSTRING]
//   [--one-thread] (both threads' events on one thread: the callbacks without cross-core misses)
//   [--per-callback] (one thread, each callback timed on its own: the p50 by kind)
//   [--compare-plugin=PATH] (another NCCL profiler plugin, loaded with dlopen and driven through
//     its ncclProfiler_v5 table at mask 90 in the same rounds: an earlier build of this one, the
//     baseline of issue 38's "0.5x today", or a peer such as NCCL Inspector; one more line per
//     shape)

#include <dlfcn.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collectors/nccl/profiler.h"
#include "collectors/nccl/profiler_abi.h"
#include "tests/bench/nccl_shapes.h"
#include "tests/bench/nccl_tables.h"

namespace nccl = fabricscope::collectors::nccl;
namespace bench = fabricscope::bench;

namespace {

using namespace ::fabricscope::bench::nccl_tables;  // NOLINT: the tables and Now()

// --per-callback: each callback timed on its own (two clock reads around it), by kind; p50 per
// kind, plugin minus empty, and over all callbacks of the run.
enum Callback {
  kCbApi,  // GroupApi, CollApi/P2pApi, Group: their starts, records 23/24 and stops
  kCbCollStart,
  kCbCollStop,
  kCbProxyOpStart,
  kCbProxyOpRecord,
  kCbProxyOpStop,
  kCbKernelStart,
  kCbKernelRecord,
  kCbKernelStop,
  kCbStep,  // ProxyStep start, state records, stop
  kCbKinds
};
constexpr const char* kCallbackNames[kCbKinds] = {
    "Group/API events",  "Coll/P2p start", "Coll/P2p stop",  "ProxyOp start",
    "ProxyOp record 19", "ProxyOp stop",   "KernelCh start", "KernelCh record 22",
    "KernelCh stop",     "ProxyStep calls"};
bool g_per_callback = false;
// --compare-plugin: the other plugin's table and context (nullptr without the flag).
const nccl::ProfilerV5* g_other = nullptr;
void* g_other_ctx = nullptr;
std::vector<int64_t> g_plugin_samples[kCbKinds], g_empty_samples[kCbKinds];

Callback StartCategory(uint64_t type) {
  switch (type) {
    case nccl::kEventColl:
    case nccl::kEventP2p:
      return kCbCollStart;
    case nccl::kEventProxyOp:
      return kCbProxyOpStart;
    case nccl::kEventKernelCh:
      return kCbKernelStart;
    case nccl::kEventProxyStep:
      return kCbStep;
    default:
      return kCbApi;
  }
}
Callback RecordCategory(nccl::EventState s) {
  if (s == nccl::kStateProxyOpInProgress) return kCbProxyOpRecord;
  if (s == nccl::kStateKernelChStop) return kCbKernelRecord;
  if (s == nccl::kStateGroupStartApiStop || s == nccl::kStateGroupEndApiStart) return kCbApi;
  return kCbStep;
}

struct Handoff {  // one collective's handles, from the user thread to the proxy thread
  void* parent[2] = {nullptr, nullptr};  // Coll, or the Send and Recv P2p events
};

// Counts callbacks per collective on each thread (the same for the plugin and the baseline).
struct Counts {
  int user = 0, proxy = 0;
  int null_handles = 0;  // Coll/P2p/ProxyOp/KernelCh starts the plugin dropped (a full pool)
};

class Driver {
 public:
  Driver(const nccl::ProfilerV5* t, void* ctx, const bench::Shape& s, int mask)
      : t_(t), ctx_(ctx), shape_(s), ops_(bench::PlanProxyOps(s)), mask_(mask) {}

  // The user thread's events of collective `seq`; returns what the proxy thread needs.
  Handoff User(uint64_t seq, Counts* n) {
    nccl::EventDescrV5 d{};
    nccl::EventStateArgs a{};
    void* api = nullptr;
    void* group = nullptr;
    Handoff h;
    d.type = nccl::kEventGroupApi;
    d.group_api.group_depth = 1;
    Start(&api, &d, n->user);
    Record(api, nccl::kStateGroupStartApiStop, nullptr, n->user);
    const bool p2p = shape_.algo == bench::Algo::kP2p;
    void* coll_api[2] = {nullptr, nullptr};
    for (int i = 0; i < (p2p ? 2 : 1); ++i) {
      d = {};
      d.type = p2p ? nccl::kEventP2pApi : nccl::kEventCollApi;
      d.parent_obj = api;
      if (p2p) {
        d.p2p_api = {i == 0 ? "Send" : "Recv", shape_.bytes, "ncclInt8", nullptr, false};
      } else {
        d.coll_api = {shape_.func, shape_.bytes / 4, "ncclFloat32", 0, nullptr, false};
      }
      Start(&coll_api[i], &d, n->user);
      Stop(coll_api[i], n->user, kCbApi);
    }
    Record(api, nccl::kStateGroupEndApiStart, nullptr, n->user);
    d = {};
    d.type = nccl::kEventGroup;
    Start(&group, &d, n->user);
    for (int i = 0; i < (p2p ? 2 : 1); ++i) {
      d = {};
      d.parent_obj = coll_api[i];
      if (p2p) {
        d.type = nccl::kEventP2p;
        d.p2p = {i == 0 ? "Send" : "Recv",
                 nullptr,
                 "ncclInt8",
                 shape_.bytes,
                 1,
                 static_cast<uint8_t>(shape_.channels),
                 group};
      } else {
        d.type = nccl::kEventColl;
        d.coll.seq_number = seq;
        d.coll.func = shape_.func;
        d.coll.count = shape_.bytes / 4;
        d.coll.datatype = "ncclFloat32";
        d.coll.n_channels = static_cast<uint8_t>(shape_.channels);
        d.coll.algo = bench::AlgoName(shape_.algo);
        d.coll.proto = bench::ProtoName(shape_.proto);
        d.coll.parent_group = group;
      }
      Start(&h.parent[i], &d, n->user);
      n->null_handles += h.parent[i] == nullptr;
    }
    for (void* e : h.parent) {  // hostStreamPlanTask: ops posted, the Coll stopped at once
      if (e != nullptr) Stop(e, n->user, kCbCollStop);
    }
    Stop(group, n->user, kCbApi);
    Stop(api, n->user, kCbApi);
    (void)a;
    return h;
  }

  // The proxy thread's events of one collective.
  void Proxy(const Handoff& h, Counts* n) {
    const bool steps = (mask_ & (nccl::kEventProxyStep | nccl::kEventNetPlugin)) != 0;
    const bool p2p = shape_.algo == bench::Algo::kP2p;
    nccl::EventStateArgs a{};
    handles_.assign(ops_.size(), nullptr);
    for (size_t i = 0; i < ops_.size(); ++i) {
      nccl::EventDescrV5 d{};
      d.type = nccl::kEventProxyOp;
      d.parent_obj = h.parent[p2p && !ops_[i].is_send ? 1 : 0];
      d.proxy_op.pid = kPid;
      d.proxy_op.channel_id = static_cast<uint8_t>(ops_[i].channel);
      d.proxy_op.peer = ops_[i].peer;
      d.proxy_op.n_steps = ops_[i].steps;
      d.proxy_op.chunk_size = ops_[i].chunk_size;
      d.proxy_op.is_send = ops_[i].is_send ? 1 : 0;
      Start(&handles_[i], &d, n->proxy);
      n->null_handles += handles_[i] == nullptr;
      Record(handles_[i], nccl::kStateProxyOpInProgress, &a, n->proxy);
    }
    kernels_.assign(static_cast<size_t>(shape_.channels) * (p2p ? 2 : 1), nullptr);
    for (size_t k = 0; k < kernels_.size(); ++k) {
      nccl::EventDescrV5 d{};
      d.type = nccl::kEventKernelCh;
      d.parent_obj = h.parent[k % (p2p ? 2 : 1)];
      d.kernel_ch.channel_id = static_cast<uint8_t>(k / (p2p ? 2 : 1));
      d.kernel_ch.p_timer = 1'000'000 + k;
      Start(&kernels_[k], &d, n->proxy);
      n->null_handles += kernels_[k] == nullptr;
    }
    const int max_steps = ops_.empty() ? 0 : ops_[0].steps;
    for (int s = 0; steps && s < max_steps; ++s) {
      for (size_t i = 0; i < ops_.size(); ++i) Step(handles_[i], ops_[i], s, n);
    }
    for (void* k : kernels_) {
      a.kernel_ch.p_timer = 2'000'000;
      Record(k, nccl::kStateKernelChStop, &a, n->proxy);
      Stop(k, n->proxy, kCbKernelStop);
    }
    for (void* op : handles_) Stop(op, n->proxy, kCbProxyOpStop);
  }

 private:
  void Start(void** h, nccl::EventDescrV5* d, int& n) {
    const int64_t t0 = g_per_callback ? Now() : 0;
    t_->start_event(ctx_, h, d);
    if (g_per_callback) Sample(StartCategory(d->type), Now() - t0);
    ++n;
  }
  void Stop(void* h, int& n, Callback what) {
    const int64_t t0 = g_per_callback ? Now() : 0;
    t_->stop_event(h);
    if (g_per_callback) Sample(what, Now() - t0);
    ++n;
  }
  void Record(void* h, nccl::EventState s, nccl::EventStateArgs* a, int& n) {
    const int64_t t0 = g_per_callback ? Now() : 0;
    t_->record_event_state(h, s, a);
    if (g_per_callback) Sample(RecordCategory(s), Now() - t0);
    ++n;
  }
  void Sample(Callback what, int64_t ns) {
    if (t_ == g_other) return;  // --per-callback compares ours with the empty table only
    std::vector<int64_t>& v = (t_ == g_plugin ? g_plugin_samples : g_empty_samples)[what];
    if (v.size() < 2'000'000) v.push_back(ns);
  }
  void Step(void* op, const bench::ProxyOpShape& o, int step, Counts* n) {
    nccl::EventDescrV5 d{};
    d.type = nccl::kEventProxyStep;
    d.parent_obj = op;
    d.proxy_step.step = step;
    void* h = nullptr;
    Start(&h, &d, n->proxy);
    nccl::EventStateArgs a{};
    const uint64_t size = o.bytes / static_cast<uint64_t>(std::max(1, o.steps));
    if (o.is_send) {
      Record(h, nccl::kStateProxyStepSendGpuWait, &a, n->proxy);
      Record(h, nccl::kStateProxyStepSendPeerWait, &a, n->proxy);
      a.proxy_step.trans_size = size;
      Record(h, nccl::kStateProxyStepSendWait, &a, n->proxy);
    } else {
      Record(h, nccl::kStateProxyStepRecvWait, &a, n->proxy);
      a.proxy_step.trans_size = size;
      Record(h, nccl::kStateProxyStepRecvFlushWait, &a, n->proxy);
      Record(h, nccl::kStateProxyStepRecvGpuWait, &a, n->proxy);
    }
    Stop(h, n->proxy, kCbStep);
  }

  const nccl::ProfilerV5* t_;
  void* ctx_;
  bench::Shape shape_;
  std::vector<bench::ProxyOpShape> ops_;
  int mask_;
  std::vector<void*> handles_, kernels_;
};

// --one-thread: each collective's proxy events on the user thread right after its launch events
// (no cross-core traffic between NCCL's two threads: the callbacks' own cost).
bool g_one_thread = false;
// The activation mask NCCL keeps per communicator and hands the plugin at init (ABI §3): the
// plugin reads it back at each ProxyOp (Plugin::ProxyOpsTimed), so each row sets its own.
int g_nccl_mask = 0;

struct Row {
  double user_p50 = 0, proxy_p50 = 0;
  Counts counts;
};

double P50(std::vector<int64_t>& v) {
  if (v.empty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return static_cast<double>(v[v.size() / 2]);
}

// Runs `iterations` collectives of `s` through table `t` on two threads and returns the p50 of
// each thread's time per collective.
Row RunRow(const nccl::ProfilerV5* t, void* ctx, const bench::Shape& s, int mask, int iterations) {
  constexpr int kDepth = 32;  // collectives handed over and not yet run by the proxy thread
  Handoff ring[kDepth];
  std::atomic<int> posted{0}, done{0};
  std::vector<int64_t> user(iterations), proxy(iterations);
  Counts counts;
  std::atomic<int> null_handles{0};
  const bool plugin = t == g_plugin;
  // The mask the plugin reads back (its mask file would have set it; NCCL emits by it).
  if (plugin) std::atomic_ref<int>(g_nccl_mask).store(mask, std::memory_order_relaxed);
  const uint64_t records_per_collective =
      bench::PlanProxyOps(s).size() + (s.algo == bench::Algo::kP2p ? 2 : 1);
  Driver user_side(t, ctx, s, mask), proxy_side(t, ctx, s, mask);
  auto run_proxy = [&](int i) {
    Counts c;
    const int64_t t0 = Now();
    proxy_side.Proxy(ring[i % kDepth], &c);
    proxy[i] = Now() - t0;
    counts.proxy = c.proxy;
    null_handles.fetch_add(c.null_handles, std::memory_order_relaxed);
    done.store(i + 1, std::memory_order_release);
  };
  std::thread proxy_thread;  // none with --one-thread: the user thread runs both parts
  if (!g_one_thread) {
    proxy_thread = std::thread([&] {
      for (int i = 0; i < iterations; ++i) {
        while (posted.load(std::memory_order_acquire) <= i) {
        }
        run_proxy(i);
      }
    });
  }
  uint64_t target = nccl::CurrentStats().records_emitted;
  for (int i = 0; i < iterations; ++i) {
    while (i - done.load(std::memory_order_acquire) >= kDepth) {
    }
    // Every 256 collectives, untimed: the plugin's flush thread closes what was run (pools are
    // sized for bursts of 10,000 in flight, not for a bench that never lets the thread run).
    if (t == g_other && i > 0 && i % 256 == 0) {
      // Untimed: a plugin whose counters we cannot read gets two of our flush periods (its own
      // flush thread closes what was run; a full pool would show as null handles).
      while (done.load(std::memory_order_acquire) < i) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    if (plugin && i > 0 && i % 256 == 0) {
      while (done.load(std::memory_order_acquire) < i) {
      }
      target += 256 * records_per_collective;
      const int64_t give_up = Now() + 200'000'000;
      while (nccl::CurrentStats().records_emitted < target && Now() < give_up) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
      target = std::max(target, nccl::CurrentStats().records_emitted);
    }
    Counts c;
    const int64_t t0 = Now();
    ring[i % kDepth] = user_side.User(static_cast<uint64_t>(i), &c);
    user[i] = Now() - t0;
    counts.user = c.user;
    null_handles.fetch_add(c.null_handles, std::memory_order_relaxed);
    posted.store(i + 1, std::memory_order_release);
    if (g_one_thread) run_proxy(i);
  }
  if (proxy_thread.joinable()) proxy_thread.join();
  counts.null_handles = null_handles.load();
  Row r;
  r.user_p50 = P50(user);
  r.proxy_p50 = P50(proxy);
  r.counts = counts;
  return r;
}

// The p50 of each callback kind over every shape's rows, plugin and empty, and the p50 over all
// callbacks of the default-mask rows (each callback's added time: its own time minus its kind's
// empty p50).
void PrintPerCallback() {
  std::printf("per callback, timed one by one (two clock reads each), p50 in ns:\n");
  std::vector<int64_t> added_all;
  for (int k = 0; k < kCbKinds; ++k) {
    std::vector<int64_t>& p = g_plugin_samples[k];
    std::vector<int64_t>& e = g_empty_samples[k];
    if (p.empty() || e.empty()) continue;
    const double pe = P50(e);
    for (int64_t v : p) added_all.push_back(v - static_cast<int64_t>(pe));
    std::printf("  %-20s plugin %6.0f  empty %6.0f  added %6.0f  (%zu calls)\n", kCallbackNames[k],
                P50(p), pe, P50(p) - pe, p.size());
  }
  std::printf("added per callback at p50 over all %zu timed callbacks: %.0f ns (target <= 15 ns)\n",
              added_all.size(), P50(added_all));
}

// One shape's figures: medians over 3 rounds of four interleaved rows (empty and plugin at mask
// 74, empty and plugin at mask 90), each about `seconds` long.
struct ShapeResult {
  double user_added = 0, proxy_added = 0, proxy_added90 = 0;
  double other_proxy_added90 = 0;  // --compare-plugin's proxy thread at mask 90
  int user_calls = 0, proxy_calls = 0, proxy_calls90 = 0, null_handles = 0;
};

double Median3(double a, double b, double c) {
  return std::max(std::min(a, b), std::min(std::max(a, b), c));
}

ShapeResult MeasureShape(const bench::Shape& s, void* ctx, void* empty_ctx, double seconds) {
  const int deep = nccl::kDefaultEventMask | nccl::kEventProxyStep;
  const Row probe = RunRow(g_plugin, ctx, s, nccl::kDefaultEventMask, 50);
  const Row probe90 = RunRow(g_plugin, ctx, s, deep, 50);
  auto size = [seconds](const Row& p) {
    return std::clamp(static_cast<int>(seconds * 1e9 / std::max(1000.0, p.user_p50 + p.proxy_p50)),
                      200, 50000);
  };
  double user[3], proxy[3], proxy90[3], other90[3] = {0, 0, 0};
  ShapeResult out;
  for (int round = 0; round < 3; ++round) {
    const Row e = RunRow(g_empty, empty_ctx, s, nccl::kDefaultEventMask, size(probe));
    const Row p = RunRow(g_plugin, ctx, s, nccl::kDefaultEventMask, size(probe));
    const Row e90 = RunRow(g_empty, empty_ctx, s, deep, size(probe90));
    const Row p90 = RunRow(g_plugin, ctx, s, deep, size(probe90));
    user[round] = p.user_p50 - e.user_p50;
    proxy[round] = p.proxy_p50 - e.proxy_p50;
    proxy90[round] = p90.proxy_p50 - e90.proxy_p50;
    if (g_other != nullptr) {
      const Row o90 = RunRow(g_other, g_other_ctx, s, deep, size(probe90));
      other90[round] = o90.proxy_p50 - e90.proxy_p50;
      out.null_handles += o90.counts.null_handles;
    }
    out.user_calls = p.counts.user;
    out.proxy_calls = p.counts.proxy;
    out.proxy_calls90 = p90.counts.proxy;
    out.null_handles += p.counts.null_handles + p90.counts.null_handles;
  }
  out.user_added = Median3(user[0], user[1], user[2]);
  out.proxy_added = Median3(proxy[0], proxy[1], proxy[2]);
  out.proxy_added90 = Median3(proxy90[0], proxy90[1], proxy90[2]);
  out.other_proxy_added90 = Median3(other90[0], other90[1], other90[2]);
  return out;
}

// --compare-plugin: loads PATH's ncclProfiler_v5 table and inits it as NCCL would (its socket
// pointed nowhere, so an earlier build of ours drops its records as ours does here); exits with
// the reason on failure.
void LoadOtherPlugin(const char* path) {
  setenv("FABRICSCOPE_GPU_SOCKET", "/nonexistent/fabricscope-bench.sock", 1);
  setenv("FABRICSCOPE_NCCL_MASK_FILE", "", 1);
  // RTLD_DEEPBIND: an earlier build of this plugin binds to its own copies of the functions
  // this binary links too, never to ours.
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (lib == nullptr) {
    std::fprintf(stderr, "--compare-plugin: %s\n", dlerror());
    std::exit(2);
  }
  g_other = static_cast<const nccl::ProfilerV5*>(dlsym(lib, "ncclProfiler_v5"));
  if (g_other == nullptr) {
    std::fprintf(stderr, "--compare-plugin: %s has no ncclProfiler_v5 table\n", path);
    std::exit(2);
  }
  static int mask = 0;  // NCCL's comm keeps the mask the plugin writes: it outlives init
  if (g_other->init(&g_other_ctx, 0x5ea6, &mask, "shapes", bench::kNodes, bench::kRanks, 0,
                    nullptr) != 0) {
    std::fprintf(stderr, "--compare-plugin: %s: init failed\n", path);
    std::exit(2);
  }
  std::printf("compared with %s (\"%s\", it asks NCCL for mask %d), driven at mask 90\n", path,
              g_other->name, mask);
}

// A fresh plugin instance at `mask` (its first init allocates the pools); returns the context.
void* InitPlugin(int mask, int64_t* init_ns) {
  nccl::PluginOptions o;
  o.event_mask = mask;
  o.socket_path = "/nonexistent/fabricscope-bench.sock";  // agent absent: records are dropped
  o.mask_file = "";
  o.flush_period_ns = 1'000'000;
  nccl::SetOptionsForTesting(o);
  void* ctx = nullptr;
  const int64_t t0 = Now();
  if (kPlugin.init(&ctx, 0x5ea5, &g_nccl_mask, "shapes", bench::kNodes, bench::kRanks, 0,
                   nullptr) != 0) {
    std::fprintf(stderr, "plugin init failed\n");
    std::exit(1);
  }
  if (init_ns != nullptr) *init_ns = Now() - t0;
  return ctx;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 0.2;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--seconds-per-row=", 18) == 0) seconds = std::atof(argv[i] + 18);
    if (std::strncmp(argv[i], "--only=", 7) == 0) only = argv[i] + 7;
    if (std::strcmp(argv[i], "--one-thread") == 0) g_one_thread = true;
    if (std::strcmp(argv[i], "--per-callback") == 0) g_per_callback = g_one_thread = true;
    if (std::strncmp(argv[i], "--compare-plugin=", 17) == 0) LoadOtherPlugin(argv[i] + 17);
  }
  std::vector<int64_t> inits;
  int64_t init_ns = 0, cold_init_ns = 0;
  // One instance for both masks: the plugin takes whatever events NCCL sends; the mask only
  // decides which NCCL emits (the driver's), so the rows of both interleave in one run.
  void* ctx = InitPlugin(nccl::kDefaultEventMask, &cold_init_ns);
  const size_t pool_bytes = nccl::CurrentStats().pool_bytes;
  int m = 0;
  void* empty_ctx = nullptr;
  kEmpty.init(&empty_ctx, 0x5ea5, &m, "shapes", bench::kNodes, bench::kRanks, 0, nullptr);
  std::printf("machine: nproc=%u; 16 ranks on 2 nodes, the rank at a ring's node boundary; %s\n",
              std::thread::hardware_concurrency(),
              g_one_thread ? "both threads' events on one thread" : "user and proxy threads");
  std::printf("%-34s %9s %9s %9s %9s %9s %6s %7s %8s %8s\n", "shape (NCCL 2.28 chunking)",
              "calls u/p", "user+ns", "proxy+ns", "proxy90+", "p74/p90", "ns/cb", "dur us",
              "user %", "proxy %");
  double worst_ratio = 0, worst_cb = 0, worst_other = 0;
  for (const bench::Shape& s : bench::BenchShapes()) {
    const std::string name = bench::ShapeName(s);
    if (!only.empty() && name.find(only) == std::string::npos) continue;
    const ShapeResult r = MeasureShape(s, ctx, empty_ctx, seconds);
    const int calls = r.user_calls + r.proxy_calls;
    const double per_cb = (r.user_added + r.proxy_added) / std::max(1, calls);
    const double ratio = r.proxy_added90 > 0 ? r.proxy_added / r.proxy_added90 : 0;
    const double dur_us = bench::DurationUs(s);
    worst_ratio = std::max(worst_ratio, ratio);
    worst_cb = std::max(worst_cb, per_cb);
    char calls_col[32];
    std::snprintf(calls_col, sizeof(calls_col), "%d/%d(%d)", r.user_calls, r.proxy_calls,
                  r.proxy_calls90);
    if (r.null_handles > 0) {
      std::printf("  (%d events dropped by a full pool: the row is not valid)\n", r.null_handles);
    }
    std::printf("%-34s %9s %9.0f %9.0f %9.0f %9.2f %6.1f %7.1f %8.4f %8.4f\n", name.c_str(),
                calls_col, r.user_added, r.proxy_added, r.proxy_added90, ratio, per_cb, dur_us,
                100 * r.user_added / (dur_us * 1000), 100 * r.proxy_added / (dur_us * 1000));
    if (g_other != nullptr) {
      const double vs = r.other_proxy_added90 > 0 ? r.proxy_added / r.other_proxy_added90 : 0;
      worst_other = std::max(worst_other, vs);
      std::printf(
          "%-34s compared plugin's proxy thread at mask 90: +%.0f ns; ours at 74 / it: %.2f\n", "",
          r.other_proxy_added90, vs);
    }
  }
  kPlugin.finalize(ctx);
  if (g_other != nullptr) g_other->finalize(g_other_ctx);
  for (int i = 0; i < 3; ++i) {  // init and finalize again: the pools are allocated each time
    kPlugin.finalize(InitPlugin(nccl::kDefaultEventMask, &init_ns));
    inits.push_back(init_ns);
  }
  if (g_per_callback) PrintPerCallback();
  std::sort(inits.begin(), inits.end());
  std::printf(
      "columns: calls = callbacks per collective on the user/proxy thread at mask 74 (at 90); "
      "+ns = added over the empty table at p50; proxy90+ = the proxy thread's at mask 90; "
      "ns/cb = added per callback at mask 74; dur = NCCL's modelled duration at 400 Gb/s; "
      "%% = added time as a share of it\n");
  std::printf("proxy thread at the default mask vs mask 90: worst %.2fx (target <= 0.5x): %s\n",
              worst_ratio, worst_ratio <= 0.5 ? "met" : "NOT met");
  if (g_other != nullptr) {
    std::printf("proxy thread at the default mask vs the compared plugin at mask 90: worst %.2fx\n",
                worst_other);
  }
  std::printf("added per callback at p50, worst shape: %.1f ns (target <= 15 ns): %s\n", worst_cb,
              worst_cb <= 15 ? "met" : "NOT met");
  std::printf(
      "init, the process's first (pools and flush thread, untouched memory): %.2f ms "
      "(target <= 10 ms): %s; again after the last finalize, %zu runs: median %.2f ms, "
      "max %.2f ms\n",
      cold_init_ns / 1e6, cold_init_ns <= 10e6 ? "met" : "NOT met", inits.size(),
      inits[inits.size() / 2] / 1e6, inits.back() / 1e6);
  std::printf("plugin memory per process: %.2f MiB (pools, queues, buffers at the defaults)\n",
              pool_bytes / 1048576.0);
  return 0;
}
