#include "collectors/common/stream_auth.h"

#include <string>

#include "exporters/aggregator_config.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/fake_tree.h"

namespace fabricscope::exporters {

using common::ConstantTimeEqual;
using common::IsLoopbackHost;
using common::ReadTokenFile;
using common::TokenAuth;
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kToken = "0123456789abcdef0123456789abcdef";
const std::string kOther = "fedcba9876543210fedcba9876543210";

TEST(ConstantTimeEqual, EqualOnlyWhenEveryByteAndTheLengthAgree) {
  EXPECT_TRUE(ConstantTimeEqual("", ""));
  EXPECT_TRUE(ConstantTimeEqual(kToken, kToken));
  EXPECT_FALSE(ConstantTimeEqual(kToken, kOther));
  EXPECT_FALSE(ConstantTimeEqual(kToken, kToken + "x"));          // a longer guess
  EXPECT_FALSE(ConstantTimeEqual(kToken, kToken.substr(0, 31)));  // a prefix
  std::string last = kToken;
  last.back() = 'g';
  EXPECT_FALSE(ConstantTimeEqual(kToken, last));
  EXPECT_FALSE(ConstantTimeEqual(std::string("a\0b", 3), std::string("a\0c", 3)));
}

TEST(ReadTokenFile, TheFirstLineWithoutTrailingSpaceIsTheToken) {
  testing::FakeTree t;
  t.Write("token", kToken + " \r\nsecond line ignored\n");
  auto token = ReadTokenFile(t.Path("token"), "--auth-token-file");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, kToken);
}

TEST(ReadTokenFile, BadFilesAreClearErrorsThatNeverQuoteTheToken) {
  testing::FakeTree t;
  auto err = [&](const std::string& content) {
    t.Write("token", content);
    return std::string(ReadTokenFile(t.Path("token"), "--auth-token-file").status().message());
  };
  EXPECT_THAT(err(""), HasSubstr("--auth-token-file: cannot read"));
  EXPECT_THAT(err("\n"), HasSubstr("empty token"));
  EXPECT_THAT(err("short-secret"), HasSubstr("a token of 12 characters; 16 to 4096 are taken"));
  EXPECT_THAT(err("short-secret"), Not(HasSubstr("short-secret")));
  EXPECT_THAT(err("0123456789 abcdef0123"), HasSubstr("outside visible ASCII"));
  EXPECT_THAT(err("0123456789 abcdef0123"), Not(HasSubstr("abcdef")));
  EXPECT_THAT(err(std::string(4097, 'a')), HasSubstr("4097 characters"));
  EXPECT_THAT(std::string(ReadTokenFile(t.root(), "--auth-token-file").status().message()),
              HasSubstr("is not a readable regular file"));
  EXPECT_THAT(std::string(ReadTokenFile("/nonexistent/t", "x").status().message()),
              HasSubstr("x: /nonexistent/t is not a readable regular file"));
}

TEST(TokenAuth, TheSharedTokenLetsAnyNodeIn) {
  testing::FakeTree t;
  t.Write("token", kToken + "\n");
  auto auth = TokenAuth::Load(t.Path("token"), "");
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->enabled());
  EXPECT_TRUE((*auth)->Check("Bearer " + kToken, "node-a").ok());
  EXPECT_TRUE((*auth)->Check("Bearer " + kToken, "node-b").ok());
  EXPECT_TRUE(absl::IsPermissionDenied((*auth)->Check("Bearer " + kOther, "node-a")));
  EXPECT_TRUE(absl::IsUnauthenticated((*auth)->Check("", "node-a")));
  EXPECT_TRUE(absl::IsUnauthenticated((*auth)->Check("Bearer ", "node-a")));
  EXPECT_TRUE(absl::IsUnauthenticated((*auth)->Check("Basic " + kToken, "node-a")));
  const absl::Status s = (*auth)->Check("Bearer " + kOther, "node-a");
  EXPECT_THAT(std::string(s.message()), Not(HasSubstr(kOther)));
  EXPECT_THAT(std::string(s.message()), Not(HasSubstr(kToken)));
}

TEST(TokenAuth, ANodeTokenIsGoodForItsOwnNodeOnly) {
  testing::FakeTree t;
  t.Write("nodes.yaml", "node-a: " + kToken + "\nnode-b: " + kOther + "\n");
  auto auth = TokenAuth::Load("", t.Path("nodes.yaml"));
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ((*auth)->node_tokens(), 2u);
  EXPECT_TRUE((*auth)->Check("Bearer " + kToken, "node-a").ok());
  EXPECT_TRUE((*auth)->Check("Bearer " + kOther, "node-b").ok());
  // node-a's token cannot report as node-b, nor as a node the file does not name.
  EXPECT_TRUE(absl::IsPermissionDenied((*auth)->Check("Bearer " + kToken, "node-b")));
  EXPECT_TRUE(absl::IsPermissionDenied((*auth)->Check("Bearer " + kToken, "node-c")));
}

TEST(TokenAuth, BothFilesTogether) {
  testing::FakeTree t;
  t.Write("token", kOther + "\n");
  t.Write("nodes.yaml", "node-a: " + kToken + "\n");
  auto auth = TokenAuth::Load(t.Path("token"), t.Path("nodes.yaml"));
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_TRUE((*auth)->Check("Bearer " + kToken, "node-a").ok());
  EXPECT_TRUE((*auth)->Check("Bearer " + kOther, "node-a").ok());
  EXPECT_TRUE((*auth)->Check("Bearer " + kOther, "node-z").ok());
  EXPECT_TRUE(absl::IsPermissionDenied((*auth)->Check("Bearer " + kToken, "node-z")));
}

TEST(TokenAuth, BadNodeTokenFilesNameTheNodeNeverTheToken) {
  testing::FakeTree t;
  auto err = [&](const std::string& content) {
    t.Write("nodes.yaml", content);
    return std::string(TokenAuth::Load("", t.Path("nodes.yaml")).status().message());
  };
  EXPECT_THAT(err("- " + kToken + "\n"), HasSubstr("must be a map of node: token"));
  EXPECT_THAT(err("node-a: tooshort\n"), HasSubstr("node \"node-a\": a token of 8 characters"));
  EXPECT_THAT(err("node-a: tooshort\n"), Not(HasSubstr("tooshort")));
  EXPECT_THAT(err("node-a: [" + kToken + "]\n"), HasSubstr("node \"node-a\" needs one token"));
  EXPECT_THAT(err("node-a: {" + kToken + "\n"), HasSubstr("not valid YAML"));
  EXPECT_THAT(err("node-a: {" + kToken + "\n"), Not(HasSubstr(kToken)));
  // yaml-cpp keeps both entries of a node given twice; the last token would win silently.
  EXPECT_THAT(err("node-a: " + kToken + "\nnode-a: " + kOther + "\n"),
              HasSubstr("node-a: given twice"));
  EXPECT_THAT(err("node-a: " + kToken + "\nnode-a: " + kOther + "\n"), Not(HasSubstr(kOther)));
  EXPECT_THAT(err("node-a: " + kToken + "\n---\nnode-b: " + kOther + "\n"),
              HasSubstr("2 YAML documents"));
  EXPECT_FALSE((*TokenAuth::Load("", ""))->enabled());
}

TEST(IsLoopbackHost, OnlyTheLoopbackRangeAndNames) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "::1", "localhost"}) {
    EXPECT_TRUE(IsLoopbackHost(h)) << h;
  }
  for (const char* h : {"0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "aggregator", "", "1.127.0.0"}) {
    EXPECT_FALSE(IsLoopbackHost(h)) << h;
  }
}

// Secure by default: agents in plain text without a token only on loopback.
TEST(CheckAggregatorSecurity, PlainTextWithoutATokenOnlyOnLoopbackOrWhenAllowed) {
  testing::FakeTree t;
  t.Write("token", kToken + "\n");
  t.Write("nodes.yaml", "node-a: " + kToken + "\n");
  t.Write("nobody.yaml", "{}\n");
  t.Write("a.pem", "x");
  AggregatorOptions o;  // 0.0.0.0:9471, no TLS, no token
  const absl::Status refused = CheckAggregatorSecurity(o);
  EXPECT_TRUE(absl::IsInvalidArgument(refused));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("openssl rand -hex 32"));
  EXPECT_THAT(std::string(refused.message()), HasSubstr("--allow-insecure"));
  o.grpc_listen = "[::1]:9471";
  EXPECT_TRUE(CheckAggregatorSecurity(o).ok());
  o.grpc_listen = "127.0.0.1:0";
  EXPECT_TRUE(CheckAggregatorSecurity(o).ok());
  o.grpc_listen = "10.1.2.3:9471";
  EXPECT_FALSE(CheckAggregatorSecurity(o).ok());
  o.allow_insecure = true;
  EXPECT_TRUE(CheckAggregatorSecurity(o).ok());
  o.allow_insecure = false;
  o.auth_token_file = t.Path("token");
  EXPECT_TRUE(CheckAggregatorSecurity(o).ok());
  o.auth_token_file.clear();
  o.node_tokens_file = t.Path("nodes.yaml");
  EXPECT_TRUE(CheckAggregatorSecurity(o).ok());
  // A node tokens file that names nobody asks no token: still refused.
  o.node_tokens_file = t.Path("nobody.yaml");
  EXPECT_FALSE(CheckAggregatorSecurity(o).ok());
  o.node_tokens_file.clear();
  o.tls.cert = t.Path("a.pem");
  o.tls.key = t.Path("a.pem");
  EXPECT_TRUE(CheckAggregatorSecurity(o).ok());
  o.auth_token_file = "/nonexistent/token";
  EXPECT_THAT(std::string(CheckAggregatorSecurity(o).message()),
              HasSubstr("/nonexistent/token is not a readable regular file"));
}

TEST(AggregatorConfig, AuthAndAllowInsecureKeys) {
  testing::FakeTree t;
  t.Write("token", kToken + "\n");
  t.Write("nodes.yaml", "node-a: " + kOther + "\n");
  t.Write("aggregator.yaml", "auth:\n  token_file: " + t.Path("token") + "\n  node_tokens_file: " +
                                 t.Path("nodes.yaml") + "\nallow_insecure: true\n");
  AggregatorOptions o;
  ASSERT_TRUE(LoadAggregatorConfig(t.Path("aggregator.yaml"), &o).ok());
  EXPECT_EQ(o.auth_token_file, t.Path("token"));
  EXPECT_EQ(o.node_tokens_file, t.Path("nodes.yaml"));
  EXPECT_TRUE(o.allow_insecure);
  t.Write("aggregator.yaml", "auth:\n  token: " + kToken + "\n");
  EXPECT_THAT(std::string(LoadAggregatorConfig(t.Path("aggregator.yaml"), &o).message()),
              HasSubstr("auth.token: unknown key"));
  // The file names a token file that only a flag-given credential would replace: its
  // readability is checked once the flags apply (CheckAggregatorSecurity), not here.
  t.Write("aggregator.yaml", "auth:\n  token_file: /nonexistent/token\n");
  EXPECT_TRUE(LoadAggregatorConfig(t.Path("aggregator.yaml"), &o).ok());
}

}  // namespace
}  // namespace fabricscope::exporters
