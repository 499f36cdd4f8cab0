#include "collectors/gpu/producer.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <utility>

namespace fabricscope::collectors::gpu {

std::string ResolveSocketPath() {
  const char* env = std::getenv(kSocketPathEnv);
  if (env != nullptr && env[0] != '\0') return env;
  return kDefaultSocketPath;
}

int64_t MonotonicNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

ProducerChannel::ProducerChannel(Source source, std::string socket_path)
    : source_(source), socket_path_(std::move(socket_path)) {}

ProducerChannel::~ProducerChannel() { Close(); }

void ProducerChannel::Close() {
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
  attempted_ = false;  // the next Send() may reconnect at once
}

bool ProducerChannel::TryConnect() {
  const int64_t now = MonotonicNowNs();
  if (attempted_ && now - last_attempt_ns_ < kReconnectIntervalNs) return false;
  attempted_ = true;
  last_attempt_ns_ = now;

  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path_.empty() || socket_path_.size() >= sizeof(addr.sun_path)) return false;
  std::memcpy(addr.sun_path, socket_path_.data(), socket_path_.size());

  const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    // ENOENT / ECONNREFUSED: agent absent; EAGAIN: its backlog is full. Retry later.
    ::close(fd);
    return false;
  }
  fd_ = fd;
  ++connects_;
  intro_pending_ = intro_size_ > 0;
  return true;
}

void ProducerChannel::SetJob(const JobRecord& job, int32_t pid) {
  DatagramWriter w(intro_, sizeof(intro_), source_, pid);
  w.Append(job);
  intro_size_ = w.Finish(0, 0, MonotonicNowNs());
  intro_pending_ = fd_ >= 0;  // a connection open now has not had it
}

bool ProducerChannel::Send(const void* data, size_t size) {
  if (data == nullptr || size == 0 || size > kMaxDatagramBytes) return false;
  if (fd_ < 0 && !TryConnect()) return false;
  if (intro_pending_) {
    if (!SendOne(intro_, intro_size_)) return false;
    intro_pending_ = false;
  }
  return SendOne(data, size);
}

bool ProducerChannel::SendOne(const void* data, size_t size) {
  for (;;) {
    const ssize_t n = ::send(fd_, data, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(size)) return true;
    if (n >= 0) return false;  // SEQPACKET sends whole messages; a short write is not expected
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS || errno == EMSGSIZE) {
      return false;  // full buffer, or a datagram larger than the socket's send buffer
    }
    // EPIPE, ECONNRESET, ENOTCONN, ECONNREFUSED, ...: drop this connection; the next
    // Send() reconnects (at once: a dead peer after a working connection is worth one retry).
    Close();
    return false;
  }
}

}  // namespace fabricscope::collectors::gpu
