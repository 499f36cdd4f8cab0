// TLS and mTLS on the uplink, over real gRPC connections on loopback, with certificates that
// openssl makes in the test: a good agent connects; no client certificate, one from another
// CA, plain text, and a node name that is not the certificate's are refused.
#include "collectors/common/tls.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "collectors/uplink/uplink.h"
#include "exporters/ingest/telemetry_service.h"
#include "exporters/state/cluster_state.h"
#include "tests/agent/stream_test_util.h"
#include "tests/common/fake_tree.h"
#include "tests/common/test_pki.h"
#include "tests/common/wait.h"

namespace fabricscope::agent {
namespace {

using common::ClientTls;
using common::ServerTls;
using testing::Batch;
using testing::FakeTree;
using testing::Hello;
using testing::TryHello;
using testing::WaitFor;

// A CA ("ca"), a second one ("other"), the aggregator's certificate (DNS:aggregator.test), a
// renewal of it (server2), and node-a's client certificate from each CA and an expired one.
class Pki : public testing::TestPki {
 public:
  Pki() {
    ok_ = Ca("ca") && Ca("other") && Leaf("server", "ca", "aggregator.test") &&
          Leaf("node-a", "ca", "node-a") && Leaf("node-a-other", "other", "node-a") &&
          Leaf("node-a-expired", "ca", "node-a", -1) && Leaf("server2", "ca", "aggregator.test");
  }
  bool ok() const { return ok_; }

 private:
  bool ok_ = false;
};

double Refused(const exporters::ClusterState& s) { return testing::Refused(s, "identity"); }

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v openssl >/dev/null") != 0) GTEST_SKIP() << "no openssl";
    ASSERT_TRUE(pki_.ok()) << "openssl could not make the test certificates";
  }
  ClientTls Client(const std::string& cert) const {
    ClientTls t{.ca = pki_.Pem("ca"), .server_name = "aggregator.test"};
    if (!cert.empty()) {
      t.cert = pki_.Pem(cert);
      t.key = pki_.Key(cert);
    }
    return t;
  }
  ServerTls Server(bool mutual) const {
    return {.cert = pki_.Pem("server"),
            .key = pki_.Key("server"),
            .client_ca = mutual ? pki_.Pem("ca") : ""};
  }
  Pki pki_;
};

TEST_F(TlsTest, AnAgentStreamsOverTlsAndOverMutualTls) {
  for (bool mutual : {false, true}) {
    exporters::ClusterState state;
    exporters::TelemetryServer server(state, exporters::TelemetryServer::kDefaultMaxMessageBytes,
                                      Server(mutual));
    auto port = server.Start("127.0.0.1:0");
    ASSERT_TRUE(port.ok()) << port.status();
    uplink::GrpcUplink uplink({.target = absl::StrCat("127.0.0.1:", *port),
                               .initial_backoff_ms = 20,
                               .max_backoff_ms = 50,
                               .tls = Client(mutual ? "node-a" : "")},
                              Hello("node-a"));
    uplink.Submit(Batch());
    uplink.Submit(Batch());
    EXPECT_TRUE(WaitFor([&] { return uplink.acked_seq() == 2; })) << "mutual " << mutual;
    uplink.Shutdown(1000);
    EXPECT_EQ(Refused(state), 0);
  }
}

TEST_F(TlsTest, MutualTlsRefusesWhoeverIsNotTheNode) {
  exporters::ClusterState state;
  exporters::TelemetryServer server(state, exporters::TelemetryServer::kDefaultMaxMessageBytes,
                                    Server(true));
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  auto creds = [&](const std::string& cert, const std::string& ca) {
    ClientTls t = Client(cert);
    t.ca = pki_.Pem(ca);
    return common::ChannelCredentialsFor(t);
  };
  // The handshake fails: no client certificate, one another CA signed, an expired one, or
  // plain text.
  EXPECT_EQ(TryHello(creds("", "ca"), *port, "node-a").error_code(), grpc::UNAVAILABLE);
  EXPECT_EQ(TryHello(creds("node-a-expired", "ca"), *port, "node-a").error_code(),
            grpc::UNAVAILABLE);
  EXPECT_EQ(TryHello(creds("node-a-other", "ca"), *port, "node-a").error_code(), grpc::UNAVAILABLE);
  EXPECT_EQ(TryHello(grpc::InsecureChannelCredentials(), *port, "node-a").error_code(),
            grpc::UNAVAILABLE);
  // node-a's certificate, but a Hello for node-b: PERMISSION_DENIED, counted.
  const grpc::Status st = TryHello(creds("node-a", "ca"), *port, "node-b");
  EXPECT_EQ(st.error_code(), grpc::PERMISSION_DENIED) << st.error_message();
  EXPECT_NE(st.error_message().find("node \"node-b\" is not the identity of the client "
                                    "certificate (node-a)"),
            std::string::npos)
      << st.error_message();
  EXPECT_EQ(Refused(state), 1);
  EXPECT_EQ(state.node_count(), 0u);
  // And the real node still gets in.
  EXPECT_EQ(TryHello(creds("node-a", "ca"), *port, "node-a").error_code(), grpc::DEADLINE_EXCEEDED);
  EXPECT_EQ(state.node_count(), 1u);
}

// The PEM certificate the aggregator on `port` presents to a new handshake ("" when none).
std::string ServedCertificate(const ClientTls& tls, int port) {
  grpc::ChannelArguments args;
  args.SetSslTargetNameOverride("aggregator.test");
  auto stub = v1::Telemetry::NewStub(grpc::CreateCustomChannel(
      absl::StrCat("127.0.0.1:", port), common::ChannelCredentialsFor(tls), args));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  auto stream = stub->Stream(&ctx);
  v1::AgentMessage m;
  *m.mutable_hello() = Hello("probe");
  v1::AggregatorMessage ack;
  std::string pem;
  if (stream->Write(m) && stream->Read(&ack)) {
    for (const grpc::string_ref& v : ctx.auth_context()->FindPropertyValues("x509_pem_cert")) {
      pem.assign(v.data(), v.size());
    }
  }
  ctx.TryCancel();
  stream->Finish();
  return pem;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Certificate rotation mid-stream: the aggregator's files are replaced; new handshakes get the
// new certificate once gRPC re-reads them (refresh_seconds), and the live stream goes on.
TEST_F(TlsTest, ARenewedCertificateIsServedWithoutDroppingTheLiveStream) {
  FakeTree files;
  std::filesystem::copy_file(pki_.Pem("server"), files.Path("aggregator.pem"));
  std::filesystem::copy_file(pki_.Key("server"), files.Path("aggregator.key"));
  ServerTls t{.cert = files.Path("aggregator.pem"), .key = files.Path("aggregator.key")};
  t.refresh_seconds = 1;
  exporters::ClusterState state;
  exporters::TelemetryServer server(state, exporters::TelemetryServer::kDefaultMaxMessageBytes, t);
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  uplink::GrpcUplink uplink({.target = absl::StrCat("127.0.0.1:", *port),
                             .initial_backoff_ms = 20,
                             .max_backoff_ms = 50,
                             .tls = Client("")},
                            Hello("node-a"));
  uplink.Submit(Batch());
  ASSERT_TRUE(WaitFor([&] { return uplink.acked_seq() == 1; }));
  const std::string old_pem = ReadAll(pki_.Pem("server"));
  const std::string new_pem = ReadAll(pki_.Pem("server2"));
  ASSERT_NE(old_pem, new_pem);
  EXPECT_EQ(ServedCertificate(Client(""), *port), old_pem);
  // Renewed as cert-manager or certbot do: each file replaced whole (rename), key first.
  std::filesystem::copy_file(pki_.Key("server2"), files.Path("next.key"));
  std::filesystem::rename(files.Path("next.key"), files.Path("aggregator.key"));
  std::filesystem::copy_file(pki_.Pem("server2"), files.Path("next.pem"));
  std::filesystem::rename(files.Path("next.pem"), files.Path("aggregator.pem"));
  EXPECT_TRUE(WaitFor([&] { return ServedCertificate(Client(""), *port) == new_pem; }));
  uplink.Submit(Batch());
  EXPECT_TRUE(WaitFor([&] { return uplink.acked_seq() == 2; }));
  EXPECT_EQ(uplink.connects(), 1u) << "the live stream was dropped";
  uplink.Shutdown(1000);
}

TEST_F(TlsTest, AgentToAPlainTextAggregatorNeverConnects) {
  exporters::ClusterState state;
  exporters::TelemetryServer server(state);  // plain text
  auto port = server.Start("127.0.0.1:0");
  ASSERT_TRUE(port.ok()) << port.status();
  EXPECT_EQ(TryHello(common::ChannelCredentialsFor(Client("")), *port, "node-a").error_code(),
            grpc::UNAVAILABLE);
  EXPECT_EQ(state.node_count(), 0u);
}

TEST(TlsOptions, MissingFilesAndHalfPairsAreClearErrors) {
  EXPECT_TRUE(common::CheckClientTls({}).ok());
  absl::Status s = common::CheckClientTls({.ca = "/nonexistent/ca.pem"});
  EXPECT_NE(s.message().find("--tls-ca: cannot read /nonexistent/ca.pem"), std::string::npos) << s;
  s = common::CheckClientTls({.cert = "/etc/hostname"});
  EXPECT_NE(s.message().find("need --tls-ca"), std::string::npos) << s;
  s = common::CheckServerTls({.cert = "/etc/hostname"});
  EXPECT_NE(s.message().find("cert and key go together"), std::string::npos) << s;
  s = common::CheckServerTls({.client_ca = "/etc/hostname"});
  EXPECT_NE(s.message().find("--tls-client-ca needs --tls-cert"), std::string::npos) << s;
}

}  // namespace
}  // namespace fabricscope::agent
