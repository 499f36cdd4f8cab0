#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"

namespace fabricscope::common {

// A node name is a host name: at most 253 characters (RFC 1035 §2.3.4). The agent checks its
// own --node against it; the aggregator's default `limits: max_node_bytes` is the same.
inline constexpr size_t kMaxNodeNameBytes = 253;

// Checks a label value a daemon sends or receives: at most `max_bytes` bytes and no control
// characters (bytes below 0x20, and 0x7f), which would break log lines and label text.
// Errors: InvalidArgument "<field>: N bytes, at most M" or "<field>: control character 0xNN at
// byte I".
absl::Status CheckLabelValue(const std::string& value, size_t max_bytes, const std::string& field);

}  // namespace fabricscope::common
