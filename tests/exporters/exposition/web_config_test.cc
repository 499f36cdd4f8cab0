// The web config (collectors/common/web_config.h): the file's checks, and the HTTP server behind
// it over real HTTPS on loopback (certificates made by openssl, bcrypt hashes made by libxcrypt):
// good and bad passwords, /healthz open, plain HTTP to the TLS port, mTLS.
#include "collectors/common/web_config.h"

#include <crypt.h>
#include <httplib.h>

#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "exporters/exposition/http_server.h"
#include "exporters/state/cluster_state.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/fake_tree.h"
#include "tests/common/test_pki.h"

namespace fabricscope::exporters {

using common::BasicAuth;
using common::LoadWebConfig;
using common::WebConfig;
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// A bcrypt hash of `password` at cost 4 (the least bcrypt takes: quick in a test).
std::string Bcrypt(const std::string& password) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  if (crypt_gensalt_rn("$2b$", 4, nullptr, 0, salt, sizeof(salt)) == nullptr) return "";
  crypt_data data{};
  const char* out = crypt_r(password.c_str(), salt, &data);
  return out == nullptr ? "" : out;
}

std::string LoadError(const testing::FakeTree& t, const std::string& text) {
  t.Write("web.yml", text);
  return std::string(LoadWebConfig(t.Path("web.yml")).status().message());
}

TEST(WebConfig, RelativePathsAreTheFilesDirectorys) {
  testing::FakeTree t;
  t.Write("tls/server.pem", "x");
  t.Write("tls/server.key", "x");
  t.Write("web.yml", "tls_server_config:\n  cert_file: tls/server.pem\n  key_file: " +
                         t.Path("tls/server.key") +
                         "\nbasic_auth_users:\n  alice: " + Bcrypt("secret") + "\n");
  auto c = LoadWebConfig(t.Path("web.yml"));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->cert_file, t.Path("tls/server.pem"));
  EXPECT_EQ(c->key_file, t.Path("tls/server.key"));
  EXPECT_TRUE(c->tls());
  EXPECT_EQ(c->users.size(), 1u);
  t.Write("empty.yml", "");
  EXPECT_FALSE(LoadWebConfig(t.Path("empty.yml"))->tls());
}

TEST(WebConfig, WhatItCannotHonourIsRefusedByName) {
  testing::FakeTree t;
  t.Write("s.pem", "x");
  EXPECT_THAT(LoadError(t, "http_server_config:\n  http2: true\n"),
              HasSubstr("http_server_config: not supported by fabricscope"));
  EXPECT_THAT(LoadError(t, "tls_server_config:\n  cert_file: s.pem\n  min_version: TLS13\n"),
              HasSubstr("tls_server_config.min_version: not supported"));
  EXPECT_THAT(LoadError(t, "tls_server_config:\n  cert_file: s.pem\n"),
              HasSubstr("cert_file and key_file go together"));
  EXPECT_THAT(LoadError(t, "tls_server_config:\n  cert_file: missing.pem\n  key_file: s.pem\n"),
              HasSubstr("tls_server_config.cert_file: cannot read " + t.Path("missing.pem")));
  EXPECT_THAT(LoadError(t,
                        "tls_server_config:\n  cert_file: s.pem\n  key_file: s.pem\n"
                        "  client_ca_file: s.pem\n"),
              HasSubstr("RequireAndVerifyClientCert and client_ca_file go together"));
  EXPECT_THAT(LoadError(t,
                        "tls_server_config:\n  cert_file: s.pem\n  key_file: s.pem\n"
                        "  client_auth_type: VerifyClientCertIfGiven\n"),
              HasSubstr("VerifyClientCertIfGiven is not supported"));
  EXPECT_THAT(LoadError(t, "basic_auth_users:\n  alice: plaintext-password\n"),
              HasSubstr("basic_auth_users.alice: not a bcrypt hash"));
  EXPECT_THAT(LoadError(t, "basic_auth_users:\n  alice: plaintext-password\n"),
              Not(HasSubstr("plaintext-password")));
  EXPECT_THAT(LoadError(t, "basic_auth_users: [\n"), HasSubstr("not valid YAML"));
  // A user given twice: one of the two hashes would win silently.
  const std::string hash = Bcrypt("x");
  EXPECT_THAT(LoadError(t, "basic_auth_users:\n  alice: " + hash + "\n  alice: " + hash + "\n"),
              HasSubstr("basic_auth_users.alice: given twice"));
  EXPECT_THAT(LoadError(t, "basic_auth_users:\n  alice: " + hash + "\n  alice: " + hash + "\n"),
              Not(HasSubstr(hash)));
  EXPECT_THAT(std::string(LoadWebConfig(t.root()).status().message()),
              HasSubstr("not a readable regular file"));
}

TEST(BasicAuth, OnlyTheRightUserAndPassword) {
  BasicAuth auth({{"alice", Bcrypt("s3cret:with colon")}, {"bob", Bcrypt("hunter2")}});
  auto header = [](const std::string& user_password) {
    return "Basic " + absl::Base64Escape(user_password);
  };
  EXPECT_TRUE(auth.Allow(header("alice:s3cret:with colon")));
  EXPECT_TRUE(auth.Allow(header("alice:s3cret:with colon")));  // the remembered pass
  EXPECT_TRUE(auth.Allow(header("bob:hunter2")));
  EXPECT_FALSE(auth.Allow(header("alice:hunter2")));  // bob's password is not alice's
  EXPECT_FALSE(auth.Allow(header("bob:s3cret:with colon")));
  EXPECT_FALSE(auth.Allow(header("carol:hunter2")));
  EXPECT_FALSE(auth.Allow(header("alice")));
  EXPECT_FALSE(auth.Allow(header("alice:")));
  EXPECT_FALSE(auth.Allow("Bearer abc"));
  EXPECT_FALSE(auth.Allow("Basic !!!not-base64"));
  EXPECT_FALSE(auth.Allow(""));
}

// The server's certificate (DNS:localhost), a client certificate, and another CA's.
class WebServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("command -v openssl >/dev/null") != 0) GTEST_SKIP() << "no openssl";
    ASSERT_TRUE(pki_.Ca("ca") && pki_.Ca("other") && pki_.Leaf("server", "ca", "localhost") &&
                pki_.Leaf("client", "ca", "scraper") && pki_.Leaf("stranger", "other", "scraper"));
  }
  // An HttpServer with `config` on 127.0.0.1; returns its port (0 on failure).
  int Serve(WebConfig config) {
    server_ = std::make_unique<HttpServer>(std::vector<const prometheus::Collectable*>{}, &state_);
    server_->SetWebConfig(std::move(config));
    auto port = server_->Start("127.0.0.1:0");
    EXPECT_TRUE(port.ok()) << port.status();
    return port.ok() ? *port : 0;
  }
  std::unique_ptr<httplib::SSLClient> Client(int port, const std::string& cert = "") {
    auto c = cert.empty() ? std::make_unique<httplib::SSLClient>("localhost", port)
                          : std::make_unique<httplib::SSLClient>("localhost", port, pki_.Pem(cert),
                                                                 pki_.Key(cert));
    c->set_ca_cert_path(pki_.Pem("ca").c_str());
    c->enable_server_certificate_verification(true);
    c->set_connection_timeout(5);
    return c;
  }

  testing::TestPki pki_;
  ClusterState state_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(WebServerTest, HttpsWithBasicAuthLetsInOnlyTheUserAndKeepsHealthzOpen) {
  const int port = Serve({.cert_file = pki_.Pem("server"),
                          .key_file = pki_.Key("server"),
                          .users = {{"prometheus", Bcrypt("scrape-me")}}});
  ASSERT_NE(port, 0);
  auto c = Client(port);
  auto r = c->Get("/metrics");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Basic realm=\"fabricscope\"");
  c->set_basic_auth("prometheus", "wrong");
  EXPECT_EQ(c->Get("/metrics")->status, 401);
  EXPECT_EQ(c->Get("/api/diagnosis")->status, 401);
  c->set_basic_auth("prometheus", "scrape-me");
  r = c->Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_THAT(r->body, HasSubstr("fabricscope_aggregator_nodes"));
  auto probe = Client(port);  // no credentials
  r = probe->Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  // Plain HTTP to the TLS port gets no page.
  httplib::Client plain("127.0.0.1", port);
  plain.set_connection_timeout(2);
  plain.set_read_timeout(2);
  auto p = plain.Get("/healthz");
  EXPECT_TRUE(!p || p->status != 200);
}

TEST_F(WebServerTest, MutualTlsWantsAClientCertificateTheCaSigned) {
  const int port = Serve({.cert_file = pki_.Pem("server"),
                          .key_file = pki_.Key("server"),
                          .client_ca_file = pki_.Pem("ca")});
  ASSERT_NE(port, 0);
  auto r = Client(port, "client")->Get("/metrics");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 200);
  EXPECT_FALSE(Client(port)->Get("/metrics"));              // no certificate
  EXPECT_FALSE(Client(port, "stranger")->Get("/metrics"));  // another CA's
}

TEST_F(WebServerTest, ACertificateThatDoesNotLoadIsAClearError) {
  HttpServer s({}, &state_);
  s.SetWebConfig({.cert_file = pki_.Pem("server"), .key_file = pki_.Key("client")});
  auto port = s.Start("127.0.0.1:0");
  ASSERT_FALSE(port.ok());
  EXPECT_THAT(std::string(port.status().message()), HasSubstr("cannot load the TLS certificate"));
}

}  // namespace
}  // namespace fabricscope::exporters
