#include "collectors/gpu/producer.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/common/fake_tree.h"
#include "tests/common/wait.h"

namespace fabricscope::collectors::gpu {
namespace {

using ::fabricscope::testing::WaitFor;

// A temporary directory holding the socket, removed at the end.
struct TempDir : fabricscope::testing::FakeTree {
  std::string Socket() const { return Path("gpu.sock"); }
};

// A listening SOCK_SEQPACKET socket (what the agent offers), optionally never listen()ing.
int Listen(const std::string& path, bool listen_too = true) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  EXPECT_GE(fd, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path.c_str());
  unlink(path.c_str());
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  if (listen_too) {
    EXPECT_EQ(listen(fd, 4), 0);
  }
  return fd;
}

// Receives one datagram (blocking with a 5 s timeout); returns its bytes, empty on timeout/EOF.
std::vector<uint8_t> Receive(int fd) {
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::vector<uint8_t> buf(kMaxDatagramBytes);
  const ssize_t n = recv(fd, buf.data(), buf.size(), 0);
  buf.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return buf;
}

std::vector<uint8_t> Payload(uint8_t fill, size_t size = 100) {
  return std::vector<uint8_t>(size, fill);
}

TEST(ResolveSocketPathTest, EnvironmentOverridesDefault) {
  unsetenv(kSocketPathEnv);
  EXPECT_EQ(ResolveSocketPath(), kDefaultSocketPath);
  setenv(kSocketPathEnv, "", 1);
  EXPECT_EQ(ResolveSocketPath(), kDefaultSocketPath);
  setenv(kSocketPathEnv, "/tmp/x/agent.sock", 1);
  EXPECT_EQ(ResolveSocketPath(), "/tmp/x/agent.sock");
  unsetenv(kSocketPathEnv);
}

TEST(ProducerChannelTest, AgentAbsentFailsAndRetriesAtMostOncePerSecond) {
  TempDir dir;
  ProducerChannel channel(Source::kNcclProfiler, dir.Socket());
  EXPECT_FALSE(channel.connected());
  const auto data = Payload(1);
  EXPECT_FALSE(channel.Send(data.data(), data.size()));  // ENOENT
  EXPECT_FALSE(channel.connected());

  // The agent appears: a Send right away is still refused (the retry is throttled) ...
  const int listener = Listen(dir.Socket());
  EXPECT_FALSE(channel.Send(data.data(), data.size()));
  EXPECT_EQ(channel.connects(), 0u);
  // ... and a later one connects and delivers.
  ASSERT_TRUE(WaitFor([&] { return channel.Send(data.data(), data.size()); }));
  EXPECT_TRUE(channel.connected());
  EXPECT_EQ(channel.connects(), 1u);
  const int conn = accept(listener, nullptr, nullptr);
  ASSERT_GE(conn, 0);
  EXPECT_EQ(Receive(conn), data);
  close(conn);
  close(listener);
}

TEST(ProducerChannelTest, ConnectionRefusedFails) {
  TempDir dir;
  const int bound = Listen(dir.Socket(), /*listen_too=*/false);  // bound, not listening
  ProducerChannel channel(Source::kCupti, dir.Socket());
  const auto data = Payload(2);
  EXPECT_FALSE(channel.Send(data.data(), data.size()));
  EXPECT_FALSE(channel.connected());
  close(bound);
}

TEST(ProducerChannelTest, RejectsBadArgumentsAndOverlongPath) {
  const auto data = Payload(3);
  ProducerChannel overlong(Source::kNcclProfiler, "/tmp/" + std::string(200, 'a'));
  EXPECT_FALSE(overlong.Send(data.data(), data.size()));
  TempDir dir;
  const int listener = Listen(dir.Socket());
  ProducerChannel channel(Source::kNcclProfiler, dir.Socket());
  EXPECT_FALSE(channel.Send(nullptr, 10));
  EXPECT_FALSE(channel.Send(data.data(), 0));
  std::vector<uint8_t> huge(kMaxDatagramBytes + 1);
  EXPECT_FALSE(channel.Send(huge.data(), huge.size()));
  EXPECT_TRUE(channel.Send(data.data(), data.size()));
  close(listener);
}

TEST(ProducerChannelTest, FullSocketBufferFailsWithoutBlockingThenRecovers) {
  TempDir dir;
  const int listener = Listen(dir.Socket());
  ProducerChannel channel(Source::kNcclProfiler, dir.Socket());
  const auto data = Payload(4, 16 * 1024);
  ASSERT_TRUE(channel.Send(data.data(), data.size()));
  const int conn = accept(listener, nullptr, nullptr);
  ASSERT_GE(conn, 0);
  // Nobody reads: the buffer fills and Send returns false (it would hang the test if it blocked).
  int sent = 1;
  while (channel.Send(data.data(), data.size())) {
    ++sent;
    ASSERT_LT(sent, 100000) << "the socket buffer never filled";
  }
  EXPECT_TRUE(channel.connected());  // a full buffer is not a broken connection
  // The agent drains: sending works again on the same connection.
  for (int i = 0; i < sent; ++i) ASSERT_EQ(Receive(conn).size(), data.size());
  EXPECT_TRUE(channel.Send(data.data(), data.size()));
  EXPECT_EQ(channel.connects(), 1u);
  close(conn);
  close(listener);
}

TEST(ProducerChannelTest, PeerCloseThenReconnect) {
  TempDir dir;
  int listener = Listen(dir.Socket());
  ProducerChannel channel(Source::kNcclProfiler, dir.Socket());
  const auto a = Payload(5);
  ASSERT_TRUE(channel.Send(a.data(), a.size()));
  int conn = accept(listener, nullptr, nullptr);
  ASSERT_EQ(Receive(conn), a);
  // The agent dies: connection and listener go away.
  close(conn);
  close(listener);
  EXPECT_FALSE(channel.Send(a.data(), a.size()));  // EPIPE: closed, never SIGPIPE
  EXPECT_FALSE(channel.connected());
  // The agent comes back on the same path: the channel reconnects by itself.
  listener = Listen(dir.Socket());
  const auto b = Payload(6);
  ASSERT_TRUE(WaitFor([&] { return channel.Send(b.data(), b.size()); }));
  EXPECT_EQ(channel.connects(), 2u);
  conn = accept(listener, nullptr, nullptr);
  ASSERT_GE(conn, 0);
  EXPECT_EQ(Receive(conn), b);
  close(conn);
  close(listener);
}

// The job goes first on every connection, in its own datagram of sequence 0, ahead of what the
// producer sends; a reconnect sends it again (the agent names the producer by connection).
TEST(ProducerChannelTest, TheJobGoesFirstOnEveryConnection) {
  TempDir dir;
  const int listener = Listen(dir.Socket());
  ProducerChannel channel(Source::kCupti, dir.Socket());
  JobRecord job{};
  job.version = kJobRecordVersion;
  job.scheduler = static_cast<uint8_t>(JobScheduler::kSlurm);
  job.rank = 5;
  CopyFixed(job.id, "8812_1");
  channel.SetJob(job, 4242);
  const auto data = Payload(7);
  for (int connection = 0; connection < 2; ++connection) {
    ASSERT_TRUE(WaitFor([&] { return channel.Send(data.data(), data.size()); }));
    const int fd = accept(listener, nullptr, nullptr);
    ASSERT_GE(fd, 0);
    const std::vector<uint8_t> first = Receive(fd);
    ASSERT_EQ(first.size(), sizeof(DatagramHeader) + sizeof(RecordHeader) + sizeof(JobRecord));
    DatagramHeader h;
    std::memcpy(&h, first.data(), sizeof(h));
    EXPECT_EQ(h.sequence, 0u);
    EXPECT_EQ(h.pid, 4242);
    EXPECT_EQ(h.source, static_cast<uint16_t>(Source::kCupti));
    EXPECT_EQ(h.record_count, 1u);
    RecordHeader rh;
    std::memcpy(&rh, first.data() + sizeof(h), sizeof(rh));
    EXPECT_EQ(rh.type, static_cast<uint16_t>(RecordType::kJob));
    JobRecord got;
    std::memcpy(&got, first.data() + sizeof(h) + sizeof(rh), sizeof(got));
    EXPECT_STREQ(got.id, "8812_1");
    EXPECT_EQ(got.rank, 5);
    EXPECT_EQ(Receive(fd), data);  // then what the producer sent
    close(fd);
    channel.Close();  // the next Send reconnects, and introduces itself again
  }
  close(listener);
}

}  // namespace
}  // namespace fabricscope::collectors::gpu
