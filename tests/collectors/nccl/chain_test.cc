// Plugin chaining (collectors/nccl/chain.h): FABRICSCOPE_NCCL_CHAIN names a recording plugin
// (recording_plugin.cc) that must see every event NCCL sent, in order, with its own handles and
// parents, while our records stay exact; for each ABI version the chained plugin may export.

#include <dlfcn.h>
#include <stdlib.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/collectors/nccl/plugin_checker.h"
#include "tests/common/fake_tree.h"
#include "tests/common/gpu_receiver.h"
#include "tests/common/nccl_harness.h"
#include "tests/common/wait.h"

extern "C" struct RecordingCall {
  char op;
  uint64_t type;
  void* context;
  void* handle;
  void* parent;
  int state;
};

namespace fabricscope::testing {
namespace {

using CallsFn = size_t (*)(const RecordingCall**);

class ChainTest : public ::testing::TestWithParam<int> {};

TEST_P(ChainTest, ChainedPluginSeesEveryEventWithItsOwnHandles) {
  const int version = GetParam();
  const std::string path = std::string(FABRICSCOPE_RECORDING_PLUGIN_DIR) +
                           "/libfabricscope_recording_plugin_v" + std::to_string(version) + ".so";
  FakeTree dir;
  GpuReceiver rx;
  ASSERT_TRUE(rx.Start());
  setenv("FABRICSCOPE_GPU_SOCKET", rx.path().c_str(), 1);
  setenv("FABRICSCOPE_NCCL_MASK_FILE", dir.Path("none").c_str(), 1);
  setenv("FABRICSCOPE_NCCL_CHAIN", path.c_str(), 1);
  FakeNccl::Options options;
  options.inline_proxy = true;
  options.seed = 7 + static_cast<uint64_t>(version);
  std::string error;
  auto nccl = FakeNccl::Load(FABRICSCOPE_NCCL_PLUGIN, &error, options);
  ASSERT_NE(nccl, nullptr) << error;
  FakeNccl::Comm comm;
  comm.hash = 0xc4a1;
  comm.rank = 1;
  comm.nranks = 4;
  ASSERT_EQ(nccl->Init(comm), 0);
  // The mask is the union: ours (74, the default) and the chained plugin's Coll | ProxyCtrl.
  EXPECT_EQ(nccl->LoadMask(), 74 | 2 | 32);
  Checker checker;
  for (int i = 0; i < 200; ++i) {
    checker.Add({nccl->Run(comm, MakeSpec(i, comm.rank, comm.nranks))});
    if (i % 10 == 0) nccl->CallWithBadArguments(comm);
  }
  nccl->Drain();
  checker.AddProxy(nccl->expected_proxy_ops());
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr) << "the chained plugin is not loaded";
  auto calls_fn = reinterpret_cast<CallsFn>(dlsym(lib, "fabricscope_recording_calls"));
  ASSERT_NE(calls_fn, nullptr);
  const uint64_t issued = nccl->issued();
  ASSERT_EQ(nccl->Finalize(comm), 0);
  const RecordingCall* calls = nullptr;
  const size_t ncalls = calls_fn(&calls);
  const std::vector<RecordingCall> seen(calls, calls + ncalls);
  dlclose(lib);
  unsetenv("FABRICSCOPE_NCCL_CHAIN");

  // Its own contexts; every start's parent is one of its handles (or NULL), every stop and
  // record names a handle it returned; Coll / ProxyOp / KernelCh counts match what was driven.
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.front().op, 'i');
  EXPECT_EQ(seen.back().op, 'f');
  EXPECT_EQ(seen.back().context, seen.front().context);
  std::map<void*, uint64_t> started;  // its handle -> type
  std::map<void*, bool> stopped;      // handles of starts on its context -> stop seen
  std::map<uint64_t, int> starts_by_type;
  size_t bad_parents = 0, bad_stops = 0;
  for (const RecordingCall& c : seen) {
    if (c.op == 's') {
      if (c.parent != nullptr && started.count(c.parent) == 0) ++bad_parents;
      started[c.handle] = c.type;
      ++starts_by_type[c.type];
      // NULL: CallWithBadArguments' start on a failed init's context, never stopped by NCCL.
      EXPECT_TRUE(c.context == seen.front().context || c.context == nullptr);
      if (c.context != nullptr) stopped[c.handle] = false;
    } else if (c.op == 'e' || c.op == 'r') {
      if (started.count(c.handle) == 0) ++bad_stops;
      if (c.op == 'e' && stopped.count(c.handle) != 0) stopped[c.handle] = true;
    }
  }
  EXPECT_EQ(bad_parents, 0u);
  EXPECT_EQ(bad_stops, 0u);
  size_t never_stopped = 0;
  for (const auto& [handle, done] : stopped) never_stopped += done ? 0 : 1;
  EXPECT_EQ(never_stopped, 0u);  // every event it saw start on its context, it saw stop
  namespace abi = collectors::nccl;
  EXPECT_GE(starts_by_type[abi::kEventColl], 200u);  // + CallWithBadArguments' starts
  EXPECT_GT(starts_by_type[abi::kEventProxyOp], 700u);
  EXPECT_GT(starts_by_type[abi::kEventKernelCh], 300u);
  EXPECT_GT(starts_by_type[abi::kEventProxyCtrl], 100u);
  if (version == 4) {
    EXPECT_EQ(starts_by_type[abi::kEventCollApi], 0u);  // v4 has no API events
  } else {
    EXPECT_EQ(starts_by_type[abi::kEventCollApi], 200u);
  }
  // Ours: every record exact, none lost.
  uint64_t records = 0, sent = 0, dropped = 0;
  ASSERT_TRUE(HarnessLog::Get().LastFinalStats(&records, &sent, &dropped));
  ASSERT_TRUE(WaitFor([&] { return rx.event_records() >= sent; }));
  rx.Stop();
  EXPECT_EQ(sent + dropped, issued);
  EXPECT_EQ(dropped, 0u);
  EXPECT_EQ(checker.Check(rx), rx.event_records());
}

INSTANTIATE_TEST_SUITE_P(Versions, ChainTest, ::testing::Values(6, 5, 4));

// A chain that cannot be loaded leaves ours working.
TEST(ChainFailureTest, UnloadableChainIsLoggedAndIgnored) {
  FakeTree dir;
  GpuReceiver rx;
  ASSERT_TRUE(rx.Start());
  setenv("FABRICSCOPE_GPU_SOCKET", rx.path().c_str(), 1);
  setenv("FABRICSCOPE_NCCL_MASK_FILE", dir.Path("none").c_str(), 1);
  setenv("FABRICSCOPE_NCCL_CHAIN", dir.Path("missing.so").c_str(), 1);
  HarnessLog::Get().Clear();
  std::string error;
  auto nccl = FakeNccl::Load(FABRICSCOPE_NCCL_PLUGIN, &error);
  ASSERT_NE(nccl, nullptr) << error;
  FakeNccl::Comm comm;
  comm.hash = 0xfa11;
  ASSERT_EQ(nccl->Init(comm), 0);
  EXPECT_EQ(nccl->LoadMask(), 74);  // ours alone: the default
  nccl->Run(comm, FakeNccl::AllReduceSpec(1 << 20, 0, 2));
  nccl->Drain();
  ASSERT_EQ(nccl->Finalize(comm), 0);
  unsetenv("FABRICSCOPE_NCCL_CHAIN");
  bool logged = false;
  for (const std::string& l : HarnessLog::Get().Lines()) {
    logged = logged || l.find("continuing without it") != std::string::npos;
  }
  EXPECT_TRUE(logged);
  ASSERT_TRUE(WaitFor([&] { return rx.event_records() >= 5; }));  // 1 collective + 4 ProxyOps
  rx.Stop();
  EXPECT_EQ(rx.collectives.size(), 1u);
}

}  // namespace
}  // namespace fabricscope::testing
