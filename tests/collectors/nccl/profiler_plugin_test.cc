// ABI tests of libnccl-profiler-fabricscope.so: the built library is dlopen()ed and driven by
// FakeNccl (tests/common/nccl_harness.h) exactly as NCCL 2.28 would; a GpuReceiver stands in
// for the agent. Every record that arrives is checked field by field against what the harness
// issued, and received + dropped must equal issued exactly.

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "collectors/gpu/wire.h"
#include "collectors/gpu/wire_decode.h"
#include "gtest/gtest.h"
#include "tests/collectors/nccl/plugin_checker.h"
#include "tests/common/gpu_receiver.h"
#include "tests/common/nccl_harness.h"
#include "tests/common/wait.h"

namespace fabricscope::testing {
namespace {

constexpr char kPlugin[] = FABRICSCOPE_NCCL_PLUGIN;
constexpr int kDefaultMask = 2 | 8 | 64;  // Coll | ProxyOp | KernelCh (issue 38)

class ProfilerPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    mask_file_ = dir_.Path("nccl-mask");
    setenv("FABRICSCOPE_NCCL_MASK_FILE", mask_file_.c_str(), 1);
    unsetenv("FABRICSCOPE_NCCL_EVENT_MASK");
    unsetenv("FABRICSCOPE_NCCL_POOL_EVENTS");
    HarnessLog::Get().Clear();
  }
  void TearDown() override {
    unsetenv("FABRICSCOPE_GPU_SOCKET");
    unsetenv("FABRICSCOPE_NCCL_CHANNEL_SPANS");
  }

  void WriteMask(int mask) {
    FILE* f = std::fopen(mask_file_.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fprintf(f, "%d\n", mask);
    std::fclose(f);
  }

  // Runs `n` rounds on each communicator: collectives, a user group with two collectives, and a
  // Send/Recv pair in a user group.
  void Drive(FakeNccl& nccl, std::vector<FakeNccl::Comm>& comms, int n, Checker& checker,
             int base = 0) {
    for (int i = base; i < base + n; ++i) {
      for (FakeNccl::Comm& c : comms) {
        checker.Add({nccl.Run(c, MakeSpec(i, c.rank, c.nranks))});
        if (i % 10 == 0) {
          checker.Add(nccl.RunGroup(
              c, {MakeSpec(i + 1, c.rank, c.nranks), MakeSpec(i + 2, c.rank, c.nranks)}));
        }
        if (i % 8 == 0) {
          const int peer = (c.rank + 1) % c.nranks;
          checker.Add(nccl.RunGroup(c, {MakeP2p(true, peer), MakeP2p(false, peer)}));
        }
        if (i % 50 == 0) nccl.CallWithBadArguments(c);
      }
    }
  }

  std::vector<FakeNccl::Comm> MakeComms() {
    std::vector<FakeNccl::Comm> comms(2);
    comms[0].hash = 0x1111222233334444;
    comms[0].rank = 1;
    comms[0].nranks = 4;
    comms[0].nnodes = 2;
    comms[0].name = "dp";
    comms[1].hash = 0x5555666677778888;
    comms[1].rank = 0;
    comms[1].nranks = 2;
    comms[1].name = "tp";
    return comms;
  }

  // The plugin loaded against `rx` (started here, standing in for the agent), `comm` initialized.
  std::unique_ptr<FakeNccl> LoadAgainst(GpuReceiver& rx, FakeNccl::Comm& comm) {
    if (!rx.Start()) {
      ADD_FAILURE() << "receiver did not start";
      return nullptr;
    }
    setenv("FABRICSCOPE_GPU_SOCKET", rx.path().c_str(), 1);
    std::string error;
    auto nccl = FakeNccl::Load(kPlugin, &error);
    if (nccl == nullptr) {
      ADD_FAILURE() << error;
      return nullptr;
    }
    EXPECT_EQ(nccl->Init(comm), 0);
    return nccl;
  }

  FakeTree dir_;  // removed with the fixture
  std::string mask_file_;
};

TEST_F(ProfilerPluginTest, ExportsBothTablesAsDataObjects) {
  std::string error;
  auto nccl = FakeNccl::Load(kPlugin, &error);
  ASSERT_NE(nccl, nullptr) << error;
  EXPECT_STREQ(nccl->v5().name, "fabricscope");
  ASSERT_NE(nccl->v4(), nullptr);
  EXPECT_STREQ(nccl->v4()->name, "fabricscope");
  EXPECT_NE(nccl->v5().init, nullptr);
  EXPECT_NE(nccl->v5().start_event, nullptr);
  EXPECT_NE(nccl->v5().finalize, nullptr);
  // Nothing else is exported.
  void* lib = dlopen(kPlugin, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr);
  EXPECT_EQ(dlsym(lib, "_ZN11fabricscope10collectors4nccl10StartEventEPvPS3_PNS1_12EventDescrV5E"),
            nullptr);
  dlclose(lib);
}

// The main scenario: two communicators, thousands of operations, a concurrent proxy thread,
// the ABI's edge cases (ABI §8.4, collectors/nccl/profiler_abi.h), mask changes through the control
// file, finalize from another thread, dlclose and a second load.
TEST_F(ProfilerPluginTest, EveryRecordArrivesWithTheRightFieldsOrIsCountedAsDropped) {
  GpuReceiver rx;
  ASSERT_TRUE(rx.Start());
  setenv("FABRICSCOPE_GPU_SOCKET", rx.path().c_str(), 1);
  Checker checker;
  uint64_t issued_total = 0, dropped_total = 0, sent_total = 0;
  size_t comms_initialized = 0;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    unlink(mask_file_.c_str());
    std::string error;
    auto nccl = FakeNccl::Load(kPlugin, &error);
    ASSERT_NE(nccl, nullptr) << error;
    std::vector<FakeNccl::Comm> comms = MakeComms();
    for (auto& c : comms) {
      c.hash += round;
      ASSERT_EQ(nccl->Init(c), 0);
      ASSERT_NE(c.context, nullptr);
      ++comms_initialized;
    }
    EXPECT_EQ(nccl->LoadMask(), kDefaultMask);
    // A failing init: error, NULL context, the mask left alone; its events are ignored.
    FakeNccl::Comm bad;
    bad.nranks = 0;
    nccl->StoreMask(kDefaultMask);
    EXPECT_NE(nccl->Init(bad), 0);
    EXPECT_EQ(bad.context, nullptr);
    EXPECT_EQ(nccl->LoadMask(), kDefaultMask);
    nccl->Run(bad, MakeSpec(0, 0, 2));
    nccl->CallWithBadArguments(bad);

    const int n = round == 0 ? 600 : 300;
    Drive(*nccl, comms, n, checker);
    // Runtime mask changes through the control file (checked once a second: first load only).
    if (round == 0) {
      // Runtime mask change: Coll|ProxyOp only (no steps: estimated bytes; no KernelCh: ProxyOp
      // times).
      nccl->Drain();
      WriteMask(2 | 8);
      ASSERT_TRUE(WaitFor([&] { return nccl->LoadMask() == (2 | 8); }));
      Drive(*nccl, comms, n / 6, checker, n);
      // Coll only: enqueue times.
      nccl->Drain();
      WriteMask(2);
      ASSERT_TRUE(WaitFor([&] { return nccl->LoadMask() == 2; }));
      Drive(*nccl, comms, n / 6, checker, n + n / 6);
      // Every type (4095): API, KernelLaunch and ProxyCtrl events too, which carry no record,
      // and the ProxyStep events a deep dive switches on at run time: bytes from the steps.
      nccl->Drain();
      WriteMask(4095);
      ASSERT_TRUE(WaitFor([&] { return nccl->LoadMask() == 4095; }));
      Drive(*nccl, comms, n / 6, checker, n + n / 3);
      // The file removed: back to the environment's (default) mask.
      nccl->Drain();
      unlink(mask_file_.c_str());
      ASSERT_TRUE(WaitFor([&] { return nccl->LoadMask() == kDefaultMask; }));
      Drive(*nccl, comms, 20, checker, n + n / 2);
    }
    nccl->Drain();
    EXPECT_EQ(nccl->bad_handles_written(), 0);
    checker.AddProxy(nccl->expected_proxy_ops());
    issued_total += nccl->issued();

    // Finalize from another thread, the second comm from this one; then dlclose.
    std::thread finalizer([&] { EXPECT_EQ(nccl->Finalize(comms[0]), 0); });
    finalizer.join();
    EXPECT_EQ(nccl->Finalize(comms[1]), 0);
    uint64_t records = 0, sent = 0, dropped = 0;
    ASSERT_TRUE(HarnessLog::Get().LastFinalStats(&records, &sent, &dropped));
    HarnessLog::Get().Clear();
    sent_total += sent;
    dropped_total += dropped;
    nccl.reset();
  }
  ASSERT_TRUE(WaitFor([&] { return rx.event_records() >= sent_total; }));
  rx.Stop();
  EXPECT_EQ(rx.decode_errors(), 0);
  EXPECT_EQ(rx.event_records(), sent_total);
  EXPECT_EQ(rx.event_records() + dropped_total, issued_total);
  EXPECT_GT(sent_total, issued_total / 2);  // most records get through a live receiver
  const size_t matched = checker.Check(rx);
  EXPECT_EQ(matched, rx.event_records());
  EXPECT_GT(checker.kernel_timed, 100u);
  EXPECT_GT(checker.proxy_timed, 50u);
  EXPECT_GT(checker.enqueue_timed, 50u);
  EXPECT_GT(checker.graph, 10u);
  EXPECT_EQ(rx.comms.size(), comms_initialized);
  for (const gpu::DatagramHeader& h : rx.headers) {
    EXPECT_EQ(h.pid, getpid());
    EXPECT_EQ(h.source, static_cast<uint16_t>(gpu::Source::kNcclProfiler));
  }
  size_t pxn = 0;
  for (const gpu::ProxyOpRecord& r : rx.proxy_ops) {
    if (r.pid != getpid()) {
      ++pxn;
      EXPECT_EQ(r.comm_hash, 0u);
      EXPECT_EQ(r.op_seq, UINT64_MAX);
    }
  }
  EXPECT_GT(pxn, 5u);
}

// No agent: every record is counted as dropped and the training thread's calls still return.
TEST_F(ProfilerPluginTest, AgentAbsentDropsAndCountsEverythingWithoutBlocking) {
  setenv("FABRICSCOPE_GPU_SOCKET", dir_.Path("nobody.sock").c_str(), 1);
  std::string error;
  auto nccl = FakeNccl::Load(kPlugin, &error);
  ASSERT_NE(nccl, nullptr) << error;
  std::vector<FakeNccl::Comm> comms = MakeComms();
  for (auto& c : comms) ASSERT_EQ(nccl->Init(c), 0);
  Checker checker;
  // Watchdog: the driving thread must finish; if a call blocked, done would stay false and the
  // test fails at the deadline instead of hanging.
  std::atomic<bool> done{false};
  std::thread user([&] {
    Drive(*nccl, comms, 300, checker);
    nccl->Drain();
    done.store(true);
  });
  const bool finished = WaitFor([&] { return done.load(); }, std::chrono::seconds(120));
  ASSERT_TRUE(finished) << "a profiler call blocked with the agent absent";
  user.join();
  const uint64_t issued = nccl->issued();
  for (auto& c : comms) EXPECT_EQ(nccl->Finalize(c), 0);
  uint64_t records = 0, sent = 0, dropped = 0;
  ASSERT_TRUE(HarnessLog::Get().LastFinalStats(&records, &sent, &dropped));
  EXPECT_EQ(sent, 0u);
  EXPECT_EQ(dropped, issued);
  EXPECT_GT(issued, 1000u);
}

// The agent goes away mid-stream and comes back: the plugin reconnects, re-sends its
// communicators, and nothing goes unaccounted.
TEST_F(ProfilerPluginTest, ReceiverClosedMidStreamThenReconnects) {
  GpuReceiver rx;
  ASSERT_TRUE(rx.Start());
  setenv("FABRICSCOPE_GPU_SOCKET", rx.path().c_str(), 1);
  std::string error;
  auto nccl = FakeNccl::Load(kPlugin, &error);
  ASSERT_NE(nccl, nullptr) << error;
  std::vector<FakeNccl::Comm> comms = MakeComms();
  for (auto& c : comms) ASSERT_EQ(nccl->Init(c), 0);
  Checker checker;
  Drive(*nccl, comms, 100, checker);
  nccl->Drain();
  ASSERT_TRUE(WaitFor([&] { return rx.event_records() > 100; }));
  rx.Stop();  // the agent dies
  const size_t first_comms = rx.comms.size();
  EXPECT_EQ(first_comms, comms.size());
  Drive(*nccl, comms, 100, checker, 100);
  nccl->Drain();
  ASSERT_TRUE(rx.Start());  // and comes back on the same path
  ASSERT_TRUE(WaitFor([&] { return rx.comm_records() >= first_comms + comms.size(); }));
  EXPECT_EQ(rx.connections(), 2);
  Drive(*nccl, comms, 100, checker, 200);
  nccl->Drain();
  checker.AddProxy(nccl->expected_proxy_ops());
  const uint64_t issued = nccl->issued();
  for (auto& c : comms) EXPECT_EQ(nccl->Finalize(c), 0);
  uint64_t records = 0, sent = 0, dropped = 0;
  ASSERT_TRUE(HarnessLog::Get().LastFinalStats(&records, &sent, &dropped));
  ASSERT_TRUE(WaitFor([&] { return rx.event_records() >= sent; }));
  rx.Stop();
  EXPECT_EQ(rx.event_records(), sent);
  EXPECT_EQ(sent + dropped, issued);
  EXPECT_GT(dropped, 0u);  // what was produced while the agent was away
  EXPECT_EQ(checker.Check(rx), rx.event_records());
  // The datagram after the outage reports the drops cumulatively.
  EXPECT_GT(rx.max_dropped(), 0u);
}

// A caller-timed ring all-reduce (what the cluster-in-a-box test reports): the record carries the
// caller's interval (fitted offset exact to the report lag) and the ring's proxy bytes.
TEST_F(ProfilerPluginTest, CallerTimedAllReduceKeepsItsInterval) {
  GpuReceiver rx;
  ASSERT_TRUE(rx.Start());
  setenv("FABRICSCOPE_GPU_SOCKET", rx.path().c_str(), 1);
  std::string error;
  auto nccl = FakeNccl::Load(kPlugin, &error);
  ASSERT_NE(nccl, nullptr) << error;
  FakeNccl::Comm comm;
  comm.hash = 42;
  comm.rank = 2;
  comm.nranks = 4;
  ASSERT_EQ(nccl->Init(comm), 0);
  const int64_t start = HarnessNowNs() - 2'000'000;  // "the transfer ran for the last 2 ms"
  const int64_t end = HarnessNowNs() - 1'000'000;
  FakeNccl::CollSpec spec = FakeNccl::AllReduceSpec(8 << 20, 2, 4, 2, 1 << 20);
  spec.gate = std::make_shared<GpuGate>();
  spec.gate->started_ns = start;
  spec.gate->ended_ns = end;
  const auto e = nccl->Run(comm, spec);
  nccl->Drain();
  EXPECT_EQ(nccl->Finalize(comm), 0);
  ASSERT_TRUE(WaitFor([&] { return rx.event_records() == 5; }));  // 1 collective + 4 proxy ops
  rx.Stop();
  ASSERT_EQ(rx.collectives.size(), 1u);
  const gpu::CollectiveRecord& r = rx.collectives[0];
  EXPECT_EQ(r.bytes, 8u << 20);
  // 2 channels x (send + recv) x 2(n-1)/n of 4 MiB each = 4 x 6 MiB.
  EXPECT_EQ(r.proxy_bytes, 4u * 6 * 1024 * 1024);
  EXPECT_EQ(r.proxy_ops, 4u);
  EXPECT_EQ(r.timing_source, static_cast<uint8_t>(gpu::TimingSource::kKernelChannel));
  EXPECT_EQ(r.end_ns - r.start_ns, end - start);
  // The offset is fitted from report times that come >= 1 ms after the interval: the record
  // lies at most that late.
  EXPECT_GE(r.start_ns, start);
  EXPECT_LE(r.start_ns, start + 50'000'000);
  EXPECT_EQ(e->proxy_bytes, r.proxy_bytes);
}

// FABRICSCOPE_NCCL_CHANNEL_SPANS=1: every KernelCh-timed operation's channels arrive, before its
// record, each with the GPU times the harness gave that channel fitted by the operation's own
// offset (so their union is the operation's interval). A pool of 16 KernelCh slots for 100
// operations on 4 channels: the slots the spans hold are all given back as operations close.
TEST_F(ProfilerPluginTest, ChannelSpansArriveWithTheirOperationWhenAsked) {
  setenv("FABRICSCOPE_NCCL_CHANNEL_SPANS", "1", 1);
  setenv("FABRICSCOPE_NCCL_POOL_EVENTS", "16", 1);
  GpuReceiver rx;
  FakeNccl::Comm comm;
  comm.hash = 77;
  comm.rank = 1;
  comm.nranks = 4;
  auto nccl = LoadAgainst(rx, comm);
  ASSERT_NE(nccl, nullptr);
  std::vector<std::shared_ptr<Expected>> issued;
  size_t due = 0;  // each operation's record and its proxy ops' (ChannelSpans not counted)
  for (int i = 0; i < 100; ++i) {
    issued.push_back(nccl->Run(comm, FakeNccl::AllReduceSpec(1 << 20, 1, 4, 4, 256 << 10)));
    nccl->Drain();
    // One at a time, each closed before the next: a slot a span kept and never gave back would
    // leave the next operations without KernelCh after 4 of them.
    due += 1 + issued.back()->proxy_ops;
    ASSERT_TRUE(WaitFor([&] { return rx.event_records() >= due; })) << "operation " << i;
  }
  EXPECT_EQ(nccl->Finalize(comm), 0);
  rx.Stop();
  std::map<uint64_t, std::vector<gpu::ChannelSpan>> spans;  // by seq
  for (const gpu::ChannelSpansRecord& c : rx.channels) {
    EXPECT_EQ(c.comm_hash, 77u);
    EXPECT_EQ(c.rank, 1);
    EXPECT_STREQ(c.func, "AllReduce");
    for (int k = 0; k < c.count; ++k) spans[c.seq].push_back(c.spans[k]);
  }
  size_t timed = 0;
  for (const gpu::CollectiveRecord& r : rx.collectives) {
    const Expected* e = nullptr;
    for (const auto& x : issued) e = x->seq == r.seq ? x.get() : e;
    ASSERT_NE(e, nullptr) << r.seq;
    if (r.timing_source != static_cast<uint8_t>(gpu::TimingSource::kKernelChannel)) continue;
    ++timed;
    const std::vector<gpu::ChannelSpan>& got = spans[r.seq];
    ASSERT_EQ(got.size(), e->channel_gpu.size()) << "seq " << r.seq;
    int64_t lo = INT64_MAX, hi = 0;
    for (const gpu::ChannelSpan& g : got) {
      const auto it = e->channel_gpu.find(g.channel);
      ASSERT_NE(it, e->channel_gpu.end()) << "channel " << int{g.channel};
      EXPECT_EQ(g.end_ns - g.start_ns, it->second.second - it->second.first);
      lo = std::min(lo, g.start_ns);
      hi = std::max(hi, g.end_ns);
    }
    EXPECT_EQ(lo, r.start_ns);
    EXPECT_EQ(hi, r.end_ns);
  }
  // Every operation kept its KernelCh timing: no slot was lost to a span.
  EXPECT_EQ(timed, 100u);
}

TEST_F(ProfilerPluginTest, NoChannelSpansByDefault) {
  GpuReceiver rx;
  FakeNccl::Comm comm;
  comm.hash = 78;
  comm.nranks = 2;
  auto nccl = LoadAgainst(rx, comm);
  ASSERT_NE(nccl, nullptr);
  std::vector<std::shared_ptr<Expected>> issued;
  for (int i = 0; i < 5; ++i) {
    issued.push_back(nccl->Run(comm, FakeNccl::AllReduceSpec(1 << 20, 0, 2, 4, 256 << 10)));
  }
  nccl->Drain();
  EXPECT_EQ(nccl->Finalize(comm), 0);
  size_t due = 0;
  for (const auto& e : issued) due += 1 + e->proxy_ops;
  ASSERT_TRUE(WaitFor([&] { return rx.event_records() >= due; }));
  rx.Stop();
  EXPECT_TRUE(rx.channels.empty());
}

// The v4 table (NCCL 2.27): init argument order and the 104-byte descriptor with a one-byte type
// followed by garbage padding.
TEST_F(ProfilerPluginTest, V4TableRecordsACollective) {
  GpuReceiver rx;
  ASSERT_TRUE(rx.Start());
  setenv("FABRICSCOPE_GPU_SOCKET", rx.path().c_str(), 1);
  std::string error;
  auto nccl = FakeNccl::Load(kPlugin, &error);
  ASSERT_NE(nccl, nullptr) << error;
  const auto& v4 = *nccl->v4();
  void* ctx = nullptr;
  ASSERT_EQ(v4.init(&ctx, nccl->mask(), "v4comm", 0xabcdef, 1, 8, 3, &HarnessLog::Logger), 0);
  ASSERT_NE(ctx, nullptr);
  namespace abi = collectors::nccl;
  abi::EventDescrV4 d;
  std::memset(&d, 0xA5, sizeof(d));  // garbage in the padding after the one-byte type
  d.type = abi::kEventColl;
  d.parent_obj = nullptr;
  d.rank = 3;
  d.coll.seq_number = 77;
  d.coll.func = "AllGather";
  d.coll.count = 1 << 20;
  d.coll.root = 0;
  d.coll.datatype = "ncclInt8";
  d.coll.n_channels = 1;
  d.coll.algo = "RING";
  d.coll.proto = "LL";
  void* coll = nullptr;
  v4.start_event(ctx, &coll, &d);
  ASSERT_NE(coll, nullptr);
  abi::EventDescrV4 k;
  std::memset(&k, 0x5A, sizeof(k));
  k.type = abi::kEventKernelCh;
  k.parent_obj = coll;
  k.kernel_ch.channel_id = 0;
  const int64_t t = HarnessNowNs();
  k.kernel_ch.p_timer = static_cast<uint64_t>(t + FakeNccl::kGpuClockOffsetNs - 5000);
  void* kh = nullptr;
  v4.start_event(ctx, &kh, &k);
  ASSERT_NE(kh, nullptr);
  abi::EventStateArgs a{};
  a.kernel_ch.p_timer = static_cast<uint64_t>(t + FakeNccl::kGpuClockOffsetNs + 5000);
  v4.record_event_state(kh, abi::kStateKernelChStop, &a);
  v4.stop_event(kh);
  v4.stop_event(coll);
  EXPECT_EQ(v4.finalize(ctx), 0);
  ASSERT_TRUE(WaitFor([&] { return rx.event_records() == 1; }));
  rx.Stop();
  ASSERT_EQ(rx.collectives.size(), 1u);
  const gpu::CollectiveRecord& r = rx.collectives[0];
  EXPECT_EQ(r.comm_hash, 0xabcdefu);
  EXPECT_EQ(r.seq, 77u);
  EXPECT_EQ(r.bytes, 1u << 20);
  EXPECT_EQ(r.rank, 3);
  EXPECT_EQ(r.nranks, 8);
  EXPECT_EQ(gpu::FixedString(r.func), "AllGather");
  EXPECT_EQ(r.timing_source, static_cast<uint8_t>(gpu::TimingSource::kKernelChannel));
  EXPECT_EQ(r.end_ns - r.start_ns, 10000);
  ASSERT_EQ(rx.comms.size(), 1u);
  EXPECT_EQ(gpu::FixedString(rx.comms[0].name), "v4comm");
}

}  // namespace
}  // namespace fabricscope::testing
