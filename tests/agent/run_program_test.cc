// RunForOutput (agent/run_program.h) with real processes: output, the child's signal mask, and
// each way it fails (not found, non-zero exit, no answer, too much output, nothing to run).
#include "agent/run_program.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>

#include <string>

namespace fabricscope::agent {
namespace {

TEST(RunForOutput, ReturnsStdoutOfARealProcess) {
  auto out = RunForOutput({"sh", "-c", "printf 'a\\nb'; echo oops >&2"}, 5'000'000'000, 1024);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "a\nb");
}

// The agent's threads block SIGINT, SIGTERM and SIGHUP; the tool must not inherit that mask
// (it would ignore a stop), nor the standard descriptors' absence.
TEST(RunForOutput, TheChildStartsWithNoSignalBlocked) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  sigaddset(&block, SIGHUP);
  ASSERT_EQ(pthread_sigmask(SIG_BLOCK, &block, &old), 0);
  auto out = RunForOutput({"sh", "-c", "grep SigBlk /proc/self/status"}, 5'000'000'000, 1024);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "SigBlk:\t0000000000000000\n");
}

TEST(RunForOutput, FailuresSayWhatFailed) {
  auto missing = RunForOutput({"/nonexistent/rdma"}, 5'000'000'000, 1024);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(missing.status().message().find("/nonexistent/rdma"), std::string::npos);
  auto failing = RunForOutput({"sh", "-c", "exit 3"}, 5'000'000'000, 1024);
  EXPECT_EQ(failing.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(failing.status().message().find("exit status 3"), std::string::npos);
  // A child that never answers is killed at the deadline (its stdout stays open).
  auto hung = RunForOutput({"sh", "-c", "exec tail -f /dev/null"}, 200'000'000, 1024);
  EXPECT_EQ(hung.status().code(), absl::StatusCode::kDeadlineExceeded);
  auto flood = RunForOutput({"yes"}, 5'000'000'000, 1 << 20);
  EXPECT_EQ(flood.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(RunForOutput({}, 1, 1).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace fabricscope::agent
