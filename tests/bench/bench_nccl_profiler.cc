// Cost of the NCCL profiler plugin's callbacks, as NCCL pays it: calls through a ProfilerV5
// function table into the plugin core (linked statically here), against a table of empty
// callbacks called the same way in the same run. Each event (group of calls) is timed on its
// own, so the figures are percentiles that a noisy, shared machine does not move much: p50 and
// p99 per event on one thread and while a proxy thread runs ProxyOp/ProxyStep/KernelCh events
// on the same communicator; a whole collective with its children (2 ProxyOps, 2 KernelCh) in
// both of NCCL's orders (children before the Coll's stop, and after it, the usual one), also
// with a chained plugin that does nothing (FABRICSCOPE_NCCL_CHAIN); the record latency (last
// child's stop to the record at a receiver); and the plugin's pool memory.
// Plain binary: fabricscope_bench_nccl [--iterations=N]

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collectors/nccl/profiler.h"
#include "collectors/nccl/profiler_abi.h"
#include "tests/bench/nccl_tables.h"
#include "tests/common/gpu_receiver.h"

namespace nccl = fabricscope::collectors::nccl;

namespace {

using namespace ::fabricscope::bench::nccl_tables;  // NOLINT: the tables and Now()

nccl::EventDescrV5 CollDescr(uint64_t seq) {
  nccl::EventDescrV5 d{};
  d.type = nccl::kEventColl;
  d.coll.seq_number = seq;
  d.coll.func = "AllReduce";
  d.coll.count = 1 << 20;
  d.coll.datatype = "ncclFloat32";
  d.coll.n_channels = 2;
  d.coll.algo = "RING";
  d.coll.proto = "SIMPLE";
  return d;
}

void CollPair(const nccl::ProfilerV5* t, void* ctx, uint64_t seq) {
  nccl::EventDescrV5 d = CollDescr(seq);
  void* h = nullptr;
  t->start_event(ctx, &h, &d);
  t->stop_event(h);
}

void KernelChannel(const nccl::ProfilerV5* t, void* ctx, void* coll, uint64_t i) {
  nccl::EventDescrV5 k{};
  k.type = nccl::kEventKernelCh;
  k.parent_obj = coll;
  k.kernel_ch.p_timer = 1'000'000 + i;
  void* h = nullptr;
  t->start_event(ctx, &h, &k);
  nccl::EventStateArgs a{};
  a.kernel_ch.p_timer = 2'000'000 + i;
  t->record_event_state(h, nccl::kStateKernelChStop, &a);
  t->stop_event(h);
}

void ProxyStep(const nccl::ProfilerV5* t, void* ctx, void* op, int step) {
  nccl::EventDescrV5 sd{};
  sd.type = nccl::kEventProxyStep;
  sd.parent_obj = op;
  sd.proxy_step.step = step;
  void* h = nullptr;
  t->start_event(ctx, &h, &sd);
  nccl::EventStateArgs a{};
  t->record_event_state(h, nccl::kStateProxyStepSendGpuWait, &a);
  t->record_event_state(h, nccl::kStateProxyStepSendPeerWait, &a);
  a.proxy_step.trans_size = 65536;
  t->record_event_state(h, nccl::kStateProxyStepSendWait, &a);
  t->stop_event(h);
}

void* StartProxyOp(const nccl::ProfilerV5* t, void* ctx, void* coll) {
  nccl::EventDescrV5 od{};
  od.type = nccl::kEventProxyOp;
  od.parent_obj = coll;
  od.proxy_op.pid = kPid;
  od.proxy_op.peer = 1;
  od.proxy_op.n_steps = 8;
  od.proxy_op.is_send = 1;
  void* op = nullptr;
  t->start_event(ctx, &op, &od);
  return op;
}

struct Stats {
  double p50, p99, p999;
};

Stats Percentiles(std::vector<int64_t>& v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {static_cast<double>(v[n / 2]), static_cast<double>(v[n * 99 / 100]),
          static_cast<double>(v[n * 999 / 1000])};
}

// Times `event(i)` n times, one sample each; every 1024 events waits (untimed, at most 100 ms)
// until the plugin's flush thread has closed what was started, so pools do not run dry.
Stats Measure(int n, const std::function<void(uint64_t)>& event, bool wait_for_flush) {
  std::vector<int64_t> v(n);
  // Records the flush thread has closed (a failed send also counts each as dropped: the agent
  // is absent here, so `dropped` cannot tell pool exhaustion apart).
  uint64_t target = nccl::CurrentStats().records_emitted;
  for (int i = 0; i < n; ++i) {
    const int64_t a = Now();
    event(i);
    v[i] = Now() - a;
    if (wait_for_flush && (i & 1023) == 1023) {
      target += 1024;
      const int64_t give_up = Now() + 100'000'000;
      while (nccl::CurrentStats().records_emitted < target && Now() < give_up) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }
  return Percentiles(v);
}

void Row(const char* what, const Stats& plugin, const Stats& empty) {
  std::printf("%-46s %7.0f %7.0f %7.0f   %7.0f %7.0f   %7.0f\n", what, plugin.p50, plugin.p99,
              plugin.p999, empty.p50, empty.p99, plugin.p50 - empty.p50);
}

// One collective with its children as NCCL's threads emit them (ABI §6.2): Coll start, two
// ProxyOps (start + state 19) and two KernelCh (start, state 22, stop), the ProxyOp stops, and
// the Coll's stop either after the children started (`children_first`) or right after its start
// (NCCL's usual order: hostStreamPlanTask stops it once the ops are posted).
void CollectiveWithChildren(const nccl::ProfilerV5* t, void* ctx, uint64_t seq,
                            bool children_first) {
  nccl::EventDescrV5 d = CollDescr(seq);
  void* coll = nullptr;
  t->start_event(ctx, &coll, &d);
  if (!children_first) t->stop_event(coll);
  void* ops[2];
  nccl::EventStateArgs a{};
  for (void*& op : ops) {
    op = StartProxyOp(t, ctx, coll);
    t->record_event_state(op, nccl::kStateProxyOpInProgress, &a);
  }
  void* kch[2];
  for (int c = 0; c < 2; ++c) {
    nccl::EventDescrV5 k{};
    k.type = nccl::kEventKernelCh;
    k.parent_obj = coll;
    k.kernel_ch.channel_id = static_cast<uint8_t>(c);
    k.kernel_ch.p_timer = 1'000'000 + seq;
    t->start_event(ctx, &kch[c], &k);
  }
  if (children_first) t->stop_event(coll);
  for (void* k : kch) {
    a.kernel_ch.p_timer = 2'000'000 + seq;
    t->record_event_state(k, nccl::kStateKernelChStop, &a);
    t->stop_event(k);
  }
  for (void* op : ops) t->stop_event(op);
}

// A receiver that notes when each collective record arrives.
class TimedReceiver : public fabricscope::testing::GpuReceiver {
 public:
  void OnCollective(const fabricscope::collectors::gpu::CollectiveRecord& r) override {
    const int64_t now = Now();
    std::lock_guard<std::mutex> lock(mu_);
    arrivals_.push_back({r.seq, now});
  }
  std::vector<std::pair<uint64_t, int64_t>> arrivals() {
    std::lock_guard<std::mutex> lock(mu_);
    return arrivals_;
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<uint64_t, int64_t>> arrivals_;
};

// Record latency: from the last child's stop to the record's arrival at a receiver, for `n`
// collectives issued one every 20 us with the default flush period (5 ms).
Stats RecordLatency(int n, size_t* received) {
  TimedReceiver rx;
  if (!rx.Start()) return {0, 0, 0};
  nccl::PluginOptions o;
  o.socket_path = rx.path();
  o.mask_file = "";
  nccl::SetOptionsForTesting(o);
  int mask = 0;
  void* ctx = nullptr;
  if (kPlugin.init(&ctx, 0x77, &mask, "latency", 1, 2, 0, nullptr) != 0) return {0, 0, 0};
  std::vector<int64_t> last_stop(n);
  for (int i = 0; i < n; ++i) {
    const int64_t due = Now() + 20'000;
    CollectiveWithChildren(g_plugin, ctx, static_cast<uint64_t>(i), false);
    last_stop[i] = Now();
    while (Now() < due) {
    }
  }
  const int64_t give_up = Now() + 2'000'000'000;
  while (rx.arrivals().size() < static_cast<size_t>(n) && Now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  kPlugin.finalize(ctx);
  rx.Stop();
  std::vector<int64_t> lat;
  for (const auto& [seq, at] : rx.arrivals()) {
    if (seq < static_cast<uint64_t>(n)) lat.push_back(at - last_stop[seq]);
  }
  *received = lat.size();
  if (lat.empty()) return {0, 0, 0};
  return Percentiles(lat);
}

// Both orders of a collective with its children on a fresh plugin instance (chained to the no-op
// plugin when `chain`): children_first[0] and nccl_order[1].
void CollectiveRows(int iterations, bool chain, Stats out[2], bool channel_spans = false) {
  nccl::PluginOptions o;
  o.channel_spans = channel_spans;
  o.socket_path = "/nonexistent/fabricscope-bench.sock";  // agent absent: records are dropped
  o.mask_file = "";
  o.flush_period_ns = 1'000'000;
  if (chain) o.chain_path = FABRICSCOPE_NOOP_PLUGIN;
  nccl::SetOptionsForTesting(o);
  int mask = 0;
  void* ctx = nullptr;
  if (kPlugin.init(&ctx, 0x4321, &mask, "rows", 1, 2, 0, nullptr) != 0) return;
  if (chain && !nccl::CurrentStats().chained)
    std::printf("chaining to %s FAILED\n", o.chain_path.c_str());
  for (int order = 0; order < 2; ++order) {
    auto one = [ctx, order](uint64_t i) { CollectiveWithChildren(g_plugin, ctx, i, order == 0); };
    Measure(iterations / 10, one, true);  // warm-up
    out[order] = Measure(iterations, one, true);
  }
  kPlugin.finalize(ctx);
}

// Events to time: factories of the callables Measure runs.
auto CollPairEvent(const nccl::ProfilerV5* t, void* c) {
  return [t, c](uint64_t i) { CollPair(t, c, i); };
}
auto KernelEvent(const nccl::ProfilerV5* t, void* c, void* parent) {
  return [t, c, parent](uint64_t i) { KernelChannel(t, c, parent, i); };
}
auto StepEvent(const nccl::ProfilerV5* t, void* c, void* parent) {
  return [t, c, parent](uint64_t i) { ProxyStep(t, c, parent, static_cast<int>(i & 7)); };
}

// Everything the report prints; _p the plugin, _e the empty table, _c the plugin while a proxy
// thread runs.
struct Results {
  Stats coll_p, coll_e, kch_p, kch_e, step_p, step_e, coll_c, kch_c;
  uint64_t proxy_events = 0;
  Stats plain[2], chained[2], spans[2],
      empty[2];  // whole collectives: children first[0], NCCL order[1]
  Stats latency;
  size_t received = 0;
  nccl::PluginStats stats;
};

void PrintMachine(int iterations) {
  std::printf("machine: nproc=%u, loadavg=", std::thread::hardware_concurrency());
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof(buf), f) != nullptr) std::printf("%.14s", buf);
    std::fclose(f);
  }
  std::printf(", samples per row=%d\n", iterations);
}

// Contention: a proxy thread runs ProxyOps with 8 steps each and KernelCh events under its own
// long-lived Coll on the same communicator, as NCCL's proxy thread would.
void MeasureContended(int iterations, void* ctx, void* coll, Results* r) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> proxy_events{0};
  std::thread proxy([&] {
    nccl::EventDescrV5 d = CollDescr(1);
    void* pcoll = nullptr;
    kPlugin.start_event(ctx, &pcoll, &d);
    for (uint64_t i = 0; !stop.load(std::memory_order_relaxed); ++i) {
      void* pop = StartProxyOp(g_plugin, ctx, pcoll);
      for (int s = 0; s < 8; ++s) ProxyStep(g_plugin, ctx, pop, s);
      kPlugin.stop_event(pop);
      KernelChannel(g_plugin, ctx, pcoll, i);
      proxy_events.fetch_add(10, std::memory_order_relaxed);
    }
    kPlugin.stop_event(pcoll);
  });
  r->coll_c = Measure(iterations, CollPairEvent(g_plugin, ctx), true);
  r->kch_c = Measure(iterations, KernelEvent(g_plugin, ctx, coll), false);
  stop.store(true);
  proxy.join();
  r->proxy_events = proxy_events.load();
}

// The per-event rows, on one thread and then contended.
void MeasureEvents(int iterations, void* ctx, void* empty_ctx, Results* r) {
  // Long-lived parents for KernelCh and ProxyStep events (as under a running collective).
  nccl::EventDescrV5 cd = CollDescr(0);
  void* coll = nullptr;
  kPlugin.start_event(ctx, &coll, &cd);
  void* op = StartProxyOp(g_plugin, ctx, coll);
  void* ecoll = nullptr;
  kEmpty.start_event(empty_ctx, &ecoll, &cd);
  void* eop = StartProxyOp(g_empty, empty_ctx, ecoll);

  Measure(iterations / 10, CollPairEvent(g_plugin, ctx), true);  // warm-up
  r->coll_p = Measure(iterations, CollPairEvent(g_plugin, ctx), true);
  r->coll_e = Measure(iterations, CollPairEvent(g_empty, empty_ctx), false);
  r->kch_p = Measure(iterations, KernelEvent(g_plugin, ctx, coll), false);
  r->kch_e = Measure(iterations, KernelEvent(g_empty, empty_ctx, ecoll), false);
  r->step_p = Measure(iterations, StepEvent(g_plugin, ctx, op), false);
  r->step_e = Measure(iterations, StepEvent(g_empty, empty_ctx, eop), false);

  MeasureContended(iterations, ctx, coll, r);
  kPlugin.stop_event(op);
  kPlugin.stop_event(coll);
}

void PrintReport(const Results& r, const nccl::PluginOptions& o) {
  std::printf(
      "\n=== NCCL profiler plugin: ns per event incl. two clock reads; empty = same call path, "
      "no work\n");
  std::printf("%-46s %7s %7s %7s   %7s %7s   %7s\n", "event", "p50", "p99", "p99.9", "empty50",
              "empty99", "added50");
  Row("Coll start+stop (1 thread)", r.coll_p, r.coll_e);
  Row("Coll start+stop (proxy thread running)", r.coll_c, r.coll_e);
  Row("KernelCh start+record(22)+stop (1 thread)", r.kch_p, r.kch_e);
  Row("KernelCh start+record(22)+stop (proxy running)", r.kch_c, r.kch_e);
  Row("ProxyStep start+3 records+stop (1 thread)", r.step_p, r.step_e);
  Row("collective+2 ProxyOp+2 KernelCh, children first", r.plain[0], r.empty[0]);
  Row("collective+children, NCCL order (Coll stop 1st)", r.plain[1], r.empty[1]);
  Row("same, chained to a no-op plugin, children 1st", r.chained[0], r.empty[0]);
  Row("same, chained to a no-op plugin, NCCL order", r.chained[1], r.empty[1]);
  Row("same, channel spans on, children first", r.spans[0], r.empty[0]);
  Row("same, channel spans on, NCCL order", r.spans[1], r.empty[1]);
  std::printf(
      "channel spans (FABRICSCOPE_NCCL_CHANNEL_SPANS=1) on NCCL's threads, p50 per collective: "
      "%.2fx / %.2fx the plain rows (children first / NCCL order)\n",
      r.spans[0].p50 / r.plain[0].p50, r.spans[1].p50 / r.plain[1].p50);
  double worst = 0;
  for (const Stats* s : {&r.plain[0], &r.plain[1], &r.chained[0], &r.chained[1]}) {
    worst = std::max(worst, s->p99 - r.empty[s == &r.plain[0] || s == &r.chained[0] ? 0 : 1].p99);
  }
  std::printf(
      "per-collective p99 target <= 200 ns added incl. children: %s (worst row %.0f ns over the "
      "empty table's p99; Coll alone %.0f ns, contended %.0f ns)\n",
      worst <= 200 ? "met" : "NOT met", worst, r.coll_p.p99, r.coll_c.p99);
  std::printf(
      "record latency, last child's stop -> record at a receiver (flush period 5 ms, %zu of "
      "20000 received): p50 %.2f ms, p99 %.2f ms, p99.9 %.2f ms; target p99 <= 50 ms: %s\n",
      r.received, r.latency.p50 / 1e6, r.latency.p99 / 1e6, r.latency.p999 / 1e6,
      r.received == 20000 && r.latency.p99 <= 50e6 ? "met" : "NOT met");
  std::printf("proxy thread events during the contended rows: %lu\n",
              static_cast<unsigned long>(r.proxy_events));
  std::printf(
      "plugin memory (pools, queues, buffers allocated at the first init): %.2f MiB for %u "
      "collectives, %u proxy ops, %u kernel channels in flight\n",
      r.stats.pool_bytes / 1048576.0, o.pool_ops, o.pool_proxy_ops, o.pool_kernel_ch);
  std::printf("records emitted %lu, dropped %lu (agent absent: all dropped by design)\n",
              static_cast<unsigned long>(r.stats.records_emitted),
              static_cast<unsigned long>(r.stats.dropped));
}

}  // namespace

int main(int argc, char** argv) {
  int iterations = 1'000'000;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--iterations=", 13) == 0) iterations = std::atoi(argv[i] + 13);
  }
  nccl::PluginOptions o;
  o.event_mask = nccl::kEventColl | nccl::kEventProxyOp | nccl::kEventProxyStep;
  o.socket_path = "/nonexistent/fabricscope-bench.sock";  // agent absent: records are dropped
  o.mask_file = "";
  o.flush_period_ns = 1'000'000;
  o.linger_ns = 0;
  nccl::SetOptionsForTesting(o);  // default pool sizes
  int mask = 0;
  void* ctx = nullptr;
  void* empty_ctx = nullptr;
  if (kPlugin.init(&ctx, 0x1234, &mask, "bench", 1, 2, 0, nullptr) != 0) return 1;
  kEmpty.init(&empty_ctx, 0x1234, &mask, "bench", 1, 2, 0, nullptr);
  PrintMachine(iterations);

  Results r;
  MeasureEvents(iterations, ctx, empty_ctx, &r);
  r.stats = nccl::CurrentStats();
  kPlugin.finalize(ctx);
  // A whole collective with its children, both orders; plain and chained; the empty baseline.
  CollectiveRows(iterations, false, r.plain);
  CollectiveRows(iterations, true, r.chained);
  CollectiveRows(iterations, false, r.spans, true);
  for (int order = 0; order < 2; ++order) {
    auto one = [empty_ctx, order](uint64_t i) {
      CollectiveWithChildren(g_empty, empty_ctx, i, order == 0);
    };
    r.empty[order] = Measure(iterations, one, false);
  }
  r.latency = RecordLatency(20000, &r.received);

  PrintReport(r, o);
  return 0;
}
