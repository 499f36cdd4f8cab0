#pragma once

// The producer side of the GPU hand-off channel (collectors/gpu/wire.h): a non-blocking
// SOCK_SEQPACKET client that training-process libraries (the NCCL profiler plugin, the CUPTI
// injection library) use to send finished datagrams to the agent.
//
// Dependency-free on purpose (libc + libstdc++ only, no absl, no glog): these libraries are loaded
// into processes that do not have our Debian libraries.

#include <cstddef>
#include <cstdint>
#include <string>

#include "collectors/gpu/wire.h"

namespace fabricscope::collectors::gpu {

// Resolves the agent's socket path: the environment variable kSocketPathEnv
// ("FABRICSCOPE_GPU_SOCKET") when set and non-empty, else kDefaultSocketPath. Reads the
// environment (getenv): call it at init time, not on a hot path.
std::string ResolveSocketPath();

// Monotonic clock in ns (CLOCK_MONOTONIC, the agent's time base: collectors/clock.h).
int64_t MonotonicNowNs();

// One connection to the agent's ingest socket.
//
// Threading: not thread-safe; one thread (a producer's flush thread) owns it. Send() never blocks:
// connect(2) on a unix socket does not block for SOCK_SEQPACKET listeners with a full backlog
// because the socket is non-blocking (EAGAIN is treated as a failed connect), and every send uses
// MSG_DONTWAIT | MSG_NOSIGNAL, so no SIGPIPE is ever raised. Allocates nothing after construction.
class ProducerChannel {
 public:
  // Does not connect yet. `socket_path` longer than sun_path (107 bytes) makes every Send() fail.
  ProducerChannel(Source source, std::string socket_path);
  ~ProducerChannel();
  ProducerChannel(const ProducerChannel&) = delete;
  ProducerChannel& operator=(const ProducerChannel&) = delete;

  // Sends one finished datagram (at most kMaxDatagramBytes) without blocking. Connects first
  // when not connected; a failed connect is retried at most once per kReconnectIntervalNs.
  // Returns true when the whole datagram was accepted by the kernel. Returns false (the caller
  // counts its records as dropped) when not connected, when the socket buffer is full (EAGAIN),
  // or on any error; on EPIPE, ECONNRESET, ENOTCONN (the agent went away) the connection is
  // closed and re-established by a later Send().
  bool Send(const void* data, size_t size);

  // Connects when not connected (same throttle as Send()); returns connected(). Lets a producer
  // send what the agent must know first (CommRecord) on a fresh connection before other data.
  bool Connect() { return fd_ >= 0 || TryConnect(); }

  // Whether a connection is currently open (it may still turn out dead on the next Send()).
  bool connected() const { return fd_ >= 0; }

  // Connections established so far (1 after the first successful connect, +1 per reconnect).
  // A producer that sees this grow re-sends what the agent must know per connection (CommRecord).
  uint64_t connects() const { return connects_; }

  // Closes the connection (if any); the next Send() reconnects without waiting.
  void Close();

  // Makes `job` (with `pid` in its datagram header) the first datagram of every connection: the
  // next Send() on a connection that has not had it sends it ahead of its own datagram (and
  // fails, keeping it pending, when it cannot). Its datagram has sequence 0: it describes the
  // producer and is not one of its counted datagrams. Call at init, before the first Send().
  void SetJob(const JobRecord& job, int32_t pid);

  const std::string& socket_path() const { return socket_path_; }
  Source source() const { return source_; }

  static constexpr int64_t kReconnectIntervalNs = 1'000'000'000;

 private:
  bool TryConnect();
  bool SendOne(const void* data, size_t size);

  Source source_;
  std::string socket_path_;
  int fd_ = -1;
  int64_t last_attempt_ns_ = 0;
  bool attempted_ = false;
  uint64_t connects_ = 0;
  uint8_t intro_[sizeof(DatagramHeader) + sizeof(RecordHeader) + sizeof(JobRecord)] = {};
  size_t intro_size_ = 0;  // 0 = no job set
  bool intro_pending_ = false;
};

}  // namespace fabricscope::collectors::gpu
