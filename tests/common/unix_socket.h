#pragma once

// A blocking client connection to a unix SOCK_SEQPACKET socket (the agent's GPU ingest), for tests
// that play a producer with their own raw socket rather than collectors/gpu/producer.h.

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace fabricscope::testing {

// Returns the connected descriptor (close it), or -1 when connect(2) fails.
inline int ConnectSeqpacket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace fabricscope::testing
