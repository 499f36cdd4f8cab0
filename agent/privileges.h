#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace fabricscope::agent {

// Least privilege once the agent's sources are open (issue 13 item 7): every capability but
// `keep` (numbers of linux/capability.h, e.g. CAP_NET_RAW = 13) leaves the effective, permitted
// and inheritable sets, and the bounding set too where the process may change it (CAP_SETPCAP,
// capabilities(7)), so neither this process nor anything it could exec gets them back. A cap in
// `keep` that the process does not hold stays absent. Uses libcap-ng.
//
// The agent keeps CAP_NET_RAW while packet capture is configured (a SIGHUP reload opens a new
// AF_PACKET socket) and nothing otherwise: sysfs and procfs counters are world-readable, the
// ethtool ioctls it makes are unprivileged (net/ethtool/ioctl.c), and as root it still owns the
// root-owned hw_counters/lifespan files it restores at exit. A reload that turns capture on
// where it was off then fails with EPERM: that needs a restart.
//
// Returns what remains, as libcap-ng prints it ("none", "net_raw").
// Errors: Internal when the process's capabilities cannot be read or set.
absl::StatusOr<std::string> DropCapabilitiesExcept(const std::vector<unsigned>& keep);

}  // namespace fabricscope::agent
