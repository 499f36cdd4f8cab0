// The daemons' command lines: --help, bad flags and bad environments give a clear message and
// exit status 2 (usage) or 1 (environment; also --help and unknown flags, Abseil's flag parser),
// never a crash.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <regex>

#include "tests/common/fake_tree.h"
#include "tests/common/subprocess.h"

namespace fabricscope::testing {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

struct Result {
  int status;
  std::string output;
};

Result RunCommand(std::vector<std::string> argv) {
  Subprocess p(std::move(argv));
  if (!p.Start()) return {-1, "spawn failed"};
  // Read until EOF (or 5 s): a pattern no line matches ("$^" matches an empty line).
  p.WaitForLine(std::regex("[^\\s\\S]"), 5s);
  const int status = p.Wait();
  return {status, p.Output()};
}

TEST(AgentCli, HelpDocumentsEveryOption) {
  Result r = RunCommand({FABRICSCOPE_AGENT_BIN, "--help"});
  for (const char* flag : {"sysfs_root",
                           "sample_period",
                           "aggregator",
                           "tls_ca",
                           "tls_cert",
                           "tls_key",
                           "tls_server_name",
                           "auth_token_file",
                           "http_listen",
                           "web_config",
                           "interfaces",
                           "line_rate",
                           "burst_enter",
                           "burst_exit",
                           "window",
                           "config",
                           "slow_sample_period",
                           "hw_lifespan",
                           "tcp",
                           "ethtool",
                           "pma",
                           "pma_ca",
                           "pma_port",
                           "pma_period",
                           "max_queued_batches",
                           "flight_recorder_seconds",
                           "series_bucket",
                           "collective_rails",
                           "collective_step_marker",
                           "gpu_socket",
                           "gpu_socket_group",
                           "status"}) {
    std::string dashed = flag;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    EXPECT_THAT(r.output, HasSubstr("  --" + dashed + "=")) << flag;
  }
  EXPECT_THAT(r.output, HasSubstr("standalone"));
  // Each option says its default and range (from the option table, agent/options.inc).
  EXPECT_THAT(r.output, HasSubstr("Default: 1ms. Accepts: 10us..1s. Config file: sample_period."));
  // The exit statuses the help text (and README) state.
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("Exit status: 0 stopped by SIGTERM or SIGINT, or --help; 2 a "
                                  "bad flag"));
}

TEST(AgentCli, BadValuesAreUsageErrors) {
  FakeTree t;
  t.Write("empty.yaml", "");
  const std::string cfg = "--config=" + t.Path("empty.yaml");
  Result r = RunCommand({FABRICSCOPE_AGENT_BIN, cfg, "--sample-period=fast"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("--sample-period: \"fast\" is not a duration"));
  r = RunCommand({FABRICSCOPE_AGENT_BIN, cfg, "--sample-period=1us"});
  EXPECT_EQ(r.status, 2);
  r = RunCommand({FABRICSCOPE_AGENT_BIN, cfg, "--line-rate=eth0"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("NAME=RATE"));
  r = RunCommand({FABRICSCOPE_AGENT_BIN, cfg, "--burst-enter=0.5", "--burst-exit=0.8"});
  EXPECT_EQ(r.status, 2);
  r = RunCommand({FABRICSCOPE_AGENT_BIN, "--config=" + t.Path("missing.yaml")});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("does not exist"));
  // A directory: a clear error (it aborted with an uncaught std::ios_base::failure, exit 134).
  r = RunCommand({FABRICSCOPE_AGENT_BIN, "--config=" + t.root()});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("is not a regular file"));
  r = RunCommand({FABRICSCOPE_AGENT_BIN, cfg, "--aggregator=nohostport"});
  EXPECT_EQ(r.status, 2);
  t.Write("web.yml", "basic_auth_users:\n  alice: not-a-hash\n");
  r = RunCommand({FABRICSCOPE_AGENT_BIN, cfg, "--web-config=" + t.Path("web.yml")});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("basic_auth_users.alice: not a bcrypt hash"));
  r = RunCommand({FABRICSCOPE_AGGREGATOR_BIN, cfg, "--grpc-listen=127.0.0.1:0",
                  "--web-config=" + t.Path("web.yml")});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("basic_auth_users.alice: not a bcrypt hash"));
  r = RunCommand({FABRICSCOPE_AGENT_BIN, cfg, "--no-such-flag"});
  EXPECT_EQ(r.status, 1);  // Abseil's flag parser, before our checks
  EXPECT_THAT(r.output, HasSubstr("no_such_flag"));
  r = RunCommand({FABRICSCOPE_AGENT_BIN, cfg, "stray"});
  EXPECT_EQ(r.status, 2);
}

TEST(AgentCli, EnvironmentErrorsExitOne) {
  FakeTree t;
  t.Write("empty.yaml", "");
  const std::string cfg = "--config=" + t.Path("empty.yaml");
  Result r = RunCommand({FABRICSCOPE_AGENT_BIN, cfg, "--sysfs-root=/nonexistent/fabricscope"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/fabricscope"));
  t.CopyTestdata("sysfs-real/class", "class");
  r = RunCommand({FABRICSCOPE_AGENT_BIN, cfg, "--sysfs-root=" + t.root(), "--interfaces=ib9"});
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.output, HasSubstr("no port matches \"ib9\""));
}

TEST(AggregatorCli, HelpAndBadAddress) {
  Result r = RunCommand({FABRICSCOPE_AGGREGATOR_BIN, "--help"});
  for (const char* flag :
       {"grpc_listen", "http_listen", "tls_cert", "tls_key", "tls_client_ca", "auth_token_file",
        "node_tokens_file", "allow_insecure", "web_config", "config", "node_expiry"}) {
    std::string dashed = flag;
    std::replace(dashed.begin(), dashed.end(), '_', '-');
    EXPECT_THAT(r.output, HasSubstr("  --" + dashed)) << flag;
  }
  EXPECT_THAT(r.output, HasSubstr("limits.max_nodes: N"));  // config-file only
  EXPECT_EQ(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("Exit status: 0 stopped by SIGTERM or SIGINT, or --help; 2 a "
                                  "bad flag value, a stray argument"));
  r = RunCommand({FABRICSCOPE_AGGREGATOR_BIN, "--no-such-flag"});
  EXPECT_EQ(r.status, 1);
  r = RunCommand({FABRICSCOPE_AGGREGATOR_BIN, "--http-listen=nonsense"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("nonsense"));
  FakeTree t;
  r = RunCommand({FABRICSCOPE_AGGREGATOR_BIN, "--config=" + t.root()});  // a directory
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("is not a regular file"));
  // A stray positional argument (a config path without --config=) is an error, not ignored.
  r = RunCommand({FABRICSCOPE_AGGREGATOR_BIN, "aggregator.yaml"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("unexpected argument \"aggregator.yaml\""));
}

// Secure by default: a non-loopback gRPC address without TLS or a token is refused with the way
// out in the message; a token file or --allow-insecure lets it start.
TEST(AggregatorCli, PlainTextWithoutATokenIsRefusedBeyondLoopback) {
  FakeTree t;
  t.Write("empty.yaml", "");
  const std::string cfg = "--config=" + t.Path("empty.yaml");
  Result r = RunCommand(
      {FABRICSCOPE_AGGREGATOR_BIN, cfg, "--grpc-listen=0.0.0.0:0", "--http-listen=127.0.0.1:0"});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("is not a loopback address"));
  EXPECT_THAT(r.output, HasSubstr("openssl rand -hex 32"));
  t.Write("token", "short\n");
  r = RunCommand({FABRICSCOPE_AGGREGATOR_BIN, cfg, "--grpc-listen=0.0.0.0:0",
                  "--http-listen=127.0.0.1:0", "--auth-token-file=" + t.Path("token")});
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("a token of 5 characters"));
  // The wildcard address is bound only inside a network namespace of the test's own.
  if (geteuid() != 0) GTEST_SKIP() << "unshare --net needs root";
  t.Write("token", "0123456789abcdef0123456789abcdef\n");
  for (const std::string& way :
       {"--auth-token-file=" + t.Path("token"), std::string("--allow-insecure")}) {
    Subprocess p({"/usr/bin/unshare", "--net", FABRICSCOPE_AGGREGATOR_BIN, cfg,
                  "--grpc-listen=0.0.0.0:0", "--http-listen=127.0.0.1:0", way});
    ASSERT_TRUE(p.Start());
    EXPECT_TRUE(p.WaitForLine(std::regex("listening grpc=0\\.0\\.0\\.0:[0-9]+"), 10s))
        << way << ": " << p.Output();
  }
}

}  // namespace
}  // namespace fabricscope::testing
