#pragma once

// The proxy side of FakeNccl (tests/common/nccl_harness.h): what NCCL 2.28.9's proxy progress
// thread does with a collective's posted ops, as lanes of plugin calls that run one call-group
// at a time in an order chosen by a seeded RNG among the lanes that NCCL's code allows to
// progress. Sources (NVIDIA/nccl v2.28.9-1):
// - ProxyOp start at append time, with record 19 on its first progress call:
//   src/proxy.cc ProxyAppend -> ncclProxyOpToArgs (proxy.cc:427), src/transport/net.cc
//   sendProxyProgress:1228 / recvProxyProgress:1409;
// - per step: ProxyStep start, SendGPUWait(8), SendPeerWait(20), SendWait(9) (send,
//   net.cc:1250-1346) or RecvWait(10), RecvFlushWait(11), RecvGPUWait(12) (recv, net.cc:1432-1620),
//   then ProxyStep stop; each progress call advances one phase (net.cc:1497, 1570, 1598);
// - ProxyOp stop for every sub of an args once all are done (net.cc:1362-1365, 1632-1636);
// - KernelCh start when the proxy sees the GPU's workStarted counter, on a later progress pass
//   than the append of that channel's ops, and state 22 + stop on a later pass when it sees
//   workCompleted (src/transport/profiler.cc profilerProxyProgress:35-44); its parent is the
//   collective's own Coll handle, also for fused collectives (src/enqueue.cc:1277);
// - nothing orders these lanes against the user thread's Coll stop (enqueue.cc:1312-1314
//   hostStreamPlanTask posts with ncclProxyStart and stops the Coll at once), nor KernelCh
//   against the ProxyOps' stops.
// A lane of a caller-timed collective (a GpuGate) waits for the caller's "kernel started" and
// "kernel ended" times, as the real proxy waits on the GPU's counters.
//
// Threading: not thread-safe; one thread at a time (FakeNccl's proxy thread, or the user thread
// in inline mode) calls Add and RunOne.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <vector>

namespace fabricscope::testing {

// Times a caller reports for a collective it really runs (CLOCK_MONOTONIC ns, 0 = not yet).
struct GpuGate {
  std::atomic<int64_t> started_ns{0};
  std::atomic<int64_t> ended_ns{0};
};

class ProxyEngine {
 public:
  // One call-group of a lane; `ready` (may be empty) says whether NCCL's code could run it now.
  struct Step {
    std::function<bool()> ready;
    std::function<void()> run;
  };
  using Lane = std::vector<Step>;

  explicit ProxyEngine(uint64_t seed) : rng_(seed) {}
  void Reseed(uint64_t seed) { rng_.seed(seed); }
  std::mt19937_64& rng() { return rng_; }

  void Add(Lane lane) {
    if (!lane.empty()) lanes_.push_back(Active{std::move(lane), 0});
  }
  bool idle() const { return lanes_.empty(); }
  size_t lanes() const { return lanes_.size(); }

  // Runs one ready step of a lane picked at random; false when no step is ready.
  bool RunOne() {
    if (lanes_.empty()) return false;
    const size_t n = lanes_.size();
    const size_t first = std::uniform_int_distribution<size_t>(0, n - 1)(rng_);
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (first + k) % n;
      Active& a = lanes_[i];
      const Step& s = a.lane[a.next];
      if (s.ready && !s.ready()) continue;
      // Copy out: run() may Add lanes and move lanes_.
      std::function<void()> run = s.run;
      if (++a.next == a.lane.size()) {
        lanes_[i] = std::move(lanes_.back());
        lanes_.pop_back();
      }
      run();
      return true;
    }
    return false;
  }

 private:
  struct Active {
    Lane lane;
    size_t next;
  };
  std::mt19937_64 rng_;
  std::vector<Active> lanes_;
};

}  // namespace fabricscope::testing
