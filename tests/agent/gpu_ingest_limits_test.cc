// The GPU socket at its connection limit: connections that never sent a datagram make room for
// new producers; producers that did are never closed for it.

#include <sys/socket.h>
#include <unistd.h>

#include "agent/gpu_ingest.h"
#include "collectors/gpu/wire.h"
#include "gtest/gtest.h"
#include "tests/agent/gpu_ingest_util.h"
#include "tests/common/fake_tree.h"
#include "tests/common/wait.h"

namespace fabricscope::agent {
namespace {

namespace gpu = collectors::gpu;
using fabricscope::testing::WaitFor;

// A datagram with no records (only the producer's dropped count), as a producer sends it.
bool SendEmpty(int fd, uint64_t seq) {
  alignas(8) unsigned char buf[256];
  gpu::DatagramWriter w(buf, sizeof(buf), gpu::Source::kNcclProfiler, getpid());
  const size_t n = w.Finish(seq, 0, 1);
  return send(fd, buf, n, MSG_NOSIGNAL) == static_cast<ssize_t>(n);
}

// Whether the agent closed its end of `fd` (end of stream), waiting for it.
bool ClosedByAgent(int fd) {
  return WaitFor([fd] {
    char byte;
    return recv(fd, &byte, 1, MSG_DONTWAIT) == 0;
  });
}

TEST(GpuIngestLimits, SilentConnectionsMakeRoomForProducersAtTheLimit) {
  fabricscope::testing::FakeTree dir;
  GpuIngestOptions o;
  o.socket_path = dir.Path("gpu.sock");
  o.max_connections = 2;
  o.silent_evict_after = absl::ZeroDuration();  // the test does not wait out the 10 s
  GpuIngest ingest(o);
  ASSERT_TRUE(ingest.Start().ok());
  const int producer = Connect(o.socket_path);
  ASSERT_TRUE(SendEmpty(producer, 1));
  ASSERT_TRUE(WaitFor([&] { return StatsOf(ingest).datagrams_total() == 1; }));
  const int squatter = Connect(o.socket_path);  // connects, never sends
  ASSERT_TRUE(WaitFor([&] { return StatsOf(ingest).connections() == 2; }));

  // At the limit: the squatter goes, the newcomer stays; the producer is untouched.
  const int newcomer = Connect(o.socket_path);
  EXPECT_TRUE(ClosedByAgent(squatter));
  ASSERT_TRUE(WaitFor(
      [&] { return MapValue(StatsOf(ingest).rejected_connections_total(), "silent") == 1; }));
  EXPECT_EQ(MapValue(StatsOf(ingest).rejected_connections_total(), "limit"), 0u);
  EXPECT_EQ(StatsOf(ingest).connections(), 2u);
  ASSERT_TRUE(SendEmpty(newcomer, 1));
  ASSERT_TRUE(WaitFor([&] { return StatsOf(ingest).datagrams_total() == 2; }));

  // Both have sent now: a further connection is refused, neither producer closed.
  const int late = Connect(o.socket_path);
  EXPECT_TRUE(ClosedByAgent(late));
  ASSERT_TRUE(WaitFor(
      [&] { return MapValue(StatsOf(ingest).rejected_connections_total(), "limit") == 1; }));
  ASSERT_TRUE(SendEmpty(producer, 2));
  ASSERT_TRUE(SendEmpty(newcomer, 2));
  EXPECT_TRUE(WaitFor([&] { return StatsOf(ingest).datagrams_total() == 4; }));
  EXPECT_EQ(StatsOf(ingest).connections(), 2u);
  for (int fd : {producer, squatter, newcomer, late}) close(fd);
}

}  // namespace
}  // namespace fabricscope::agent
