#pragma once

// Shared by the NCCL plugin's ABI tests: the operations they drive (MakeSpec, MakeP2p) and the
// Checker that compares every record a GpuReceiver got with what FakeNccl issued.

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "collectors/gpu/wire.h"
#include "collectors/gpu/wire_decode.h"
#include "gtest/gtest.h"
#include "tests/common/gpu_receiver.h"
#include "tests/common/nccl_harness.h"

namespace fabricscope::testing {

namespace gpu = ::fabricscope::collectors::gpu;
using Spec = FakeNccl::CollSpec;
using Timers = FakeNccl::TimerKind;

// Operation i of a communicator of `nranks`: a mix of every kind NCCL emits, with NCCL 2.28's
// quirks (AllGather/Broadcast in bytes with "ncclInt8", ReduceScatter per-rank count) and
// the timer faults of ABI §6.9 on some of them.
inline Spec MakeSpec(int i, int rank, int nranks) {
  static const char* kFuncs[] = {"AllReduce", "AllGather", "ReduceScatter", "Broadcast"};
  Spec s;
  s.func = kFuncs[i % 4];
  s.count = 1024 + 64 * static_cast<size_t>(i % 17);
  s.datatype =
      (i % 4 == 1 || i % 4 == 3) ? "ncclInt8" : (i % 3 == 0 ? "ncclBfloat16" : "ncclFloat32");
  s.root = i % 4 == 3 ? 1 : 0;
  s.algo = i % 5 == 0 ? "TREE" : "RING";
  s.proto = i % 2 == 0 ? "SIMPLE" : "LL128";
  s.graph_captured = i % 9 == 4;
  const int next = (rank + 1) % nranks;
  const int prev = (rank + nranks - 1) % nranks;
  for (uint8_t ch = 0; ch < 2; ++ch) {
    FakeNccl::ProxyWork send;
    send.peer = next;
    send.is_send = true;
    send.channel = ch;
    send.step_bytes = {65536, 65536, 65536, static_cast<size_t>(1000 + i % 100)};
    FakeNccl::ProxyWork recv = send;
    recv.peer = prev;
    recv.is_send = false;
    recv.step_bytes = {65536, static_cast<size_t>(4096 + i % 50)};
    s.proxy.push_back(send);
    s.proxy.push_back(recv);
    FakeNccl::KernelWork k;
    k.channel = ch;
    if (i % 7 == 3 && ch == 1) k.timers = Timers::kZeroStart;
    if (i % 11 == 5) k.timers = ch == 0 ? Timers::kZeroStart : Timers::kEndBeforeStart;
    if (i % 17 == 8 && ch == 1) k.timers = Timers::kMissing;
    s.kernels.push_back(k);
  }
  if (i % 13 == 6) {
    FakeNccl::ProxyWork pxn;
    pxn.peer = next;
    pxn.channel = 3;
    pxn.pxn = true;
    pxn.step_bytes = {8192, 8192};
    s.proxy.push_back(pxn);
  }
  return s;
}

inline Spec MakeP2p(bool send, int peer) {
  Spec s;
  s.p2p = true;
  s.func = send ? "Send" : "Recv";
  s.datatype = "ncclFloat16";
  s.count = 4096;
  s.peer = peer;
  s.algo = nullptr;
  s.proto = nullptr;
  FakeNccl::ProxyWork w;
  w.peer = peer;
  w.is_send = send;
  w.step_bytes = {8192};
  s.proxy.push_back(w);
  s.kernels.push_back(FakeNccl::KernelWork{});
  return s;
}

inline size_t TypeSize(const char* t) {
  const std::string s = t;
  if (s == "ncclInt8") return 1;
  if (s == "ncclFloat16" || s == "ncclBfloat16") return 2;
  return 4;
}

// Compares everything received with what was issued.
class Checker {
 public:
  void Add(const std::vector<std::shared_ptr<FakeNccl::Expected>>& v) {
    for (const auto& e : v) {
      if (e->coll_emitted) expected_.push_back(e);
    }
  }
  void AddProxy(const std::vector<FakeNccl::ExpectedProxyOp>& v) {
    proxy_.insert(proxy_.end(), v.begin(), v.end());
  }

  // Returns the number of matched records (Collective + ProxyOp); adds failures for any record
  // that matches nothing, arrives twice, or has a wrong field.
  size_t Check(const GpuReceiver& rx) {
    std::map<std::tuple<uint64_t, std::string, uint64_t>, const FakeNccl::Expected*> by_key;
    for (const auto& e : expected_) {
      by_key[{e->comm_hash, e->spec.func, e->seq}] = e.get();
    }
    size_t matched = 0;
    std::map<std::tuple<uint64_t, std::string, uint64_t>, int> seen;
    for (const gpu::CollectiveRecord& r : rx.collectives) {
      const auto key = std::make_tuple(r.comm_hash, gpu::FixedString(r.func), r.seq);
      auto it = by_key.find(key);
      if (it == by_key.end()) {
        ADD_FAILURE() << "unexpected record " << gpu::FixedString(r.func) << " seq " << r.seq;
        continue;
      }
      if (++seen[key] > 1) {
        ADD_FAILURE() << "duplicate record " << gpu::FixedString(r.func) << " seq " << r.seq;
        continue;
      }
      ++matched;
      CheckCollective(*it->second, r);
    }
    using ProxyKey = std::tuple<uint64_t, std::string, uint64_t, int, int, int, int>;
    std::multimap<ProxyKey, const FakeNccl::ExpectedProxyOp*> proxy_by_key;
    for (const auto& x : proxy_) {
      proxy_by_key.insert(
          {{x.comm_hash, x.func, x.op_seq, x.channel, x.peer, x.is_send, x.pid}, &x});
    }
    for (const gpu::ProxyOpRecord& r : rx.proxy_ops) {
      // PXN ops have no identity beyond their fields: of the equal keys, the one whose start
      // window holds the record's start.
      auto range = proxy_by_key.equal_range(
          {r.comm_hash, gpu::FixedString(r.func), r.op_seq, r.channel, r.peer, r.is_send, r.pid});
      auto it = range.first == range.second ? proxy_by_key.end() : range.first;
      for (auto c = range.first; c != range.second; ++c) {
        const FakeNccl::ExpectedProxyOp& x = *c->second;
        // Untimed ops (all at 0): of the equal keys, one with the record's counts.
        const bool counts = !x.untimed || (r.steps == x.steps && r.bytes == x.bytes);
        if (r.start_ns >= x.start_lo && r.start_ns <= x.start_hi && counts) it = c;
      }
      if (it == proxy_by_key.end()) {
        ADD_FAILURE() << "unexpected proxy op seq " << r.op_seq << " ch " << int(r.channel);
        continue;
      }
      const FakeNccl::ExpectedProxyOp& x = *it->second;
      proxy_by_key.erase(it);
      ++matched;
      EXPECT_EQ(r.bytes, x.bytes);
      EXPECT_EQ(r.steps, x.steps);
      EXPECT_EQ(r.rank, x.rank);
      EXPECT_EQ(gpu::FixedString(r.func), x.func);
      EXPECT_GE(r.start_ns, x.start_lo);
      EXPECT_LE(r.start_ns, x.start_hi);
      EXPECT_GE(r.end_ns, x.end_lo);
      EXPECT_LE(r.end_ns, x.end_hi);
      EXPECT_EQ(r.chunk_size, x.chunk_size);
      EXPECT_EQ(r.flags, (x.estimated ? gpu::kProxyOpBytesEstimated : 0) |
                             (x.untimed ? gpu::kProxyOpUntimed : 0));
    }
    return matched;
  }

  size_t kernel_timed = 0, proxy_timed = 0, enqueue_timed = 0, graph = 0;
  // The longest the proxy side may report a kernel after it ran (the fitted offset's error).
  int64_t max_report_lag_ns = 200'000'000;
  bool graph_from_api = true;  // false for the v4 table

 private:
  void CheckCollective(const FakeNccl::Expected& e, const gpu::CollectiveRecord& r) {
    SCOPED_TRACE(std::string(e.spec.func) + " seq " + std::to_string(e.seq));
    const Spec& s = e.spec;
    EXPECT_EQ(r.kind, s.p2p ? 1 : 0);
    EXPECT_EQ(r.rank, e.rank);
    EXPECT_EQ(r.nranks, e.nranks);
    EXPECT_EQ(r.count, s.count);
    EXPECT_EQ(r.bytes, s.count * TypeSize(s.datatype));
    EXPECT_EQ(gpu::FixedString(r.datatype), s.datatype);
    EXPECT_EQ(gpu::FixedString(r.algo), s.algo == nullptr ? "" : s.algo);
    EXPECT_EQ(gpu::FixedString(r.proto), s.proto == nullptr ? "" : s.proto);
    EXPECT_EQ(r.root, std::string(s.func) == "Broadcast" ? s.root : -1);
    EXPECT_EQ(r.peer, s.p2p ? s.peer : -1);
    EXPECT_EQ(r.nchannels, s.kernels.size());
    // The graph flag comes from the CollApi/P2pApi parent, which v4 (NCCL 2.27) does not have.
    EXPECT_EQ(r.graph_captured, graph_from_api && s.graph_captured ? 1 : 0);
    graph += r.graph_captured;
    EXPECT_GE(r.enqueue_start_ns, e.enqueue_start_lo);
    EXPECT_LE(r.enqueue_start_ns, e.enqueue_start_hi);
    EXPECT_GE(r.enqueue_end_ns, e.enqueue_end_lo);
    EXPECT_LE(r.enqueue_end_ns, e.enqueue_end_hi);
    EXPECT_EQ(r.proxy_ops, e.proxy_ops);
    EXPECT_EQ(r.proxy_bytes, e.proxy_bytes);
    if (e.gpu_start_min != INT64_MAX) {
      ++kernel_timed;
      EXPECT_EQ(r.timing_source, static_cast<uint8_t>(gpu::TimingSource::kKernelChannel));
      // GPU times converted with the fitted offset: both ends shift by the same amount, at
      // least the synthetic report lag and at most that plus the harness's call latency.
      const int64_t shift_start = r.start_ns - (e.gpu_start_min - FakeNccl::kGpuClockOffsetNs);
      const int64_t shift_end = r.end_ns - (e.gpu_end_max - FakeNccl::kGpuClockOffsetNs);
      EXPECT_EQ(shift_start, shift_end)
          << "record [" << r.start_ns << ", " << r.end_ns << "] driven GPU ["
          << e.gpu_start_min - FakeNccl::kGpuClockOffsetNs << ", "
          << e.gpu_end_max - FakeNccl::kGpuClockOffsetNs << "] enqueue [" << r.enqueue_start_ns
          << ", " << r.enqueue_end_ns << "] proxy ops " << r.proxy_ops
          << " kernels:" << e.kernel_log;
      EXPECT_GE(shift_start, FakeNccl::kEndLagNs);
      EXPECT_LT(shift_start, FakeNccl::kEndLagNs + max_report_lag_ns);
    } else if (e.proxy_untimed &&
               r.timing_source == static_cast<uint8_t>(gpu::TimingSource::kProxyOp)) {
      // Untimed ProxyOps, no usable GPU timer: the Coll's stop to the kernel seen done.
      ++proxy_timed;
      EXPECT_EQ(r.start_ns, r.enqueue_end_ns);
      EXPECT_GE(r.end_ns, e.kernel_done_lo);
      EXPECT_LE(r.end_ns, e.kernel_done_hi);
    } else if (e.proxy_untimed) {
      // Due unless the kernel was seen done before the Coll's stop (a schedule NCCL allows, ABI
      // §6.2) or never (a channel missing, a full pool).
      ++enqueue_timed;
      EXPECT_TRUE(e.kernel_done_hi == 0 || e.kernel_done_lo <= r.enqueue_end_ns)
          << "kernel done at [" << e.kernel_done_lo << ", " << e.kernel_done_hi
          << "], after the Coll's stop at " << r.enqueue_end_ns << ": proxy_op timing was due";
      EXPECT_EQ(r.timing_source, static_cast<uint8_t>(gpu::TimingSource::kEnqueueOnly));
      EXPECT_EQ(r.start_ns, r.enqueue_start_ns);
      EXPECT_EQ(r.end_ns, r.enqueue_end_ns);
    } else if (e.proxy_ops > 0) {
      ++proxy_timed;
      EXPECT_EQ(r.timing_source, static_cast<uint8_t>(gpu::TimingSource::kProxyOp));
      EXPECT_GE(r.start_ns, e.proxy_start_lo);
      EXPECT_LE(r.start_ns, e.proxy_start_hi);
      EXPECT_GE(r.end_ns, e.proxy_end_lo);
      EXPECT_LE(r.end_ns, e.proxy_end_hi);
    } else {
      ++enqueue_timed;
      EXPECT_EQ(r.timing_source, static_cast<uint8_t>(gpu::TimingSource::kEnqueueOnly));
      EXPECT_EQ(r.start_ns, r.enqueue_start_ns);
      EXPECT_EQ(r.end_ns, r.enqueue_end_ns);
    }
  }

  std::vector<std::shared_ptr<FakeNccl::Expected>> expected_;
  std::vector<FakeNccl::ExpectedProxyOp> proxy_;
};

}  // namespace fabricscope::testing
