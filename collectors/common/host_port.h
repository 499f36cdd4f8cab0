#pragma once

#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace fabricscope::common {

// Splits "HOST:PORT" (the last colon; "[::1]:9470" loses its brackets; an empty host is
// "0.0.0.0") into host and port 0..65535. Used by every listen and connect address of the agent
// and the aggregator. Errors: InvalidArgument quoting the address and saying the form.
absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address);

}  // namespace fabricscope::common
