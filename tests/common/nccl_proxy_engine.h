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
#include <list>
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

  // Runs one ready step, picked at random among up to kWindow ready lanes found by sweeping the
  // lanes cyclically from where the last sweep stopped (NCCL's proxy progresses its ops list
  // round and round, src/proxy.cc progressOps); false when no step is ready.
  bool RunOne() {
    static constexpr size_t kWindow = 16;
    if (lanes_.empty()) return false;
    std::list<Active>::iterator ready[kWindow];
    size_t n = 0;
    if (cursor_ == lanes_.end()) cursor_ = lanes_.begin();
    for (size_t seen = 0, total = lanes_.size(); seen < total && n < kWindow; ++seen) {
      const Step& s = cursor_->lane[cursor_->next];
      if (!s.ready || s.ready()) ready[n++] = cursor_;
      if (++cursor_ == lanes_.end()) cursor_ = lanes_.begin();
    }
    if (n == 0) return false;
    auto it = ready[std::uniform_int_distribution<size_t>(0, n - 1)(rng_)];
    // Copy out: run() may Add lanes.
    std::function<void()> run = it->lane[it->next].run;
    if (++it->next == it->lane.size()) {
      if (cursor_ == it) ++cursor_;
      lanes_.erase(it);
    }
    run();
    return true;
  }

 private:
  struct Active {
    Lane lane;
    size_t next;
  };
  std::mt19937_64 rng_;
  std::list<Active> lanes_;
  std::list<Active>::iterator cursor_ = lanes_.end();
};

}  // namespace fabricscope::testing
