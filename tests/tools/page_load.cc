// fabricscope-page-load: an aggregator's HTTP server over a simulated cluster, for looking at
// the live page at scale (tests/e2e/live_page_test.py --nodes). N nodes of 8 InfiniBand ports
// (tests/bench/bench_hello.h) send one 1 s window a second into a real ClusterState: per port
// its counters, a 1 ms utilization series (one byte per bucket, collectors/common/
// utilization_codec.h; --bucket-ms) with a 3-bucket microburst at a node-dependent offset, the
// microburst itself, a loss ratio on a few ports, and agent stats (1,000 ticks a window). Prints
// "serving http://HOST:PORT/" once the first window is in, then runs for --seconds.
//
// Usage: fabricscope-page-load [--nodes=1000] [--seconds=60] [--bucket-ms=1]
//                              [--listen=127.0.0.1:0]

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "collectors/common/utilization_codec.h"
#include "exporters/exposition/http_server.h"
#include "exporters/state/cluster_state.h"
#include "tests/bench/bench_hello.h"

namespace fabricscope {
namespace {

constexpr int kPorts = 8;
constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kBucketNs = 1'000'000;  // the flight recorder's samples
int64_t g_bucket_ns = 1'000'000;          // the utilization series' (--bucket-ms)

// Nodes 0 and 1 hold the two ranks of one communicator: one AllReduce per window, 100-400 ms
// into it. Rank 1 (node 1) is slow on its port 0, saturated, and sends the flight recorder's
// 1 ms samples around it (Batch.flight_recordings, reason "slow_collective", as the agent's
// collective analysis attaches them), so the matched instance carries a recording.
void AddCollective(size_t i, v1::Batch* b) {
  const int64_t start = b->window_start_ns() + 100'000'000;
  const int64_t end = start + (i == 1 ? 300'000'000 : 200'000'000);
  v1::Collective* c = b->add_collectives();
  c->set_comm_hash(0xfeedbeef00000001ull);
  c->set_func("AllReduce");
  c->set_seq(b->seq());
  c->set_rank(static_cast<int32_t>(i));
  c->set_nranks(2);
  c->set_bytes(1 << 30);
  c->set_start_ns(start);
  c->set_end_ns(end);
  c->set_duration_seconds(static_cast<double>(end - start) / 1e9);
  v1::CollectiveAnalysis* a = c->mutable_analysis();
  a->set_port_index(0);
  a->set_slow(i == 1);
  a->set_cause(i == 1 ? v1::COLLECTIVE_CAUSE_NETWORK_SATURATED
                      : v1::COLLECTIVE_CAUSE_WAITING_ON_PEERS);
  a->set_detail(i == 1 ? "mlx5_0:1: saturated 80% of the time" : "waiting on peers");
  v1::PortActivity* p = a->add_ports();
  p->set_port_index(0);
  p->set_saturated_ratio(i == 1 ? 0.8 : 0);
  p->set_mean_utilization(i == 1 ? 0.8 : 0.05);
  if (i != 1) return;
  v1::FlightRecording* r = b->add_flight_recordings();
  r->set_port_index(0);
  r->set_reason("slow_collective");
  r->set_from_ns(start - 50'000'000);
  r->set_to_ns(end + 50'000'000);
  for (int64_t t = r->from_ns() + kBucketNs; t <= r->to_ns(); t += kBucketNs) {
    const bool busy = t > start && t <= end;
    r->add_time_ns(t);
    r->add_interval_ns(kBucketNs);
    r->add_transmit_bytes(busy ? 40'000'000 : 1'000'000);
    r->add_receive_bytes(1'000'000);
    r->add_transmit_utilization(busy ? 0.8f : 0.02f);
    r->add_receive_utilization(0.02f);
  }
}

// Window w (ending at (w + 1) s of agent time) of node i.
v1::Batch Window(size_t i, uint64_t w, int64_t unix_offset_ns) {
  v1::Batch b;
  b.set_seq(w + 1);
  b.set_window_start_ns(static_cast<int64_t>(w) * kSecond);
  b.set_window_end_ns(static_cast<int64_t>(w + 1) * kSecond);
  b.set_unix_offset_ns(unix_offset_ns);
  const size_t buckets = static_cast<size_t>(kSecond / g_bucket_ns);
  // A 3-bucket burst at a node-dependent place in the window.
  const size_t burst = (i * 37 + w * 101) % (buckets - 3);
  for (uint32_t p = 0; p < kPorts; ++p) {
    v1::PortWindow* pw = b.add_ports();
    pw->set_port_index(p);
    pw->set_utilization_valid(true);
    pw->set_line_rate_bytes_per_second(50'000'000'000);
    for (v1::DirectionWindow* d : {pw->mutable_transmit(), pw->mutable_receive()}) {
      d->set_has_bytes(true);
      d->set_bytes(5'000'000'000);
      d->set_bytes_total((w + 1) * 5'000'000'000);
      d->set_mean_utilization(0.1);
      d->set_peak_utilization(p == 0 ? 0.95 : 0.2);
      d->set_samples(1000);
      d->set_microbursts_total(p == 0 ? w + 1 : 0);
    }
    // A little loss on one port of every 50th node.
    pw->mutable_derived()->set_loss_ratio(i % 50 == 0 && p == 3 ? 1e-4 * (1 + i % 7) : 0);
    v1::UtilizationSeries* u = b.add_utilization_series();
    u->set_port_index(p);
    u->set_start_ns(b.window_start_ns());
    u->set_bucket_ns(g_bucket_ns);
    std::string tx(buckets, static_cast<char>(common::EncodeUtilization(0.1)));
    if (p == 0) {
      for (size_t k = burst; k < burst + 3; ++k) {
        tx[k] = static_cast<char>(common::EncodeUtilization(0.95));
      }
      v1::Microburst* m = b.add_microbursts();
      m->set_port_index(p);
      m->set_direction(v1::DIRECTION_TRANSMIT);
      m->set_start_ns(b.window_start_ns() + static_cast<int64_t>(burst) * g_bucket_ns);
      m->set_duration_ns(3 * g_bucket_ns);
      m->set_peak_utilization(0.95);
      m->set_bytes(142'500'000);
    }
    u->set_transmit(tx);
    u->set_receive(std::string(buckets, static_cast<char>(common::EncodeUtilization(0.1))));
  }
  if (i < 2) AddCollective(i, &b);
  v1::AgentStats* a = b.mutable_agent();
  a->set_ticks_total((w + 1) * 1000);
  v1::Histogram* h = a->mutable_sample_interval_seconds();
  h->add_upper_bounds(0.001);
  h->add_upper_bounds(0.002);
  h->add_bucket_counts((w + 1) * 990);
  h->add_bucket_counts((w + 1) * 10);
  h->add_bucket_counts(0);
  h->set_count((w + 1) * 1000);
  return b;
}

int Run(size_t nodes, int seconds, const std::string& listen) {
  exporters::ClusterState state;
  for (size_t i = 0; i < nodes; ++i) {
    if (!state.OnHello(bench::MakeHello(i, kPorts)).ok()) return 1;
  }
  const int64_t offset = std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  auto window = [&](uint64_t w) {
    for (size_t i = 0; i < nodes; ++i) {
      if (!state.OnBatch(bench::NodeName(i), i + 1, Window(i, w, offset)).ok()) return false;
    }
    return true;
  };
  if (!window(0)) return 1;
  exporters::HttpServer server({}, &state);
  auto port = server.Start(listen);
  if (!port.ok()) {
    std::fprintf(stderr, "fabricscope-page-load: %s\n", port.status().ToString().c_str());
    return 1;
  }
  std::printf("serving http://%s:%d/ (%zu nodes x %d ports)\n",
              listen.substr(0, listen.rfind(':')).c_str(), *port, nodes, kPorts);
  std::fflush(stdout);
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t w = 1; w < static_cast<uint64_t>(seconds); ++w) {
    std::this_thread::sleep_until(start + std::chrono::seconds(w));
    if (!window(w)) return 1;
  }
  server.Stop();
  return 0;
}

}  // namespace
}  // namespace fabricscope

int main(int argc, char** argv) {
  size_t nodes = 1000;
  int seconds = 60;
  std::string listen = "127.0.0.1:0";
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strncmp(a, "--nodes=", 8) == 0) {
      nodes = static_cast<size_t>(std::atoll(a + 8));
    } else if (std::strncmp(a, "--seconds=", 10) == 0) {
      seconds = std::atoi(a + 10);
    } else if (std::strncmp(a, "--bucket-ms=", 12) == 0) {
      fabricscope::g_bucket_ns = std::atoll(a + 12) * 1'000'000;
    } else if (std::strncmp(a, "--listen=", 9) == 0) {
      listen = a + 9;
    } else {
      std::fprintf(stderr,
                   "usage: fabricscope-page-load [--nodes=1000] [--seconds=60] "
                   "[--bucket-ms=1] [--listen=127.0.0.1:0]\n");
      return 2;
    }
  }
  if (nodes < 1 || seconds < 1 || fabricscope::g_bucket_ns < 1'000'000 ||
      fabricscope::g_bucket_ns > 100'000'000) {
    std::fprintf(stderr, "need --nodes >= 1, --seconds >= 1 and --bucket-ms in 1..100\n");
    return 2;
  }
  return fabricscope::Run(nodes, seconds, listen);
}
