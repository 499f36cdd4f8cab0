// Who may stream to the aggregator, over real gRPC connections on loopback: shared and per-node
// tokens (collectors/common/stream_auth.h), token rotation without dropping live streams, and one
// live stream per node (exporters/ingest/telemetry_service.h: a second agent with the same node
// name is refused and counted, the same instance reconnecting takes over).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "collectors/common/stream_auth.h"
#include "collectors/uplink/uplink.h"
#include "exporters/ingest/telemetry_service.h"
#include "exporters/state/cluster_state.h"
#include "tests/agent/stream_test_util.h"
#include "tests/common/fake_tree.h"
#include "tests/common/wait.h"

namespace fabricscope::agent {
namespace {

using common::TokenAuth;
using testing::Batch;
using testing::FakeTree;
using testing::Hello;
using testing::Refused;
using testing::TryHello;
using testing::WaitFor;

const std::string kToken = "6f1c0de2a3b4c5d6e7f8091a2b3c4d5e";
const std::string kNodeB = "node-b-own-token-0123456789abcdef";
const std::string kRotated = "rotated-token-fedcba9876543210fe";

std::shared_ptr<grpc::ChannelCredentials> Plain() { return grpc::InsecureChannelCredentials(); }
testing::Metadata Bearer(const std::string& t) { return {{"authorization", "Bearer " + t}}; }
constexpr auto kHold = std::chrono::milliseconds(300);  // accepted: DEADLINE_EXCEEDED after it

class StreamPolicyTest : public ::testing::Test {
 protected:
  // An aggregator asking for kToken from everyone and kNodeB from node-b.
  void SetUp() override {
    dir_.Write("token", kToken + "\n");
    dir_.Write("nodes.yaml", "node-b: " + kNodeB + "\n");
    server_ = std::make_unique<exporters::TelemetryServer>(
        state_, exporters::TelemetryServer::kDefaultMaxMessageBytes, common::ServerTls{},
        Tokens(dir_.Path("token")));
    auto port = server_->Start("127.0.0.1:0");
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
  }
  std::shared_ptr<const TokenAuth> Tokens(const std::string& file) {
    auto t = TokenAuth::Load(file, dir_.Path("nodes.yaml"));
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : nullptr;
  }
  uplink::UplinkOptions Uplink(const std::string& token) const {
    return {.target = absl::StrCat("127.0.0.1:", port_),
            .initial_backoff_ms = 20,
            .max_backoff_ms = 50,
            .auth_token = token};
  }

  FakeTree dir_;
  exporters::ClusterState state_;
  std::unique_ptr<exporters::TelemetryServer> server_;
  int port_ = 0;
};

TEST_F(StreamPolicyTest, AnAgentWithTheTokenStreams) {
  uplink::GrpcUplink uplink(Uplink(kToken), Hello("node-a"));
  uplink.Submit(Batch());
  uplink.Submit(Batch());
  EXPECT_TRUE(WaitFor([&] { return uplink.acked_seq() == 2; }));
  uplink.Shutdown(1000);
  EXPECT_EQ(Refused(state_, "token"), 0);
  EXPECT_EQ(state_.node_count(), 1u);
}

TEST_F(StreamPolicyTest, NoTokenOrAWrongOneIsRefusedAndCounted) {
  grpc::Status st = TryHello(Plain(), port_, "node-a");
  EXPECT_EQ(st.error_code(), grpc::UNAUTHENTICATED) << st.error_message();
  EXPECT_EQ(Refused(state_, "token"), 1);
  st = TryHello(Plain(), port_, "node-a", Bearer(kRotated));
  EXPECT_EQ(st.error_code(), grpc::PERMISSION_DENIED) << st.error_message();
  EXPECT_EQ(st.error_message().find(kRotated), std::string::npos);
  st = TryHello(Plain(), port_, "node-a", {{"authorization", kToken}});  // no "Bearer "
  EXPECT_EQ(st.error_code(), grpc::UNAUTHENTICATED) << st.error_message();
  EXPECT_EQ(Refused(state_, "token"), 3);
  EXPECT_EQ(state_.node_count(), 0u);
  // The aggregator still takes a good stream.
  EXPECT_EQ(TryHello(Plain(), port_, "node-a", Bearer(kToken), kHold).error_code(),
            grpc::DEADLINE_EXCEEDED);
  EXPECT_EQ(state_.node_count(), 1u);
}

TEST_F(StreamPolicyTest, ANodeTokenReportsAsItsOwnNodeOnly) {
  EXPECT_EQ(TryHello(Plain(), port_, "node-b", Bearer(kNodeB), kHold).error_code(),
            grpc::DEADLINE_EXCEEDED);
  const grpc::Status st = TryHello(Plain(), port_, "node-c", Bearer(kNodeB));
  EXPECT_EQ(st.error_code(), grpc::PERMISSION_DENIED) << st.error_message();
  EXPECT_NE(st.error_message().find("not valid for node \"node-c\""), std::string::npos);
  EXPECT_EQ(Refused(state_, "token"), 1);
}

TEST_F(StreamPolicyTest, ARotatedTokenTakesNewStreamsAndKeepsTheLiveOne) {
  uplink::GrpcUplink uplink(Uplink(kToken), Hello("node-a"));
  uplink.Submit(Batch());
  ASSERT_TRUE(WaitFor([&] { return uplink.acked_seq() == 1; }));
  dir_.Write("token2", kRotated + "\n");
  server_->SetTokens(Tokens(dir_.Path("token2")));
  // The live stream goes on: no reconnect, its batches acked.
  uplink.Submit(Batch());
  EXPECT_TRUE(WaitFor([&] { return uplink.acked_seq() == 2; }));
  EXPECT_EQ(uplink.connects(), 1u);
  // New streams want the new token.
  EXPECT_EQ(TryHello(Plain(), port_, "node-x", Bearer(kToken)).error_code(),
            grpc::PERMISSION_DENIED);
  EXPECT_EQ(TryHello(Plain(), port_, "node-x", Bearer(kRotated), kHold).error_code(),
            grpc::DEADLINE_EXCEEDED);
  uplink.Shutdown(1000);
}

TEST_F(StreamPolicyTest, ASecondAgentWithTheSameNodeNameIsRefusedUntilTheFirstLeaves) {
  auto first = std::make_unique<uplink::GrpcUplink>(Uplink(kToken), Hello("node-a", 1));
  first->Submit(Batch());
  ASSERT_TRUE(WaitFor([&] { return first->acked_seq() == 1; }));
  // Another instance under the same name: refused, counted, and the first keeps the node.
  const grpc::Status st = TryHello(Plain(), port_, Hello("node-a", 2), Bearer(kToken));
  EXPECT_EQ(st.error_code(), grpc::ALREADY_EXISTS) << st.error_message();
  EXPECT_NE(st.error_message().find("already has a live stream from another agent"),
            std::string::npos)
      << st.error_message();
  // Nothing that would let it pass for the live agent: its instance id, its address.
  EXPECT_EQ(st.error_message().find("instance"), std::string::npos) << st.error_message();
  EXPECT_EQ(st.error_message().find("127.0.0.1"), std::string::npos) << st.error_message();
  EXPECT_EQ(Refused(state_, "duplicate"), 1);
  uplink::GrpcUplink second(Uplink(kToken), Hello("node-a", 2));
  second.Submit(Batch());
  ASSERT_TRUE(WaitFor([&] { return Refused(state_, "duplicate") >= 3; }));  // it keeps trying
  first->Submit(Batch());
  EXPECT_TRUE(WaitFor([&] { return first->acked_seq() == 2; }));
  EXPECT_EQ(first->connects(), 1u) << "the first agent was never kicked off";
  EXPECT_EQ(second.acked_seq(), 0u);
  // Once the first stream ends, the node is free and the second gets in.
  first->Shutdown(1000);
  first.reset();
  EXPECT_TRUE(WaitFor([&] { return second.acked_seq() == 1; }));
  second.Shutdown(1000);
}

// The same agent instance opening a new stream (its side of the old one broke) takes the node
// over; the old stream ends with ABORTED at its next message.
TEST_F(StreamPolicyTest, TheSameInstanceReconnectingTakesTheNodeOver) {
  auto stub =
      v1::Telemetry::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_), Plain()));
  grpc::ClientContext old_ctx;
  old_ctx.AddMetadata("authorization", "Bearer " + kToken);
  auto old_stream = stub->Stream(&old_ctx);
  v1::AgentMessage m;
  *m.mutable_hello() = Hello("node-a", 5);
  ASSERT_TRUE(old_stream->Write(m));
  v1::AggregatorMessage ack;
  ASSERT_TRUE(old_stream->Read(&ack));  // the Hello's ack: the old stream holds the node
  uplink::GrpcUplink uplink(Uplink(kToken), Hello("node-a", 5));
  uplink.Submit(Batch());
  EXPECT_TRUE(WaitFor([&] { return uplink.acked_seq() == 1; }));
  EXPECT_EQ(Refused(state_, "duplicate"), 0);
  *m.mutable_batch() = Batch();
  m.mutable_batch()->set_seq(2);
  old_stream->Write(m);
  while (old_stream->Read(&ack)) {
  }
  const grpc::Status st = old_stream->Finish();
  EXPECT_EQ(st.error_code(), grpc::ABORTED) << st.error_message();
  uplink.Submit(Batch());
  EXPECT_TRUE(WaitFor([&] { return uplink.acked_seq() == 2; }));
  uplink.Shutdown(1000);
}

// The registry itself: the same instance takes the node over from the same host only; a forger
// elsewhere who learned the instance id (it is in every Hello) is refused like any duplicate.
TEST(StreamRegistry, TheSameInstanceFromAnotherHostIsADuplicate) {
  struct Recorder : exporters::TelemetryService::Claimant {
    void Supersede() override { superseded = true; }
    exporters::TelemetryService::RequestOutcome Request(const v1::RecordingRequest& r) override {
      requests.push_back(r.id());
      return exporters::TelemetryService::RequestOutcome::kQueued;
    }
    bool superseded = false;
    std::vector<uint64_t> requests;
  };
  exporters::ClusterState state;
  exporters::TelemetryService service(state);
  Recorder live, forger, reconnect;
  ASSERT_TRUE(service.Claim("node-a", 5, "ipv4:10.0.0.7:40000", &live).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(service.Claim("node-a", 5, "ipv4:10.0.0.66:40001", &forger)));
  EXPECT_FALSE(live.superseded);
  EXPECT_EQ(Refused(state, "duplicate"), 1);
  EXPECT_TRUE(service.Claim("node-a", 5, "ipv4:10.0.0.7:40002", &reconnect).ok());
  EXPECT_TRUE(live.superseded);
  // A recording request goes to the stream that holds the node now, and to no other.
  v1::RecordingRequest req;
  req.set_id(31);
  using Outcome = exporters::TelemetryService::RequestOutcome;
  EXPECT_EQ(service.RequestRecording("node-a", req), Outcome::kQueued);
  EXPECT_EQ(service.RequestRecording("node-b", req), Outcome::kNoStream);
  EXPECT_EQ(reconnect.requests, std::vector<uint64_t>{31});
  EXPECT_TRUE(live.requests.empty());
  EXPECT_TRUE(forger.requests.empty());
  // The superseded stream's end does not free the node its successor holds.
  service.Release("node-a", &live);
  EXPECT_TRUE(absl::IsAlreadyExists(service.Claim("node-a", 6, "ipv4:10.0.0.7:40003", &forger)));
  service.Release("node-a", &reconnect);
  EXPECT_TRUE(service.Claim("node-a", 6, "ipv4:10.0.0.7:40003", &forger).ok());
}

// A Hello the aggregator refuses (here: past limits: max_nodes) is not a refused batch: the
// agent keeps its queue and tries again (the uplink drops a batch only after a stream that had
// accepted its Hello ended with INVALID_ARGUMENT or RESOURCE_EXHAUSTED).
TEST(StreamPolicy, ARefusedHelloDropsNoBatch) {
  exporters::ClusterState::Options o;
  o.max_nodes = 1;
  exporters::ClusterState state(o);
  exporters::TelemetryServer server(state);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  ASSERT_EQ(TryHello(Plain(), *port, "node-a", {}, kHold).error_code(), grpc::DEADLINE_EXCEEDED);
  uplink::GrpcUplink uplink(
      {.target = absl::StrCat("127.0.0.1:", *port), .initial_backoff_ms = 10, .max_backoff_ms = 20},
      Hello("node-b"));
  for (int i = 0; i < 3; ++i) uplink.Submit(Batch());
  ASSERT_TRUE(WaitFor([&] { return Refused(state, "node_limit") >= 6; }));
  EXPECT_EQ(uplink.refused_batches(), 0u);
  EXPECT_EQ(uplink.dropped_batches(), 0u);
  EXPECT_EQ(uplink.acked_seq(), 0u);
  uplink.Shutdown(0);
}

}  // namespace
}  // namespace fabricscope::agent
