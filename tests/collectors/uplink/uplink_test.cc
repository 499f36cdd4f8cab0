#include "collectors/uplink/uplink.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "exporters/ingest/telemetry_service.h"
#include "exporters/state/cluster_state.h"
#include "tests/collectors/uplink/uplink_test_util.h"
#include "tests/common/wait.h"

namespace fabricscope::uplink {
namespace {

using testing::WaitFor;

TEST(GrpcUplink, DeliversBatchesInOrderAndTheyAreAcked) {
  exporters::ClusterState state;
  exporters::TelemetryServer server(state);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  GrpcUplink uplink({.target = absl::StrCat("127.0.0.1:", *port)}, TestHello());
  for (uint64_t i = 1; i <= 3; ++i) uplink.Submit(TestBatch(i * 1000));
  ASSERT_TRUE(WaitFor([&] { return uplink.acked_seq() == 3; }));
  EXPECT_EQ(ExportedTx(state), 3000);
  EXPECT_EQ(SelfMetric(state, "fabricscope_aggregator_batches_total"), 3);
  EXPECT_TRUE(uplink.connected());
  uplink.Shutdown(1000);
}

TEST(GrpcUplink, QueuesWhileTheAggregatorIsAwayAndResendsAfterItsRestart) {
  int port = 0;
  {
    exporters::ClusterState first;
    exporters::TelemetryServer server(first);
    auto p = server.Start("127.0.0.1:0");
    ASSERT_TRUE(p.ok());
    port = *p;
  }  // the aggregator is gone before the agent starts
  GrpcUplink uplink(
      {.target = absl::StrCat("127.0.0.1:", port), .initial_backoff_ms = 20, .max_backoff_ms = 100},
      TestHello());
  uplink.Submit(TestBatch(100));
  uplink.Submit(TestBatch(200));
  EXPECT_EQ(uplink.acked_seq(), 0u);

  exporters::ClusterState second;
  exporters::TelemetryServer server(second);
  ASSERT_TRUE(server.Start(absl::StrCat("127.0.0.1:", port)).ok());
  ASSERT_TRUE(WaitFor([&] { return uplink.acked_seq() == 2; }));
  EXPECT_EQ(ExportedTx(second), 200);

  // Restart again: the new aggregator gets the next batches, and nothing is lost or duplicated.
  server.Stop(0);
  uplink.Submit(TestBatch(300));
  exporters::ClusterState third;
  exporters::TelemetryServer server3(third);
  ASSERT_TRUE(server3.Start(absl::StrCat("127.0.0.1:", port)).ok());
  ASSERT_TRUE(WaitFor([&] { return uplink.acked_seq() == 3; }));
  EXPECT_EQ(ExportedTx(third), 300);
  EXPECT_EQ(SelfMetric(third, "fabricscope_aggregator_lost_batches_total"), 0);
  EXPECT_GE(uplink.connects(), 2u);
  uplink.Shutdown(1000);
}

TEST(GrpcUplink, FullQueueDropsOldestAndCountsThem) {
  GrpcUplink uplink({.target = "127.0.0.1:1",
                     .max_queued_batches = 2,
                     .initial_backoff_ms = 20,
                     .max_backoff_ms = 50},
                    TestHello());
  // Nothing listens on port 1: everything queues.
  for (uint64_t i = 1; i <= 5; ++i) uplink.Submit(TestBatch(i));
  EXPECT_EQ(uplink.dropped_batches(), 3u);
  uplink.Shutdown(0);

  // A second uplink with the same overflow, then a live aggregator: resume_seq says 1..3 are
  // gone, so it acks through 5 without waiting for them, and counts them lost (none was acked).
  exporters::ClusterState state;
  exporters::TelemetryServer server(state);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok());
  server.Stop(0);
  GrpcUplink late({.target = absl::StrCat("127.0.0.1:", *port),
                   .max_queued_batches = 2,
                   .initial_backoff_ms = 20,
                   .max_backoff_ms = 50},
                  TestHello(7));
  for (uint64_t i = 1; i <= 5; ++i) late.Submit(TestBatch(i * 10));
  exporters::TelemetryServer server2(state);
  ASSERT_TRUE(server2.Start(absl::StrCat("127.0.0.1:", *port)).ok());
  ASSERT_TRUE(WaitFor([&] { return late.acked_seq() == 5; }));
  EXPECT_EQ(late.dropped_batches(), 3u);
  EXPECT_EQ(SelfMetric(state, "fabricscope_aggregator_lost_batches_total"), 3);
  EXPECT_EQ(ExportedTx(state), 50);
  late.Shutdown(1000);
}

// A batch the aggregator refuses (here: over its message size limit, RESOURCE_EXHAUSTED) is
// dropped and counted once, not sent again forever; the batches behind it get through (the
// next Hello's resume_seq skips it, so the aggregator waits for nothing).
TEST(GrpcUplink, ARefusedBatchIsDroppedAndTheRestGetThrough) {
  exporters::ClusterState state;
  exporters::TelemetryServer server(state, 64 << 10);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok());
  GrpcUplink uplink(
      {.target = absl::StrCat("127.0.0.1:", *port), .initial_backoff_ms = 20, .max_backoff_ms = 50},
      TestHello());
  uplink.Submit(TestBatch(100));
  v1::Batch big = TestBatch(200);
  big.add_collectives()->set_func(std::string(100 << 10, 'x'));  // 100 KiB > 64 KiB
  uplink.Submit(big);
  uplink.Submit(TestBatch(300));
  ASSERT_TRUE(WaitFor([&] { return uplink.acked_seq() == 3; }));
  EXPECT_EQ(uplink.refused_batches(), 1u);
  EXPECT_EQ(uplink.dropped_batches(), 0u);
  EXPECT_EQ(ExportedTx(state), 300);
  // Dropped by the agent before this aggregator stored it: lost, on both sides.
  EXPECT_EQ(SelfMetric(state, "fabricscope_aggregator_lost_batches_total"), 1);
  uplink.Shutdown(1000);
}

TEST(GrpcUplink, ShutdownReturnsPromptlyWhenTheAggregatorNeverAnswers) {
  GrpcUplink uplink({.target = "127.0.0.1:1"}, TestHello());
  uplink.Submit(TestBatch(1));
  const auto t0 = std::chrono::steady_clock::now();
  uplink.Shutdown(200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
}

// A client that breaks the protocol is refused with a clear status; the server keeps serving.
TEST(TelemetryService, BatchBeforeHelloIsRefused) {
  exporters::ClusterState state;
  exporters::TelemetryServer server(state);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok());
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", *port), grpc::InsecureChannelCredentials());
  auto stub = v1::Telemetry::NewStub(channel);
  {
    grpc::ClientContext ctx;
    auto stream = stub->Stream(&ctx);
    v1::AgentMessage m;
    *m.mutable_batch() = TestBatch(1);
    stream->Write(m);
    v1::AggregatorMessage in;
    EXPECT_FALSE(stream->Read(&in));
    grpc::Status st = stream->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  }
  {
    grpc::ClientContext ctx;
    auto stream = stub->Stream(&ctx);
    v1::AgentMessage hello;
    *hello.mutable_hello() = TestHello();
    ASSERT_TRUE(stream->Write(hello));
    v1::AgentMessage bad;
    *bad.mutable_batch() = TestBatch(1);
    bad.mutable_batch()->set_seq(1);
    bad.mutable_batch()->mutable_ports(0)->set_port_index(9);  // no such port
    ASSERT_TRUE(stream->Write(bad));
    // Dropped and counted, but acked, and the stream goes on: the next batch is stored.
    v1::AgentMessage good;
    *good.mutable_batch() = TestBatch(555);
    good.mutable_batch()->set_seq(2);
    ASSERT_TRUE(stream->Write(good));
    v1::AggregatorMessage in;
    uint64_t acked = 0;
    while (acked < 2 && stream->Read(&in)) acked = in.ack().seq();
    EXPECT_EQ(acked, 2u);
    EXPECT_EQ(ExportedTx(state), 555);
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
    v1::AgentMessage empty;  // a message with no kind on a new stream ends that stream
    grpc::ClientContext ctx2;
    auto s2 = stub->Stream(&ctx2);
    s2->Write(empty);
    while (s2->Read(&in)) {
    }
    EXPECT_EQ(s2->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(SelfMetric(state, "fabricscope_aggregator_rejected_batches_total"), 2);
}

}  // namespace
}  // namespace fabricscope::uplink
