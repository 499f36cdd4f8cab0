// The uplink with its spool (collectors/uplink/uplink.h, collectors/uplink/spool.h) against a real
// aggregator's gRPC service in-process: batches evicted from the memory queue are read back from
// disk, and what an agent process left behind (killed before its batches were acked) is replayed by
// the next one under its own Hello, exactly once.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "collectors/uplink/spool.h"
#include "collectors/uplink/uplink.h"
#include "exporters/ingest/telemetry_service.h"
#include "exporters/state/cluster_state.h"
#include "tests/collectors/uplink/uplink_test_util.h"
#include "tests/common/fake_tree.h"
#include "tests/common/wait.h"

namespace fabricscope::uplink {
namespace {

using testing::WaitFor;

// A port where nothing listens yet: the aggregator of the test starts there later.
int FreePort() {
  exporters::ClusterState scratch;
  exporters::TelemetryServer server(scratch);
  auto p = server.Start("127.0.0.1:0");
  return p.ok() ? *p : 0;
}

// The memory queue holds 2; the spool holds the rest: an outage of 8 batches loses none.
TEST(UplinkSpool, BatchesPastTheMemoryQueueAreSentFromDisk) {
  testing::FakeTree t;
  auto spool = Spool::Open({.dir = t.root()}, TestHello(7));
  ASSERT_TRUE(spool.ok());
  const int port = FreePort();
  GrpcUplink uplink({.target = absl::StrCat("127.0.0.1:", port),
                     .max_queued_batches = 2,
                     .initial_backoff_ms = 20,
                     .max_backoff_ms = 50,
                     .spool = spool->get()},
                    TestHello(7));
  for (uint64_t i = 1; i <= 8; ++i) uplink.Submit(TestBatch(i * 10));
  EXPECT_EQ(uplink.dropped_batches(), 0u);
  EXPECT_EQ((*spool)->stats().batches, 8u);
  exporters::ClusterState state;
  exporters::TelemetryServer server(state);
  ASSERT_TRUE(server.Start(absl::StrCat("127.0.0.1:", port)).ok());
  ASSERT_TRUE(WaitFor([&] { return uplink.acked_seq() == 8; }));
  EXPECT_EQ(SelfMetric(state, "fabricscope_aggregator_batches_total"), 8);
  EXPECT_EQ(SelfMetric(state, "fabricscope_aggregator_lost_batches_total"), 0);
  EXPECT_EQ(SelfMetric(state, "fabricscope_port_transmit_bytes_total"), 80);
  ASSERT_TRUE(WaitFor([&] { return (*spool)->stats().batches == 0; }));  // acked: deleted
  uplink.Shutdown(1000);
}

// An agent killed with batches unacked (here: its uplink stopped at once, the aggregator away):
// the next process replays them under the first one's Hello, then streams its own; every batch
// reaches the aggregator once, and the replayed ones are counted.
TEST(UplinkSpool, TheNextProcessReplaysWhatTheKilledOneLeft) {
  testing::FakeTree t;
  const int port = FreePort();
  const std::string target = absl::StrCat("127.0.0.1:", port);
  {
    auto spool = Spool::Open({.dir = t.root()}, TestHello(7));
    ASSERT_TRUE(spool.ok());
    GrpcUplink first({.target = target, .initial_backoff_ms = 20, .spool = spool->get()},
                     TestHello(7));
    for (uint64_t i = 1; i <= 5; ++i) first.Submit(TestBatch(i));
    first.Shutdown(0);  // nothing acked, nothing waited for: as kill -9 leaves the spool
  }
  exporters::ClusterState state;
  exporters::TelemetryServer server(state);
  ASSERT_TRUE(server.Start(target).ok());
  auto spool = Spool::Open({.dir = t.root()}, TestHello(8));
  ASSERT_TRUE(spool.ok());
  ASSERT_EQ((*spool)->Leftovers().size(), 1u);
  GrpcUplink second({.target = target, .initial_backoff_ms = 20, .spool = spool->get()},
                    TestHello(8));
  for (uint64_t i = 1; i <= 3; ++i) second.Submit(TestBatch(100 + i));
  ASSERT_TRUE(WaitFor([&] { return second.acked_seq() == 3; }));
  EXPECT_EQ(SelfMetric(state, "fabricscope_aggregator_batches_total"), 5 + 3);
  EXPECT_EQ(SelfMetric(state, "fabricscope_aggregator_duplicate_batches_total"), 0);
  EXPECT_EQ(SelfMetric(state, "fabricscope_aggregator_lost_batches_total"), 0);
  EXPECT_EQ(SelfMetric(state, "fabricscope_port_transmit_bytes_total"), 103);  // the live instance
  EXPECT_TRUE((*spool)->Leftovers().empty());
  EXPECT_GE((*spool)->stats().replayed, 1u);  // one per replayed segment's batches
  EXPECT_FALSE(std::filesystem::exists(absl::StrCat(t.root(), "/0000000000000007")));
  second.Shutdown(1000);
}

// Shutdown with the aggregator away: the unacked batches stay in the spool (and are said to),
// instead of being dropped.
TEST(UplinkSpool, ShutdownKeepsWhatIsNotAckedOnDisk) {
  testing::FakeTree t;
  auto spool = Spool::Open({.dir = t.root()}, TestHello(7));
  ASSERT_TRUE(spool.ok());
  GrpcUplink uplink({.target = absl::StrCat("127.0.0.1:", FreePort()), .spool = spool->get()},
                    TestHello(7));
  for (uint64_t i = 1; i <= 4; ++i) uplink.Submit(TestBatch(i));
  uplink.Shutdown(100);
  EXPECT_EQ(uplink.dropped_batches(), 0u);
  EXPECT_EQ((*spool)->stats().batches, 4u);
  // Without a spool the same exit drops them, counted.
  GrpcUplink bare({.target = absl::StrCat("127.0.0.1:", FreePort())}, TestHello(9));
  for (uint64_t i = 1; i <= 4; ++i) bare.Submit(TestBatch(i));
  bare.Shutdown(100);
  EXPECT_EQ(bare.dropped_batches(), 4u);
}

}  // namespace
}  // namespace fabricscope::uplink
