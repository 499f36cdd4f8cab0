// Helpers the GPU ingest tests share: a raw producer connection and the endpoint's stats.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <string>

#include "agent/gpu_ingest.h"
#include "tests/common/unix_socket.h"

namespace fabricscope::agent {

// A raw producer connection (the test's own, independent of ProducerChannel).
inline int Connect(const std::string& path) {
  const int fd = fabricscope::testing::ConnectSeqpacket(path);
  if (fd < 0) return -1;
  int big = 1 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
  return fd;
}

inline v1::GpuIngestStats StatsOf(const GpuIngest& ingest) {
  v1::GpuIngestStats s;
  ingest.Stats(&s);
  return s;
}

inline uint64_t MapValue(const google::protobuf::Map<std::string, uint64_t>& m,
                         const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? 0 : it->second;
}

}  // namespace fabricscope::agent
