// fabricscope_bench_history: what the event history (exporters/history/) costs ingest and disk
// (issue 37 item 3). Two ClusterStates fed the same batches, one with the history recorder and
// its SQLite store on a real file, one without, the batches interleaved between them so that both
// see the same machine load:
//   ingest:  ClusterState::OnBatch per batch, p50 and p99, history on over off (target <= 1.2x);
//   disk:    the database's used pages after the run, per node per day at the defaults.
// The workload, per node and 1 s window: 8 ports at 30-60% (a utilization event every 10 s), an
// 8-rank communicator per 8 nodes whose rank 5 is a compute straggler every all-reduce (one
// instance event per instance, the waiting ranks' analyses as collective events: 10 all-reduces
// a second), a microburst per port every 20 s and a loss episode per node every 60 s. That is a
// busy, unhealthy cluster: a healthy one writes only the utilization events.
// Flags: --nodes=N (default 64), --windows=N (default 600 simulated seconds), --dir=PATH.

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "exporters/history/history_recorder.h"
#include "exporters/history/history_store.h"
#include "exporters/state/cluster_state.h"
#include "tests/bench/bench_hello.h"

namespace fabricscope::bench {
namespace {

constexpr int kHistPorts = 8;
constexpr int kHistRanks = 8;
constexpr int kHistCollectivesPerWindow = 10;
constexpr int64_t kHistSec = 1'000'000'000;

v1::Batch Window(size_t node, uint64_t w, int64_t base, bool unhealthy) {
  v1::Batch b;
  b.set_seq(w + 1);
  b.set_unix_offset_ns(base);
  b.set_window_start_ns(static_cast<int64_t>(w) * kHistSec);
  b.set_window_end_ns(static_cast<int64_t>(w + 1) * kHistSec);
  for (int p = 0; p < kHistPorts; ++p) {
    v1::PortWindow* pw = b.add_ports();
    pw->set_port_index(static_cast<uint32_t>(p));
    pw->set_utilization_valid(true);
    pw->mutable_transmit()->set_mean_utilization(0.3 + 0.03 * p);
    pw->mutable_transmit()->set_peak_utilization(0.9);
    pw->mutable_receive()->set_mean_utilization(0.3);
    pw->mutable_receive()->set_peak_utilization(0.8);
    if (unhealthy && (w + node + static_cast<uint64_t>(p)) % 20 == 0) {
      v1::Microburst* m = b.add_microbursts();
      m->set_port_index(static_cast<uint32_t>(p));
      m->set_start_ns(static_cast<int64_t>(w) * kHistSec + 100'000'000);
      m->set_duration_ns(2'000'000);
      m->set_peak_utilization(0.99);
      m->set_bytes(100'000'000);
    }
    if (unhealthy && p == 0 && (w + node) % 60 < 2) pw->add_errors()->set_delta(3);
  }
  const uint64_t comm = 0x1000000000000000ull + node / kHistRanks;
  const int rank = static_cast<int>(node % kHistRanks);
  v1::GpuWindow* g = b.mutable_gpu();
  g->add_jobs()->set_id(absl::StrCat("job-", node / kHistRanks));
  v1::Communicator* c = g->add_communicators();
  c->set_comm_hash(comm);
  c->set_rank(rank);
  c->set_nranks(kHistRanks);
  c->set_job_id(absl::StrCat("job-", node / kHistRanks));
  for (int k = 0; k < kHistCollectivesPerWindow; ++k) {
    const uint64_t seq = w * kHistCollectivesPerWindow + static_cast<uint64_t>(k);
    const int64_t t = static_cast<int64_t>(w) * kHistSec + k * 100'000'000;
    const bool late = unhealthy && rank == 5;
    v1::Collective* col = b.add_collectives();
    col->set_comm_hash(comm);
    col->set_rank(rank);
    col->set_nranks(kHistRanks);
    col->set_func("AllReduce");
    col->set_seq(seq);
    col->set_bytes(64 << 20);
    col->set_start_ns(late ? t + 40'000'000 : t + rank * 100'000);
    col->set_end_ns(t + 60'000'000);
    v1::CollectiveAnalysis* a = col->mutable_analysis();
    a->set_cause(!unhealthy || late ? v1::COLLECTIVE_CAUSE_NORMAL
                                    : v1::COLLECTIVE_CAUSE_WAITING_ON_PEERS);
    a->set_port_index(0);
    a->set_detail("veth0: idle 80% of the time");
    a->add_ports()->set_port_index(0);
  }
  return b;
}

double P(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

struct Result {
  double p50_on = 0, p50_off = 0, p99_on = 0, p99_off = 0;
  exporters::HistoryStore::Stats stats;
};

// One workload through two states, history on and off, the batches interleaved. False when the
// store cannot be opened.
bool Run(const std::string& path, size_t nodes, uint64_t windows, bool unhealthy, Result* out) {
  exporters::ClusterState off, on;
  exporters::HistoryStore::Options o;
  o.path = path;
  auto store = exporters::HistoryStore::Open(o);
  if (!store.ok()) {
    std::fprintf(stderr, "%s\n", std::string(store.status().message()).c_str());
    return false;
  }
  auto recorder = std::make_shared<exporters::HistoryRecorder>(on, **store);
  on.SetObserver(recorder);
  for (size_t n = 0; n < nodes; ++n) {
    (void)off.OnHello(MakeHello(n, kHistPorts));
    (void)on.OnHello(MakeHello(n, kHistPorts));
  }
  const int64_t base = absl::ToUnixNanos(absl::Now()) - static_cast<int64_t>(windows) * kHistSec;
  std::vector<double> lat_off, lat_on;
  auto timed = [](exporters::ClusterState& s, size_t n, const v1::Batch& b) {
    const auto t0 = std::chrono::steady_clock::now();
    (void)s.OnBatch(NodeName(n), n + 1, b);
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  };
  for (uint64_t w = 0; w < windows; ++w) {
    for (size_t n = 0; n < nodes; ++n) {
      const v1::Batch b = Window(n, w, base, unhealthy);
      // Alternate which state goes first, so neither always runs on a warm cache.
      if ((w + n) % 2 == 0) {
        lat_off.push_back(timed(off, n, b));
        lat_on.push_back(timed(on, n, b));
      } else {
        lat_on.push_back(timed(on, n, b));
        lat_off.push_back(timed(off, n, b));
      }
    }
    recorder->Tick(base + static_cast<int64_t>(w + 1) * kHistSec);
  }
  recorder->Drain();
  (*store)->Flush();
  out->stats = (*store)->stats();
  out->p50_on = P(lat_on, 0.5);
  out->p50_off = P(lat_off, 0.5);
  out->p99_on = P(lat_on, 0.99);
  out->p99_off = P(lat_off, 0.99);
  on.SetObserver(nullptr);
  return true;
}

}  // namespace
}  // namespace fabricscope::bench

int main(int argc, char** argv) {
  using namespace fabricscope;
  using namespace fabricscope::bench;
  size_t nodes = 64;
  uint64_t windows = 600;
  std::string dir;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--nodes=", 0) == 0) nodes = std::strtoul(a.c_str() + 8, nullptr, 10);
    if (a.rfind("--windows=", 0) == 0) windows = std::strtoul(a.c_str() + 10, nullptr, 10);
    if (a.rfind("--dir=", 0) == 0) dir = a.substr(6);
  }
  if (nodes == 0 || windows == 0) {
    std::fprintf(stderr, "--nodes and --windows must be positive\n");
    return 2;
  }
  if (dir.empty()) {
    char tmpl[] = "/tmp/fabricscope-bench-history.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return 1;
    dir = tmpl;
  }
  std::printf("fabricscope_bench_history: %zu nodes x %d ports, %llu windows of 1 s, in %s\n",
              nodes, kHistPorts, static_cast<unsigned long long>(windows), dir.c_str());
  double unhealthy_ratio = 0, bytes[2] = {0, 0};
  for (const bool unhealthy : {true, false}) {
    Result r;
    const std::string path = dir + (unhealthy ? "/unhealthy.db" : "/healthy.db");
    if (!Run(path, nodes, windows, unhealthy, &r)) return 1;
    const double per_node_day = static_cast<double>(r.stats.used_bytes) /
                                static_cast<double>(nodes) / static_cast<double>(windows) * 86400.0;
    bytes[unhealthy ? 0 : 1] = per_node_day;
    if (unhealthy) unhealthy_ratio = r.p99_on / r.p99_off;
    std::printf(
        "%s: ingest per batch p50 %.1f us on / %.1f us off = %.2fx; p99 %.1f us on / "
        "%.1f us off = %.2fx (target <= 1.2x)\n",
        unhealthy ? "unhealthy" : "healthy", r.p50_on, r.p50_off, r.p50_on / r.p50_off, r.p99_on,
        r.p99_off, r.p99_on / r.p99_off);
    std::printf(
        "  history: %llu events, %llu dropped; %lld bytes used = %.2f MB per node per "
        "day; the default 1 GiB holds %.0f node-days\n",
        static_cast<unsigned long long>(r.stats.written),
        static_cast<unsigned long long>(r.stats.dropped_queue_full + r.stats.dropped_write_error),
        static_cast<long long>(r.stats.used_bytes), per_node_day / 1e6,
        static_cast<double>(1ull << 30) / per_node_day);
  }
  std::printf(
      "summary: ingest_p99_history_on_over_off=%.2f bytes_per_node_per_day_unhealthy=%.0f "
      "bytes_per_node_per_day_healthy=%.0f\n",
      unhealthy_ratio, bytes[0], bytes[1]);
  std::filesystem::remove_all(dir);
  return 0;
}
