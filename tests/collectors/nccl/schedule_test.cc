// The plugin under every order NCCL allows (tests/common/nccl_proxy_engine.h cites each one):
// 10,000 seeded schedules of the inline proxy side, sustained and burst rates through a real
// proxy thread at the default pools, and the copy-engine events of ABI v6.

#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "tests/collectors/nccl/plugin_checker.h"
#include "tests/common/fake_tree.h"
#include "tests/common/gpu_receiver.h"
#include "tests/common/nccl_harness.h"
#include "tests/common/wait.h"

namespace fabricscope::testing {
namespace {

constexpr char kPluginPath[] = FABRICSCOPE_NCCL_PLUGIN;

std::vector<FakeNccl::Comm> TwoComms() {
  std::vector<FakeNccl::Comm> comms(2);
  comms[0].hash = 0xabc0000000000001;
  comms[0].rank = 2;
  comms[0].nranks = 4;
  comms[1].hash = 0xabc0000000000002;
  comms[1].rank = 0;
  comms[1].nranks = 2;
  return comms;
}

class ScheduleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("FABRICSCOPE_NCCL_MASK_FILE", dir_.Path("no-mask-file").c_str(), 1);
    unsetenv("FABRICSCOPE_NCCL_EVENT_MASK");
    unsetenv("FABRICSCOPE_NCCL_POOL_EVENTS");
    unsetenv("FABRICSCOPE_NCCL_CHAIN");
    ASSERT_TRUE(rx_.Start());
    setenv("FABRICSCOPE_GPU_SOCKET", rx_.path().c_str(), 1);
    HarnessLog::Get().Clear();
  }
  void TearDown() override { unsetenv("FABRICSCOPE_GPU_SOCKET"); }

  // The plugin loaded with a real proxy thread and one initialized communicator in comms_.
  std::unique_ptr<FakeNccl> LoadOneComm() {
    std::string error;
    auto nccl = FakeNccl::Load(kPluginPath, &error);
    EXPECT_NE(nccl, nullptr) << error;
    if (nccl == nullptr) return nullptr;
    comms_ = TwoComms();
    comms_.resize(1);
    EXPECT_EQ(nccl->Init(comms_[0]), 0);
    return nccl;
  }

  // NCCL's comm init goes on after the profiler's (src/init.cc: ncclProxyCreate, the ring and
  // tree connects, a barrier) before any collective; the plugin's flush thread builds the rest
  // of its pools meanwhile and says so. Tests that count what the full pools hold wait for it
  // (on a loaded machine the flush thread may not have run yet when the test's first
  // collective starts, and the first sixteenth of the KernelCh pool, half of it held by
  // channel spans, drops GPU timers: fewer kernel-timed collectives, correctly counted).
  static bool WaitForPoolsReady() {
    return WaitFor([] {
      for (const std::string& l : HarnessLog::Get().Lines()) {
        if (l.find("pools ready, 16384 collectives") != std::string::npos) return true;
      }
      return false;
    });
  }

  // Finalizes, then checks that received + dropped == issued and returns the drops. Channel-span
  // records (FABRICSCOPE_NCCL_CHANNEL_SPANS=1) are sent on top of what the harness issued.
  uint64_t Finish(FakeNccl& nccl, std::vector<FakeNccl::Comm>& comms) {
    const uint64_t issued = nccl.issued();
    for (auto& c : comms) EXPECT_EQ(nccl.Finalize(c), 0);
    uint64_t records = 0, sent = 0, dropped = 0;
    EXPECT_TRUE(HarnessLog::Get().LastFinalStats(&records, &sent, &dropped));
    EXPECT_TRUE(WaitFor([&] { return rx_.event_records() + rx_.channel_records() >= sent; }));
    rx_.Stop();
    EXPECT_EQ(rx_.event_records() + rx_.channels.size(), sent);
    EXPECT_EQ(sent + dropped, issued + rx_.channels.size());
    return dropped;
  }

  FakeTree dir_;
  GpuReceiver rx_;
  std::vector<FakeNccl::Comm> comms_;
};

// 10,000 schedules, each from its own seed: a few operations (single, fused in a user group,
// Send/Recv pairs), with the proxy side running at random points of the user thread's calls, so
// that children start before or after their Coll's stop, KernelCh after every ProxyOp stopped,
// and several collectives are in flight (the proxy side of one schedule may run into the next).
// Every record must carry exactly what was driven: kernel_channel timing equal to the driven GPU
// interval, its proxy ops and bytes; none lost or doubled.
// Through each table NCCL may pick: v6 (NCCL 2.29+), v5 (2.28), v4 (2.27: no API events, the
// Coll parented on its Group); 10,000 schedules on v6, 2,000 on each of the others.
class SeededScheduleTest : public ScheduleTest, public ::testing::WithParamInterface<int> {};

TEST_P(SeededScheduleTest, EveryRecordExact) {
  // v5 runs with ProxyStep events on (mask 90, the deep dive's: bytes from the steps), the
  // others with the default mask (bytes estimated from the ProxyOp descriptors).
  if (GetParam() == 5) setenv("FABRICSCOPE_NCCL_EVENT_MASK", "90", 1);
  FakeNccl::Options options;
  options.inline_proxy = true;
  options.table_version = GetParam();
  std::string error;
  auto nccl = FakeNccl::Load(kPluginPath, &error, options);
  ASSERT_NE(nccl, nullptr) << error;
  std::vector<FakeNccl::Comm> comms = TwoComms();
  for (auto& c : comms) ASSERT_EQ(nccl->Init(c), 0);
  Checker checker;
  checker.graph_from_api = GetParam() != 4;
  size_t before_stop = 0, after_stop = 0, kernel_after_proxy = 0, collectives = 0;
  std::vector<std::shared_ptr<FakeNccl::Expected>> all;
  const int kSchedules = GetParam() == 6 ? 10000 : 2000;
  for (int seed = 1; seed <= kSchedules; ++seed) {
    nccl->Reseed(static_cast<uint64_t>(seed));
    FakeNccl::Comm& c = comms[seed % 2];
    const int i = seed;
    std::vector<std::shared_ptr<FakeNccl::Expected>> v;
    switch (seed % 4) {
      case 0:
      case 1:
        v.push_back(nccl->Run(c, MakeSpec(i, c.rank, c.nranks)));
        break;
      case 2:
        v = nccl->RunGroup(c, {MakeSpec(i, c.rank, c.nranks), MakeSpec(i + 1, c.rank, c.nranks)});
        break;
      default: {
        const int peer = (c.rank + 1) % c.nranks;
        v = nccl->RunGroup(c, {MakeP2p(true, peer), MakeP2p(false, peer)});
      }
    }
    if (seed % 5 == 0) nccl->Drain();  // else the next schedule starts with this one in flight
    checker.Add(v);
    all.insert(all.end(), v.begin(), v.end());
  }
  nccl->Drain();
  for (const auto& e : all) {
    if (!e->coll_emitted) continue;
    ++collectives;
    (e->child_before_stop ? before_stop : after_stop) += 1;
    kernel_after_proxy += e->kernel_after_proxy ? 1 : 0;
  }
  checker.AddProxy(nccl->expected_proxy_ops());
  const uint64_t dropped = Finish(*nccl, comms);
  EXPECT_EQ(dropped, 0u);
  EXPECT_EQ(checker.Check(rx_), rx_.event_records());
  EXPECT_EQ(rx_.collectives.size(), collectives);
  // Every order was driven, many times.
  EXPECT_GT(before_stop, collectives / 10);
  EXPECT_GT(after_stop, collectives / 10);
  EXPECT_GT(kernel_after_proxy, collectives / 10);
  // The Checker held every record to its exact timing source; those with a valid kernel timer
  // (all but the 1 in 11 whose timers MakeSpec zeroes or inverts) carry the kernel interval.
  // At the default mask the ProxyOps are untimed: a collective with every timer bad takes the
  // interval to its kernel seen done (proxy_op), or only its enqueue where a channel's KernelCh
  // never came (the 1 in 187 that MakeSpec gives both faults); the Checker held each to it.
  EXPECT_GE(checker.kernel_timed * 100, collectives * 85);
  EXPECT_EQ(checker.kernel_timed + checker.proxy_timed + checker.enqueue_timed, collectives);
  EXPECT_GT(checker.proxy_timed, checker.enqueue_timed);
  std::printf(
      "v%d, schedules %d: collectives %zu (children before the Coll stop %zu, after "
      "%zu, KernelCh after every ProxyOp stop %zu), kernel-timed %zu, proxy-timed %zu, "
      "enqueue-timed "
      "%zu\n",
      GetParam(), kSchedules, collectives, before_stop, after_stop, kernel_after_proxy,
      checker.kernel_timed, checker.proxy_timed, checker.enqueue_timed);
}

INSTANTIATE_TEST_SUITE_P(Tables, SeededScheduleTest, ::testing::Values(6, 5, 4));

// The same seeded schedules with FABRICSCOPE_NCCL_CHANNEL_SPANS=1: KernelCh slots are linked to
// their ops while the flush thread closes ops at random points against them (several in
// flight). Every record stays exact, nothing is dropped, and every kernel-timed collective's
// spans are its valid channels with the union of their times its interval.
TEST_F(ScheduleTest, ChannelSpansInSeededSchedulesStayExact) {
  setenv("FABRICSCOPE_NCCL_CHANNEL_SPANS", "1", 1);
  FakeNccl::Options options;
  options.inline_proxy = true;
  std::string error;
  auto nccl = FakeNccl::Load(kPluginPath, &error, options);
  ASSERT_NE(nccl, nullptr) << error;
  std::vector<FakeNccl::Comm> comms = TwoComms();
  for (auto& c : comms) ASSERT_EQ(nccl->Init(c), 0);  // the first init reads the environment
  unsetenv("FABRICSCOPE_NCCL_CHANNEL_SPANS");
  ASSERT_TRUE(WaitForPoolsReady());
  Checker checker;
  std::vector<std::shared_ptr<FakeNccl::Expected>> all;
  for (int seed = 1; seed <= 2000; ++seed) {
    nccl->Reseed(static_cast<uint64_t>(seed));
    FakeNccl::Comm& c = comms[seed % 2];
    std::vector<std::shared_ptr<FakeNccl::Expected>> v;
    if (seed % 3 == 0) {
      v = nccl->RunGroup(c,
                         {MakeSpec(seed, c.rank, c.nranks), MakeSpec(seed + 1, c.rank, c.nranks)});
    } else {
      v.push_back(nccl->Run(c, MakeSpec(seed, c.rank, c.nranks)));
    }
    if (seed % 5 == 0) nccl->Drain();
    checker.Add(v);
    all.insert(all.end(), v.begin(), v.end());
  }
  nccl->Drain();
  checker.AddProxy(nccl->expected_proxy_ops());
  const uint64_t issued = nccl->issued();
  EXPECT_EQ(Finish(*nccl, comms), 0u);  // what was sent: the harness's records and the spans
  EXPECT_EQ(rx_.event_records(), issued);
  EXPECT_EQ(checker.Check(rx_), rx_.event_records());
  // By (comm, rank, func, seq): NCCL numbers each function's collectives on its own.
  std::map<std::tuple<uint64_t, int32_t, std::string, uint64_t>, std::vector<gpu::ChannelSpan>>
      spans;
  for (const gpu::ChannelSpansRecord& r : rx_.channels) {
    for (int k = 0; k < r.count; ++k) {
      spans[{r.comm_hash, r.rank, gpu::FixedString(r.func), r.seq}].push_back(r.spans[k]);
    }
  }
  size_t timed = 0;
  for (const gpu::CollectiveRecord& r : rx_.collectives) {
    if (r.timing_source != static_cast<uint8_t>(gpu::TimingSource::kKernelChannel)) continue;
    const std::vector<gpu::ChannelSpan>& got =
        spans[{r.comm_hash, r.rank, gpu::FixedString(r.func), r.seq}];
    const FakeNccl::Expected* e = nullptr;
    for (const auto& x : all) {
      if (x->coll_emitted && x->comm_hash == r.comm_hash && x->seq == r.seq &&
          x->spec.func == std::string(r.func)) {
        e = x.get();
      }
    }
    ASSERT_NE(e, nullptr) << r.seq;
    ASSERT_EQ(got.size(), e->channel_gpu.size()) << "seq " << r.seq;
    int64_t lo = INT64_MAX, hi = 0;
    for (const gpu::ChannelSpan& g : got) {
      lo = std::min(lo, g.start_ns);
      hi = std::max(hi, g.end_ns);
    }
    EXPECT_EQ(lo, r.start_ns);
    EXPECT_EQ(hi, r.end_ns);
    ++timed;
  }
  EXPECT_GT(timed, 1500u);
}

// A collective whose KernelCh never come (NCCL lost them) while the rank keeps issuing: once a
// later collective of the communicator completed its kernel, the first closes after the 100 ms
// linger (per-channel order, plugin_flush.cc Complete), not after the 10 s wait.
TEST_F(ScheduleTest, MissingKernelIsNotWaitedForWhileTheRankGoesOn) {
  FakeNccl::Options options;
  options.inline_proxy = true;
  std::string error;
  auto nccl = FakeNccl::Load(kPluginPath, &error, options);
  ASSERT_NE(nccl, nullptr) << error;
  std::vector<FakeNccl::Comm> comms = TwoComms();
  comms.resize(1);
  ASSERT_EQ(nccl->Init(comms[0]), 0);
  Checker checker;
  FakeNccl::CollSpec lost = FakeNccl::AllReduceSpec(1 << 20, 2, 4);
  for (auto& k : lost.kernels) k.timers = FakeNccl::TimerKind::kMissing;
  checker.Add({nccl->Run(comms[0], lost)});
  for (int i = 0; i < 3; ++i) {
    checker.Add({nccl->Run(comms[0], FakeNccl::AllReduceSpec(1 << 20, 2, 4))});
  }
  nccl->Drain();
  // Well before the 10 s wait: all four records (and 16 ProxyOp records) while still running.
  ASSERT_TRUE(WaitFor([&] { return rx_.event_records() == 20; }, std::chrono::seconds(5)))
      << rx_.event_records() << " records";
  checker.AddProxy(nccl->expected_proxy_ops());
  EXPECT_EQ(Finish(*nccl, comms), 0u);
  EXPECT_EQ(checker.Check(rx_), 20u);
  // The lost one: at the default mask its ProxyOps read no clock and no KernelCh came, so only
  // its enqueue interval (collectors/nccl/README.md, timing sources).
  EXPECT_EQ(checker.enqueue_timed, 1u);
  EXPECT_EQ(checker.kernel_timed, 3u);
}

// Pool exhaustion is counted, never fatal: 100 collectives in flight against a pool of 16.
TEST_F(ScheduleTest, FullPoolDropsAndCounts) {
  setenv("FABRICSCOPE_NCCL_POOL_EVENTS", "16", 1);
  auto nccl = LoadOneComm();
  unsetenv("FABRICSCOPE_NCCL_POOL_EVENTS");
  ASSERT_NE(nccl, nullptr);
  Checker checker;
  std::vector<std::shared_ptr<GpuGate>> gates;
  int accepted = 0;
  std::vector<std::shared_ptr<FakeNccl::Expected>> all;
  for (int i = 0; i < 100; ++i) {
    FakeNccl::CollSpec s = FakeNccl::AllReduceSpec(65536, 2, 4, 2, 32768);
    s.gate = std::make_shared<GpuGate>();
    gates.push_back(s.gate);
    all.push_back(nccl->Run(comms_[0], s));
    accepted += all.back()->coll_emitted ? 1 : 0;
  }
  checker.Add(all);
  EXPECT_EQ(accepted, 16);
  // A Send/Recv pair that finds the pool full is dropped too, and still takes its numbers
  // (NCCL numbers no P2P; the plugin does, and peers' numbers must keep matching): the
  // checker finds the next pair under the harness's numbers, which counted the dropped one.
  const int peer = (comms_[0].rank + 1) % comms_[0].nranks;
  const auto dropped_pair = nccl->RunGroup(comms_[0], {MakeP2p(true, peer), MakeP2p(false, peer)});
  EXPECT_FALSE(dropped_pair[0]->coll_emitted);
  checker.Add(dropped_pair);
  for (auto& g : gates) {
    g->started_ns = HarnessNowNs() - 20000;
    g->ended_ns = HarnessNowNs() - 5000;
  }
  nccl->Notify();
  nccl->Drain();
  // The 16 close (their slots free again) at the flush thread's next cycle.
  ASSERT_TRUE(WaitFor([&] { return rx_.event_records() >= 16 + 64; }));  // with their ProxyOps
  const auto pair = nccl->RunGroup(comms_[0], {MakeP2p(true, peer), MakeP2p(false, peer)});
  EXPECT_TRUE(pair[0]->coll_emitted);
  EXPECT_TRUE(pair[1]->coll_emitted);
  EXPECT_EQ(pair[0]->seq, 1u);  // Send 0 was dropped
  checker.Add(pair);
  nccl->Drain();
  checker.AddProxy(nccl->expected_proxy_ops());
  // The 84 collectives that found the pool full, and the first Send/Recv pair.
  EXPECT_EQ(Finish(*nccl, comms_), 86u);
  EXPECT_EQ(checker.Check(rx_), rx_.event_records());
  EXPECT_EQ(rx_.collectives.size(), 18u);
  EXPECT_EQ(rx_.proxy_ops.size(), 66u);
}

// A training loop of small all-reduces, one in flight (the next is enqueued once the proxy side
// finished the previous one), through a real proxy thread at the default pools: nothing lost.
TEST_F(ScheduleTest, TenThousandOneInFlightAtDefaultPoolsLoseNothing) {
  auto nccl = LoadOneComm();
  ASSERT_NE(nccl, nullptr);
  std::vector<FakeNccl::Comm>& comms = comms_;
  Checker checker;
  const int64_t t0 = HarnessNowNs();
  for (int i = 0; i < 10000; ++i) {
    checker.Add({nccl->Run(comms[0], FakeNccl::AllReduceSpec(65536, 2, 4, 2, 16384))});
    nccl->Drain();
  }
  const double rate = 10000 / ((HarnessNowNs() - t0) / 1e9);
  checker.AddProxy(nccl->expected_proxy_ops());
  EXPECT_EQ(Finish(*nccl, comms), 0u);
  EXPECT_EQ(checker.Check(rx_), rx_.event_records());
  EXPECT_EQ(rx_.collectives.size(), 10000u);
  EXPECT_EQ(checker.kernel_timed, 10000u);
  std::printf("one in flight: %.0f collectives/s\n", rate);
}

// A burst: 10,000 collectives enqueued before the GPU runs any (their KernelCh wait on gates),
// all in the plugin's pools at once; then the GPU runs them. Nothing lost at the default pools.
TEST_F(ScheduleTest, BurstOfTenThousandInFlightLosesNothing) {
  auto nccl = LoadOneComm();
  ASSERT_NE(nccl, nullptr);
  ASSERT_TRUE(WaitForPoolsReady());
  std::vector<FakeNccl::Comm>& comms = comms_;
  Checker checker;
  checker.max_report_lag_ns = 120'000'000'000;  // the proxy reports long after the "GPU" ran
  std::vector<std::shared_ptr<GpuGate>> gates;
  for (int i = 0; i < 10000; ++i) {
    FakeNccl::CollSpec s = FakeNccl::AllReduceSpec(65536, 2, 4, 2, 32768);
    s.gate = std::make_shared<GpuGate>();
    gates.push_back(s.gate);
    auto e = nccl->Run(comms[0], s);
    ASSERT_TRUE(e->coll_emitted) << "pool full at collective " << i;
    checker.Add({e});
  }
  // The GPU runs them in order.
  for (auto& g : gates) {
    const int64_t now = HarnessNowNs();
    g->started_ns = now - 20000;
    g->ended_ns = now - 5000;
  }
  nccl->Notify();
  nccl->Drain();
  checker.AddProxy(nccl->expected_proxy_ops());
  EXPECT_EQ(Finish(*nccl, comms), 0u);
  EXPECT_EQ(checker.Check(rx_), rx_.event_records());
  EXPECT_EQ(rx_.collectives.size(), 10000u);
  EXPECT_EQ(checker.kernel_timed, 10000u);
}

// A collective whose kernel ended while one of its ProxyOps stays open (NCCL never stops non-NET
// ProxyOps): it is closed after the open-child wait (1 s without a step), and its slot is freed
// by that child's stop, not under it; the pool does not leak (16 slots, 17 collectives).
TEST_F(ScheduleTest, ClosedWhileAChildHoldsItIsFreedByTheChild) {
  setenv("FABRICSCOPE_NCCL_POOL_EVENTS", "16", 1);
  auto nccl = LoadOneComm();
  unsetenv("FABRICSCOPE_NCCL_POOL_EVENTS");
  ASSERT_NE(nccl, nullptr);
  namespace abi = collectors::nccl;
  const abi::ProfilerV6& t = *nccl->v6();
  void* ctx = comms_[0].context;
  auto coll = [&](uint64_t seq) {
    abi::EventDescrV6 d{};
    d.type = abi::kEventColl;
    d.coll.seq_number = seq;
    d.coll.func = "AllReduce";
    d.coll.count = 1024;
    d.coll.datatype = "ncclFloat32";
    d.coll.n_channels = 2;
    void* h = nullptr;
    t.start_event(ctx, &h, &d);
    t.stop_event(h);
    return h;
  };
  void* a = coll(0);
  ASSERT_NE(a, nullptr);
  abi::EventDescrV6 pd{};
  pd.type = abi::kEventProxyOp;
  pd.parent_obj = a;
  pd.proxy_op.pid = getpid();
  pd.proxy_op.peer = 1;
  void* op = nullptr;
  t.start_event(ctx, &op, &pd);
  ASSERT_NE(op, nullptr);
  const int64_t now = HarnessNowNs();
  for (uint8_t ch = 0; ch < 2; ++ch) {
    abi::EventDescrV6 k{};
    k.type = abi::kEventKernelCh;
    k.parent_obj = a;
    k.kernel_ch.channel_id = ch;
    k.kernel_ch.p_timer = static_cast<uint64_t>(now - 50'000 + FakeNccl::kGpuClockOffsetNs);
    void* kh = nullptr;
    t.start_event(ctx, &kh, &k);
    abi::EventStateArgs args{};
    args.kernel_ch.p_timer = static_cast<uint64_t>(now - 10'000 + FakeNccl::kGpuClockOffsetNs);
    t.record_event_state(kh, abi::kStateKernelChStop, &args);
    t.stop_event(kh);
  }
  // Closed with the ProxyOp still open: no proxy ops in it, the kernel interval.
  ASSERT_TRUE(WaitFor([&] { return rx_.event_records() >= 1; }, std::chrono::seconds(5)));
  t.stop_event(op);  // the child's stop frees the slot
  ASSERT_TRUE(WaitFor([&] { return rx_.event_records() >= 2; }, std::chrono::seconds(5)));
  for (uint64_t seq = 1; seq <= 16; ++seq) EXPECT_NE(coll(seq), nullptr) << seq;  // no leak
  ASSERT_EQ(nccl->Finalize(comms_[0]), 0);  // calls made by hand: the harness issued none
  uint64_t records = 0, sent = 0, dropped = 0;
  ASSERT_TRUE(HarnessLog::Get().LastFinalStats(&records, &sent, &dropped));
  EXPECT_EQ(sent, 18u);  // 17 collectives + 1 ProxyOp
  EXPECT_EQ(dropped, 0u);
  ASSERT_TRUE(WaitFor([&] { return rx_.event_records() >= sent; }));
  rx_.Stop();
  ASSERT_GE(rx_.collectives.size(), 1u);
  const gpu::CollectiveRecord& r = rx_.collectives[0];
  EXPECT_EQ(r.seq, 0u);
  EXPECT_EQ(r.proxy_ops, 0u);
  EXPECT_EQ(r.timing_source, static_cast<uint8_t>(gpu::TimingSource::kKernelChannel));
  EXPECT_EQ(r.end_ns - r.start_ns, 40'000);
  ASSERT_EQ(rx_.proxy_ops.size(), 1u);
  EXPECT_EQ(rx_.proxy_ops[0].op_seq, 0u);
  EXPECT_EQ(rx_.collectives.size(), 17u);
}

// ABI v6 copy-engine collectives (src/ce_coll.cc ncclLaunchCeColl, on the launch thread):
// CeColl start, CeSync, CeBatch, CeSync, CeColl stop; parent: the already-stopped CollApi.
TEST_F(ScheduleTest, CopyEngineCollectiveThroughV6AndNotThroughV5) {
  std::string error;
  auto nccl = FakeNccl::Load(kPluginPath, &error);
  ASSERT_NE(nccl, nullptr) << error;
  std::vector<FakeNccl::Comm> comms = TwoComms();
  comms.resize(1);
  ASSERT_EQ(nccl->Init(comms[0]), 0);
  namespace abi = collectors::nccl;
  for (const abi::ProfilerV5* t : {nccl->v6(), &nccl->v5()}) {
    abi::EventDescrV6 api{};
    api.type = abi::kEventCollApi;
    api.coll_api.func = "AllGather";
    void* api_h = nullptr;
    t->start_event(comms[0].context, &api_h, &api);
    t->stop_event(api_h);
    abi::EventDescrV6 d{};
    d.type = abi::kEventCeColl;
    d.parent_obj = api_h;
    d.rank = comms[0].rank;
    d.ce_coll.seq_number = 6;
    d.ce_coll.func = "AllGather";
    d.ce_coll.count = 1 << 20;
    d.ce_coll.datatype = "ncclInt8";
    d.ce_coll.sync_strategy = "MC";
    void* coll = nullptr;
    const int64_t lo = HarnessNowNs();
    t->start_event(comms[0].context, &coll, &d);
    for (uint64_t type : {abi::kEventCeSync, abi::kEventCeBatch, abi::kEventCeSync}) {
      abi::EventDescrV6 c{};
      c.type = type;
      c.parent_obj = coll;
      c.ce_batch.num_ops = 3;
      void* h = nullptr;
      t->start_event(comms[0].context, &h, &c);
      EXPECT_EQ(h != nullptr, t == nccl->v6());
      t->stop_event(h);
    }
    t->stop_event(coll);
    const int64_t hi = HarnessNowNs();
    if (t == nccl->v6()) {
      ASSERT_NE(coll, nullptr);
      ASSERT_TRUE(WaitFor([&] { return rx_.event_records() == 1; }));
      const gpu::CollectiveRecord& r = rx_.collectives[0];
      EXPECT_EQ(r.timing_source, static_cast<uint8_t>(gpu::TimingSource::kCopyEngine));
      EXPECT_EQ(r.seq, 6u | (1ull << 63));
      EXPECT_EQ(gpu::FixedString(r.func), "AllGather");
      EXPECT_EQ(gpu::FixedString(r.algo), "CE");
      EXPECT_EQ(gpu::FixedString(r.proto), "MC");
      EXPECT_EQ(r.bytes, 1u << 20);
      EXPECT_GE(r.start_ns, lo);
      EXPECT_LE(r.end_ns, hi);
      EXPECT_LT(r.start_ns, r.end_ns);
    } else {
      EXPECT_EQ(coll, nullptr);  // the v5 table drops CE events, as NCCL's v5 adapter
    }
  }
  EXPECT_EQ(nccl->Finalize(comms[0]), 0);
  rx_.Stop();
  EXPECT_EQ(rx_.collectives.size(), 1u);
}

}  // namespace
}  // namespace fabricscope::testing
