// fabricscope_bench_cluster: the aggregator's ClusterState fed by 1,000 simulated GPU nodes,
// each sending one batch per 1 s window with 8 PortWindows and 100 Collective records, each with
// the CollectiveAnalysis the agent puts inside it (Collective.analysis).
//
// Communicators: every node has 8 ranks (one GPU per rail). Groups of 8 consecutive nodes form
// rail communicators: rank r of the 8 nodes of group g share comm (g, r), 8 ranks, one per node,
// so that every (comm_hash, func, seq) instance is completed by 8 different nodes' batches and
// the cross-rank matching really matches. A node's 100 collectives per window go round-robin over
// its 8 rails (13 on rails 0-3, 12 on rails 4-7), the same on all nodes of the group.
//
//   ingest 1 thread:  every node's serialized batch, window after window, in a seeded random
//                     order within each window (agents close their windows at their own
//                     times), parsed into its node's own message (reused from window to window)
//                     and handed to Admission::OnBatch at once, as the gRPC reactor does
//                     (exporters/ingest/telemetry_service.cc: StartRead(&in_) into the stream's
//                     one AgentMessage, then OnBatch on it); batches/s and collective instances
//                     matched per second (CrossRankAnalysis::instances_total() delta).
//                     baseline: that parse, timed batch by batch next to its OnBatch;
//                     ratio = OnBatch time / parse time (median over windows).
//   ingest N threads: the same batches in the same order on N = 2 and 4 threads, each node on
//                     one thread (as each agent's stream is), a std::barrier per window;
//                     speed-up of the whole ingest (parse + OnBatch) over 1 thread, against the
//                     machine's own ceiling: the same windows parsed on N threads that share
//                     nothing.
//   matching:         a standalone CrossRankAnalysis fed the same batches: analyses matched per
//                     second; baseline: parse time of the same batches.
//   memory:           heap growth (HeapInUse: tcmalloc) and RSS growth per node once every per-node
//   ring
//                     (1,024 recent collectives) is full, and CrossRankAnalysis::memory_bytes().
//   render:           HttpServer::RenderMetrics() over the whole cluster (median of --repeat);
//                     baseline: copying the rendered body.
//   remote-write:     the WriteRequest of the same snapshot, its protobuf and snappy sizes, and
//                     how many minutes of a receiver outage the default queue holds at 15 s.
//
// The machine is shared and noisy: figures are medians where repeated, ratios are measured in
// the same run. Flags: --nodes=N (1000), --collectives=N (100 per node per window),
// --warmup_windows=N (11: fills the 1,024-collective rings), --windows=N (4 measured windows
// per mode and round), --rounds=N (3 rounds of 1, 2 and 4 threads), --repeat=N (3 renders).

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "exporters/analysis/cross_rank.h"
#include "exporters/ingest/admission.h"
#include "exporters/state/cluster_state.h"
#include "fabricscope/v1/telemetry.pb.h"
#include "tests/bench/bench_cluster_output.h"
#include "tests/bench/bench_common.h"
#include "tests/bench/bench_hello.h"

namespace fabricscope::bench {
namespace {

constexpr int kRails = 8;  // ranks (GPUs) per node, one rail each
constexpr int kGroupNodes = 8;
constexpr int64_t kWindowNs = 1'000'000'000;
constexpr int64_t kUnixOffsetNs = 1'764'000'000'000'000'000;

size_t g_nodes = 1000;
int g_collectives = 100;
int g_warmup = 11;
int g_windows = 4;
int g_repeat = 3;
int g_rounds = 3;

const char* const kFuncs[] = {"AllReduce", "AllGather", "ReduceScatter"};

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Resident set size from /proc/self/statm, bytes.
size_t RssBytes() {
  std::ifstream f("/proc/self/statm");
  size_t pages = 0, resident = 0;
  f >> pages >> resident;
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

// Communicator hash of rail `rail` of node group `group` (any fixed mixing will do).
uint64_t CommHash(size_t group, int rail) {
  return (static_cast<uint64_t>(group) * 0x9E3779B97F4A7C15ull) ^
         (static_cast<uint64_t>(rail + 1) * 0xC2B2AE3D27D4EB4Full);
}

// Node `node`'s batch template: the fields that do not change from window to window. SetWindow
// fills the rest.
v1::Batch MakeTemplate(size_t node) {
  v1::Batch b;
  b.set_unix_offset_ns(kUnixOffsetNs);
  for (int p = 0; p < kRails; ++p) {
    v1::PortWindow* pw = b.add_ports();
    pw->set_port_index(static_cast<uint32_t>(p));
    pw->set_utilization_valid(true);
    for (v1::DirectionWindow* d : {pw->mutable_transmit(), pw->mutable_receive()}) {
      d->set_has_bytes(true);
      d->set_has_packets(true);
      d->set_mean_utilization(0.55 + 0.01 * static_cast<double>((node + p) % 10));
      d->set_peak_utilization(0.98);
      d->set_samples(10'000);
      v1::Histogram* u = d->mutable_sample_utilization();
      for (int i = 1; i <= 10; ++i) u->add_upper_bounds(0.1 * i);
      for (int i = 0; i <= 10; ++i) u->add_bucket_counts(i == 6 ? 9'000 : 100);
      u->set_count(10'000);
      u->set_sum(6'000);
    }
    for (const char* kind : {"symbol_error", "port_rcv_errors", "port_xmit_discards"}) {
      v1::ErrorCounter* ec = pw->add_errors();
      ec->set_kind(kind);
    }
  }
  const size_t group = node / kGroupNodes;
  for (int i = 0; i < g_collectives; ++i) {
    const int rail = i % kRails;
    v1::Collective* c = b.add_collectives();
    c->set_comm_hash(CommHash(group, rail));
    c->set_rank(static_cast<int32_t>(node % kGroupNodes));
    c->set_nranks(kGroupNodes);
    c->set_func(kFuncs[(i / kRails) % 3]);
    c->set_bytes(64u << 20);
    c->set_count(16u << 20);
    c->set_datatype("float32");
    c->set_algo("Ring");
    c->set_proto("Simple");
    c->set_channels(16);
    c->set_root(-1);
    c->set_peer(-1);
    c->set_timing_source(v1::TIMING_SOURCE_PROXY_OP);
    c->set_pid(4000 + rail);
    c->set_gpu(rail);
    c->set_proxy_ops(64);
    for (int peer : {-1, 1}) {
      v1::ProxyPeer* pp = c->add_proxy_peers();
      pp->set_peer(static_cast<int32_t>((node + kGroupNodes + peer) % kGroupNodes));
      pp->set_bytes_sent(56u << 20);
      pp->set_bytes_received(56u << 20);
    }
    v1::CollectiveAnalysis* a = c->mutable_analysis();
    a->set_cause(v1::COLLECTIVE_CAUSE_NORMAL);
    a->set_detail("mlx5_" + std::to_string(rail) + ":1: busiest, 61% mean utilization");
    a->set_port_index(rail);
    v1::PortActivity* pa = a->add_ports();
    pa->set_port_index(static_cast<uint32_t>(rail));
    pa->set_transmit_bytes(56u << 20);
    pa->set_receive_bytes(56u << 20);
    pa->set_mean_utilization(0.61);
    pa->set_peak_utilization(0.97);
    pa->set_samples(40);
  }
  v1::CollectiveAnalysisStats* st = b.mutable_collective_analysis();
  st->set_network_share_ratio(0.4);
  st->set_share_seconds(1.0);
  b.mutable_gpu();
  return b;
}

// Rewrites the window-dependent fields of node `node`'s batch for window `w` (seq w + 2, after
// the seq-1 batch sent with the Hello). Collective i of window w is the (w * per_rail + i / 8)-th
// of its rail, sent with its analysis (Collective.analysis: the agent sends a collective once the
// samples covering it are in, which for all but the last ones of a window is before the window
// closes).
void SetWindow(size_t node, uint64_t w, v1::Batch* b) {
  b->set_seq(w + 2);
  const int64_t start = static_cast<int64_t>(w) * kWindowNs;
  b->set_window_start_ns(start);
  b->set_window_end_ns(start + kWindowNs);
  const uint64_t per_rail = static_cast<uint64_t>((g_collectives + kRails - 1) / kRails);
  for (v1::PortWindow& pw : *b->mutable_ports()) {
    for (v1::DirectionWindow* d : {pw.mutable_transmit(), pw.mutable_receive()}) {
      d->set_bytes(30'000'000'000 + (node * 7 + w) % 1'000'000);
      d->set_bytes_total((w + 1) * 30'000'000'000);
      d->set_packets(7'000'000);
      d->set_packets_total((w + 1) * 7'000'000);
    }
  }
  // The same slots on every node of a group, and the same per-rank skew pattern, so that every
  // instance completes (some with a straggler).
  const int64_t slot_ns = kWindowNs / (g_collectives + 1);
  const int64_t skew_ns = static_cast<int64_t>(node % kGroupNodes) * 20'000;
  for (int i = 0; i < g_collectives; ++i) {
    v1::Collective* c = b->mutable_collectives(i);
    const uint64_t seq = w * per_rail + static_cast<uint64_t>(i / kRails);
    const int64_t s = start + i * slot_ns + skew_ns;
    const int64_t dur = slot_ns / 2;
    c->set_seq(seq);
    c->set_enqueue_start_ns(s - 5'000);
    c->set_enqueue_end_ns(s - 1'000);
    c->set_start_ns(s);
    c->set_end_ns(s + dur);
    c->set_duration_seconds(static_cast<double>(dur) / 1e9);
    c->set_algbw_bytes_per_second(static_cast<double>(c->bytes()) * 1e9 / static_cast<double>(dur));
    c->set_busbw_bytes_per_second(c->algbw_bytes_per_second() * 2 * (kGroupNodes - 1) /
                                  kGroupNodes);
    c->set_proxy_bytes(112u << 20);
  }
}

struct Cluster {
  std::vector<std::string> names;
  std::vector<v1::Batch> batches;  // one per node, rewritten per window
  std::vector<std::string> wire;   // batches, serialized
  std::vector<v1::Batch> streams;  // one per node: what its stream parses into
};

// One ingest run: the wall time of its window loops (parse + OnBatch) and the time spent
// parsing and in OnBatch, summed over batches (and threads).
struct IngestTimes {
  double wall = 0, parse = 0, on_batch = 0;
};

// The order in which window w's batches arrive: a seeded shuffle of the nodes (agents close
// their windows at their own times), the same for every thread count.
std::vector<size_t> ArrivalOrder(size_t n, uint64_t w) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::mt19937_64 rng(0x5eed0000 + w);
  std::shuffle(order.begin(), order.end(), rng);
  return order;
}

// Ingests windows [first, first + count) of all nodes into `state` on `threads` threads, each
// node's batches on one thread (as each agent's stream is served by one thread: node i on
// thread i % threads), in ArrivalOrder: each batch is parsed into its node's stream message,
// then OnBatch (serializing the window is outside the times).
IngestTimes Ingest(Cluster& c, exporters::ClusterState& state, uint64_t first, int count,
                   int threads) {
  const size_t n = c.names.size();
  c.wire.resize(n);
  c.streams.resize(n);
  IngestTimes times;
  exporters::Admission admission(state);  // the checks every gRPC stream's batch passes
  std::vector<IngestTimes> per_thread(static_cast<size_t>(threads));
  std::barrier sync(threads);
  Clock::time_point t0;
  auto work = [&](int t) {
    IngestTimes& mine = per_thread[static_cast<size_t>(t)];
    for (uint64_t w = first; w < first + static_cast<uint64_t>(count); ++w) {
      const std::vector<size_t> order = ArrivalOrder(n, w);
      for (size_t i = static_cast<size_t>(t); i < n; i += static_cast<size_t>(threads)) {
        SetWindow(i, w, &c.batches[i]);
        c.batches[i].SerializeToString(&c.wire[i]);
      }
      sync.arrive_and_wait();
      if (t == 0) t0 = Clock::now();
      sync.arrive_and_wait();
      for (size_t i : order) {
        if (i % static_cast<size_t>(threads) != static_cast<size_t>(t)) continue;
        const auto a = Clock::now();
        if (!c.streams[i].ParseFromString(c.wire[i])) std::abort();
        const auto b = Clock::now();
        if (!admission.OnBatch(c.names[i], i + 1, c.streams[i]).ok()) std::abort();
        mine.parse += Seconds(a, b);
        mine.on_batch += Seconds(b, Clock::now());
      }
      sync.arrive_and_wait();
      if (t == 0) times.wall += Seconds(t0, Clock::now());
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work, t);
  work(0);
  for (std::thread& th : pool) th.join();
  for (const IngestTimes& p : per_thread) {
    times.parse += p.parse;
    times.on_batch += p.on_batch;
  }
  return times;
}

// Seconds to parse every node's serialized batch of window w (the baseline), over `count`
// windows, on `threads` threads (nodes round-robin; each thread parses into its own message):
// with more than one, the machine's own ceiling for an ingest that shares nothing.
double ParseBaseline(Cluster& c, uint64_t first, int count, int threads = 1) {
  const size_t n = c.names.size();
  std::vector<std::string> wire(n);
  double busy = 0;
  for (uint64_t w = first; w < first + static_cast<uint64_t>(count); ++w) {
    for (size_t i = 0; i < n; ++i) {
      SetWindow(i, w, &c.batches[i]);
      c.batches[i].SerializeToString(&wire[i]);
    }
    auto parse = [&](int t) {
      v1::Batch parsed;
      for (size_t i = static_cast<size_t>(t); i < n; i += static_cast<size_t>(threads)) {
        if (!parsed.ParseFromString(wire[i])) std::abort();
      }
    };
    const auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(parse, t);
    parse(0);
    for (std::thread& th : pool) th.join();
    busy += Seconds(t0, Clock::now());
  }
  return busy;
}

// The simulated nodes' names and batch templates (window 0 set on the first, for its size).
// The streams' messages and wire buffers are the gRPC layer's, not the state's: allocated (one
// window parsed into each) before the heap is measured.
void PrimeStreams(Cluster& c) {
  c.wire.resize(g_nodes);
  c.streams.resize(g_nodes);
  for (size_t i = 0; i < g_nodes; ++i) {
    SetWindow(i, 0, &c.batches[i]);
    c.batches[i].SerializeToString(&c.wire[i]);
    if (!c.streams[i].ParseFromString(c.wire[i])) std::abort();
  }
}

Cluster MakeCluster() {
  Cluster c;
  for (size_t i = 0; i < g_nodes; ++i) {
    c.names.push_back(NodeName(i));
    c.batches.push_back(MakeTemplate(i));
  }
  SetWindow(0, 1, &c.batches[0]);
  return c;
}

// One mode of the ingest: its seconds, its ceiling (the same windows parsed on as many
// threads) and their ratios to 1 thread, per round.
struct Threaded {
  int threads;
  // Per round: the ingest's wall time (parse + OnBatch), its time in parse and in OnBatch
  // (summed over batches), and the same windows parsed alone on as many threads.
  std::vector<double> seconds, parse_seconds, on_batch_seconds, ceiling_parse_seconds;
  std::vector<double> speedup, ceiling;
  // 1 thread: OnBatch over parse per window, both timed batch by batch (this machine's speed
  // drifts over seconds; a batch's parse and OnBatch share it).
  std::vector<double> window_ratios;
  uint64_t instances = 0;
};

// Rounds of 1, 2 and 4 threads on `state` from window *window on (advanced past them).
std::vector<Threaded> MeasureThreads(Cluster& c, exporters::ClusterState& state, uint64_t* window) {
  // The speed-ups are ratios within a round; Run prints their median over the rounds.
  std::vector<Threaded> modes(3);
  modes[0].threads = 1;
  modes[1].threads = 2;
  modes[2].threads = 4;
  for (int round = 0; round < g_rounds; ++round) {
    for (Threaded& m : modes) {
      const uint64_t before = state.cross_rank().instances_total();
      // The ceiling: the same windows parsed alone on as many threads.
      m.ceiling_parse_seconds.push_back(ParseBaseline(c, *window, g_windows, m.threads));
      IngestTimes all;
      for (int k = 0; k < g_windows; ++k) {
        const IngestTimes t = Ingest(c, state, *window + static_cast<uint64_t>(k), 1, m.threads);
        if (m.threads == 1) m.window_ratios.push_back(t.on_batch / t.parse);
        all.wall += t.wall;
        all.parse += t.parse;
        all.on_batch += t.on_batch;
      }
      m.seconds.push_back(all.wall);
      m.parse_seconds.push_back(all.parse);
      m.on_batch_seconds.push_back(all.on_batch);
      *window += static_cast<uint64_t>(g_windows);
      m.instances += state.cross_rank().instances_total() - before;
      m.speedup.push_back(modes[0].seconds.back() / m.seconds.back());
      m.ceiling.push_back(modes[0].ceiling_parse_seconds.back() / m.ceiling_parse_seconds.back());
    }
  }
  return modes;
}

// Each part of OnBatch alone, fresh, over the same kind of windows as the ingest: the
// cross-rank matching, the GPU state, the link analysis (seconds over `windows` windows).
struct PartsAlone {
  int windows = 0;
  double cross_s = 0, gpu_s = 0, links_s = 0;
  uint64_t cross_instances = 0;
};
PartsAlone MeasureParts(Cluster& c) {
  PartsAlone p;
  const int match_windows = p.windows = g_warmup + g_windows;
  auto alone = [&](auto&& on_batch) {
    double busy = 0;
    for (uint64_t w = 0; w < static_cast<uint64_t>(match_windows); ++w) {
      for (size_t i = 0; i < g_nodes; ++i) SetWindow(i, w, &c.batches[i]);
      const auto t0 = Clock::now();
      for (size_t i = 0; i < g_nodes; ++i) on_batch(i);
      busy += Seconds(t0, Clock::now());
    }
    return busy;
  };
  exporters::CrossRankAnalysis cross;
  for (size_t i = 0; i < g_nodes; ++i) cross.OnHello(MakeHello(i, kRails));
  p.cross_s = alone([&](size_t i) { cross.OnBatch(c.names[i], c.batches[i]); });
  p.cross_instances = cross.instances_total();
  {
    exporters::GpuState gpu;
    p.gpu_s = alone([&](size_t i) { gpu.OnBatch(c.names[i], c.batches[i]); });
    exporters::LinkAnalysis links;
    for (size_t i = 0; i < g_nodes; ++i) links.OnHello(MakeHello(i, kRails));
    p.links_s = alone([&](size_t i) { links.OnBatch(c.names[i], c.batches[i]); });
  }
  return p;
}

int Run() {
  PrintMachine();
  std::printf(
      "cluster: %zu nodes x %d ports x 1 s windows; %d analysed collectives per node per "
      "window; %zu rail communicators of %d ranks (one per node)\n",
      g_nodes, kRails, g_collectives, g_nodes / kGroupNodes * kRails, kGroupNodes);
  Cluster c = MakeCluster();
  const size_t batch_bytes = c.batches[0].ByteSizeLong();
  std::printf("batch: %zu bytes serialized\n", batch_bytes);

  PrimeStreams(c);
  // Populate: Hello + warm-up windows, until the per-node rings are full.
  MallocExtension::instance()->ReleaseFreeMemory();
  const size_t heap0 = HeapInUse();
  const size_t rss0 = RssBytes();
  auto state = std::make_unique<exporters::ClusterState>();
  for (size_t i = 0; i < g_nodes; ++i) {
    if (!state->OnHello(MakeHello(i, kRails)).ok()) std::abort();
  }
  uint64_t window = 0;
  const auto tw0 = Clock::now();
  Ingest(c, *state, window, g_warmup, 1);
  window += static_cast<uint64_t>(g_warmup);
  const double warm_s = Seconds(tw0, Clock::now());
  const size_t heap1 = HeapInUse();
  const size_t rss1 = RssBytes();
  const double n = static_cast<double>(g_nodes);
  const uint64_t cr_bytes = state->cross_rank().memory_bytes();
  std::printf(
      "warm-up: %d windows (%zu batches) in %.1f s; instances matched %llu, pending %llu, "
      "evicted %llu\n",
      g_warmup, g_nodes * static_cast<size_t>(g_warmup), warm_s,
      static_cast<unsigned long long>(state->cross_rank().instances_total()),
      static_cast<unsigned long long>(state->cross_rank().pending()),
      static_cast<unsigned long long>(state->cross_rank().evicted_total()));
  std::printf(
      "memory: heap +%.1f MiB (%.0f KiB/node), RSS +%.1f MiB (%.0f KiB/node); "
      "CrossRankAnalysis::memory_bytes() %.1f MiB (%.1f KiB/node); "
      "per node / one serialized batch = %.1fx\n",
      static_cast<double>(heap1 - heap0) / (1 << 20), static_cast<double>(heap1 - heap0) / n / 1024,
      static_cast<double>(rss1 - rss0) / (1 << 20), static_cast<double>(rss1 - rss0) / n / 1024,
      static_cast<double>(cr_bytes) / (1 << 20), static_cast<double>(cr_bytes) / n / 1024,
      static_cast<double>(heap1 - heap0) / n / static_cast<double>(batch_bytes));

  // Baseline, then one thread, then two threads; the same number of windows each.
  const double batches = n * g_windows;
  const std::vector<Threaded> modes = MeasureThreads(c, *state, &window);
  // 1 thread: the parse and OnBatch times summed over batches, and the wall time of both.
  const double parse_s = Median(modes[0].parse_seconds);
  const double on_batch_s = Median(modes[0].on_batch_seconds);
  const double one_s = Median(modes[0].seconds);

  const PartsAlone parts = MeasureParts(c);
  const int match_windows = parts.windows;
  const double match_s = parts.cross_s, gpu_s = parts.gpu_s, links_s = parts.links_s;
  const double analyses = n * g_collectives * match_windows;

  const OutputFigures out = MeasureOutput(*state, g_repeat);

  std::printf(
      "\n=== cluster ingest summary (%zu nodes, %d windows per mode; noisy shared machine)\n",
      g_nodes, g_windows);
  for (const Threaded& m : modes) {
    const double sec = Median(m.seconds);
    std::printf(
        "ingest %d thread%s:  %8.0f batches/s (parse + OnBatch %.0f us/batch), %9.0f instances "
        "matched/s",
        m.threads, m.threads == 1 ? " " : "s", batches / sec, sec / batches * 1e6,
        static_cast<double>(m.instances) / static_cast<double>(g_rounds) / sec);
    if (m.threads == 1) {
      std::printf(
          "; OnBatch / protobuf parse = %.2fx (median of %zu windows, each batch's OnBatch "
          "against its own parse just before; over all windows %.2fx; OnBatch %.0f us/batch, "
          "parse %.0f us/batch)\n",
          Median(m.window_ratios), m.window_ratios.size(), on_batch_s / parse_s,
          on_batch_s / batches * 1e6, parse_s / batches * 1e6);
    } else {
      std::printf(
          "; speed-up over 1 thread %.2fx, parse alone on %d threads %.2fx (medians of %d "
          "rounds; %d cores here)\n",
          Median(m.speedup), m.threads, Median(m.ceiling), g_rounds,
          static_cast<int>(std::thread::hardware_concurrency()));
    }
  }
  std::printf("needed at this scale: %.0f batches/s (1 per node per s): 1-thread headroom %.0fx\n",
              n, batches / one_s / n);
  std::printf(
      "matching alone:    %8.0f analyses/s, %.0f instances/s (%llu instances of %d ranks); "
      "CrossRankAnalysis::OnBatch / protobuf parse = %.2fx\n",
      analyses / match_s, static_cast<double>(parts.cross_instances) / match_s,
      static_cast<unsigned long long>(parts.cross_instances), kGroupNodes,
      match_s / (parse_s / g_windows * match_windows));
  std::printf(
      "parts alone / protobuf parse: cross-rank %.2fx, GPU state %.2fx, link analysis %.2fx "
      "(OnBatch in all %.2fx)\n",
      match_s / (parse_s / g_windows * match_windows),
      gpu_s / (parse_s / g_windows * match_windows),
      links_s / (parse_s / g_windows * match_windows), on_batch_s / parse_s);
  PrintOutput(out, g_nodes, g_repeat);
  // Every instance of this cluster completes within the timeout: an eviction means the
  // matching broke at this scale (as max_pending 65,536 did at 10,000 nodes), not a figure.
  if (state->cross_rank().evicted_total() > 0) {
    std::printf("FAIL: %llu instances evicted before all their ranks reported\n",
                static_cast<unsigned long long>(state->cross_rank().evicted_total()));
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace fabricscope::bench

int main(int argc, char** argv) {
  using namespace fabricscope::bench;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const size_t len = std::strlen(flag);
      return a.compare(0, len, flag) == 0 ? argv[i] + len : nullptr;
    };
    if (const char* v = value("--nodes=")) {
      g_nodes = static_cast<size_t>(std::atoll(v));
    } else if (const char* v = value("--collectives=")) {
      g_collectives = std::atoi(v);
    } else if (const char* v = value("--warmup_windows=")) {
      g_warmup = std::atoi(v);
    } else if (const char* v = value("--windows=")) {
      g_windows = std::atoi(v);
    } else if (const char* v = value("--rounds=")) {
      g_rounds = std::atoi(v);
    } else if (const char* v = value("--repeat=")) {
      g_repeat = std::atoi(v);
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (g_nodes < kGroupNodes || g_collectives < 1 || g_warmup < 1 || g_windows < 1 || g_repeat < 1 ||
      g_rounds < 1) {
    std::fprintf(stderr, "need --nodes >= %d and positive counts\n", kGroupNodes);
    return 2;
  }
  g_nodes -= g_nodes % kGroupNodes;  // whole groups only
  return Run();
}
