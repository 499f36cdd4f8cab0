#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fabricscope::common {

// Prometheus remote-write from the aggregator and the standalone agent (`remote_write:` in the
// config, --remote-write-*; declared once in collectors/common/remote_write_options.inc, sent by
// exporters/remote_write/remote_write.h RemoteWriter).
struct RemoteWriteOptions {
  std::vector<std::string> urls;         // http(s)://host:port/path, one queue each; empty = off
  int64_t interval_ns = 15'000'000'000;  // one WriteRequest of every /metrics series per interval
  std::string bearer_token_file;         // "Authorization: Bearer <first line>"
  std::string basic_auth_username;       // with basic_auth_password_file
  std::string basic_auth_password_file;
  std::string tls_ca;    // PEM: verify the receiver with it (else the system's CAs)
  std::string tls_cert;  // PEM client certificate and key (mTLS), both or neither
  std::string tls_key;
  // Compressed requests kept per URL while its receiver is down: past it the oldest are dropped
  // (counted). 256 MiB holds more than 10 minutes of a 1,000-node aggregator (exporters/README.md
  // "Scaling").
  uint64_t queue_max_bytes = 256ull << 20;
};

}  // namespace fabricscope::common
