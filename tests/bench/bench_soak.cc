// fabricscope_bench_soak: the aggregator's memory under node churn (issue 15 item 6; the leak
// dcgm-exporter#702 users hit). 1,000 simulated agents stream into one ClusterState for a
// simulated hour on an injected clock (ClusterState::Options::now): every simulated 10 s each
// sends a window (8 NDR ports, a microburst on one, a collective analysis every third), and
// every simulated minute 5% restart (a new instance id: the node's state starts over) and 2%
// come back under a new name (the old name goes silent and --node-expiry, 10 min, must forget
// it). After each simulated minute, the nodes are expired, a scrape is rendered (as Prometheus
// would), and the process's resident set is printed. Plain binary, not part of ctest.
//
// Usage: fabricscope_bench_soak [--nodes=1000] [--minutes=60] [--warmup=20]
//        [--expiry-minutes=10]   (0: nodes never expire, the baseline that grows)
// Prints one line per simulated minute and a summary:
//   soak: nodes=... minutes=... rss_mib_after_warmup min=... max=... spread=...  (target <= 5%)
// Exit status 1 when the spread after warm-up is over 5%.

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "exporters/exposition/cluster_render.h"
#include "exporters/state/cluster_state.h"
#include "prometheus/text_serializer.h"
#include "tests/bench/bench_hello.h"

namespace {

using namespace fabricscope;

double RssMib() {
  std::ifstream in("/proc/self/statm");
  long pages = 0, resident = 0;
  in >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / 1048576.0;
}

struct Agent {
  std::string name;
  uint64_t instance = 0;
  uint64_t seq = 0;
  uint64_t tx = 0;
};

v1::Batch Window(Agent& a, int64_t t_ns, size_t index) {
  v1::Batch b;
  b.set_seq(++a.seq);
  b.set_window_start_ns(t_ns - 10'000'000'000);
  b.set_window_end_ns(t_ns);
  b.set_unix_offset_ns(1'700'000'000'000'000'000);
  for (uint32_t p = 0; p < 8; ++p) {
    v1::PortWindow* w = b.add_ports();
    w->set_port_index(p);
    w->set_utilization_valid(true);
    a.tx += 1'000'000'000;
    w->mutable_transmit()->set_bytes_total(a.tx + p);
    w->mutable_transmit()->set_has_bytes(true);
    w->mutable_transmit()->set_mean_utilization(0.3);
    w->mutable_receive()->set_bytes_total(a.tx / 2 + p);
    w->mutable_receive()->set_has_bytes(true);
  }
  v1::Microburst* m = b.add_microbursts();
  m->set_port_index(static_cast<uint32_t>(index % 8));
  m->set_start_ns(t_ns - 500'000'000);
  m->set_duration_ns(300'000);
  m->set_peak_utilization(0.97);
  m->set_bytes(1'000'000);
  if (a.seq % 3 == 0) {
    v1::Collective* c = b.add_collectives();
    c->set_comm_hash(0xabc0 + index % 16);
    c->set_func("AllReduce");
    c->set_seq(a.seq);
    c->set_rank(static_cast<int32_t>(index % 64));
    c->set_nranks(64);
    c->set_start_ns(t_ns - 2'000'000'000);
    c->set_end_ns(t_ns - 1'900'000'000);
    c->mutable_analysis()->set_port_index(-1);
  }
  return b;
}

int Flag(int argc, char** argv, const char* name, int def) {
  const size_t n = std::strlen(name);
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], name, n) == 0 && argv[i][n] == '=') return std::atoi(argv[i] + n + 1);
  }
  return def;
}

}  // namespace

int main(int argc, char** argv) {
  const int nodes = Flag(argc, argv, "--nodes", 1000);
  const int minutes = Flag(argc, argv, "--minutes", 60);
  const int warmup = Flag(argc, argv, "--warmup", 20);
  // 0 = never: the baseline that shows what expiry is for.
  const int expiry_minutes = Flag(argc, argv, "--expiry-minutes", 10);
  absl::Time now = absl::FromUnixSeconds(1'700'000'000);
  exporters::ClusterState::Options o;
  o.now = [&now] { return now; };
  exporters::ClusterState state(o);
  std::mt19937_64 rng(7);
  std::vector<Agent> agents(static_cast<size_t>(nodes));
  uint64_t next_instance = 1, renamed = 0, restarted = 0, expired = 0;
  auto connect = [&](Agent& a, size_t i) {
    v1::Hello h = bench::MakeHello(i, 8);
    h.set_node(a.name);
    a.instance = next_instance++;
    a.seq = 0;
    h.set_instance_id(a.instance);
    if (!state.OnHello(h).ok()) std::abort();
  };
  for (size_t i = 0; i < agents.size(); ++i) {
    agents[i].name = bench::NodeName(i);
    connect(agents[i], i);
  }
  std::vector<double> rss;
  for (int minute = 1; minute <= minutes; ++minute) {
    for (int step = 0; step < 6; ++step) {
      now += absl::Seconds(10);
      const int64_t t_ns = absl::ToUnixNanos(now);
      for (size_t i = 0; i < agents.size(); ++i) {
        if (!state.OnBatch(agents[i].name, agents[i].instance, Window(agents[i], t_ns, i)).ok()) {
          std::abort();
        }
      }
    }
    for (size_t i = 0; i < agents.size(); ++i) {
      const uint64_t r = rng() % 100;
      if (r < 2) {  // renamed: the old name goes silent
        agents[i].name = bench::NodeName(100000 + renamed++);
        connect(agents[i], i);
      } else if (r < 7) {  // restarted: a new instance
        ++restarted;
        connect(agents[i], i);
      }
    }
    expired += state.ExpireNodes(now, absl::Minutes(expiry_minutes)).size();
    const std::string text = prometheus::TextSerializer().Serialize(ClusterFamilies(state));
    rss.push_back(RssMib());
    std::printf(
        "minute %3d: nodes %zu, rss %.1f MiB, scrape %.1f MB (restarted %llu, renamed %llu, "
        "expired %llu)\n",
        minute, state.node_count(), rss.back(), static_cast<double>(text.size()) / 1e6,
        static_cast<unsigned long long>(restarted), static_cast<unsigned long long>(renamed),
        static_cast<unsigned long long>(expired));
    std::fflush(stdout);
  }
  if (static_cast<int>(rss.size()) <= warmup) {
    std::printf("soak: too few minutes after warm-up\n");
    return 1;
  }
  const auto [lo, hi] = std::minmax_element(rss.begin() + warmup, rss.end());
  const double spread = (*hi - *lo) / *lo;
  std::printf(
      "soak: nodes=%d minutes=%d warmup=%d rss_mib_after_warmup min=%.1f max=%.1f "
      "spread=%.3f (target <= 0.05: %s); renamed=%llu expired=%llu restarted=%llu\n",
      nodes, minutes, warmup, *lo, *hi, spread, spread <= 0.05 ? "met" : "NOT MET",
      static_cast<unsigned long long>(renamed), static_cast<unsigned long long>(expired),
      static_cast<unsigned long long>(restarted));
  return spread <= 0.05 ? 0 : 1;
}
