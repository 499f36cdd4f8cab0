#pragma once

// Running an outside program for its output: the agent's watchers ask iproute2's rdma
// (agent/qp_ports.h) and lldpd's lldpcli (agent/lldp_neighbors.h) this way.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fabricscope::agent {

// Runs argv[0] (looked up in PATH) with argv, stdin and stderr from/to /dev/null, and returns
// what it wrote to stdout. Errors: Unavailable when it cannot be started, exits non-zero or
// is killed; DeadlineExceeded when it runs past timeout_ns (then it is killed);
// ResourceExhausted when it writes more than max_bytes (killed too).
absl::StatusOr<std::string> RunForOutput(const std::vector<std::string>& argv, int64_t timeout_ns,
                                         size_t max_bytes);

}  // namespace fabricscope::agent
