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
// Capabilities belong to each thread, and a thread starts with its creator's: the agent calls
// this from main before any thread starts. It keeps CAP_NET_RAW while packet capture is
// configured (a SIGHUP reload opens a new AF_PACKET socket), CAP_CHOWN while the GPU socket
// is given a group and CAP_SYS_NICE while --sampler-priority asks for SCHED_FIFO (a reload starts
// a new sampler thread), nothing else: sysfs and procfs counters are world-readable, the ethtool
// ioctls it makes are unprivileged (net/ethtool/ioctl.c), and as root it still owns the
// root-owned files it opens or writes (umad devices, hw_counters/lifespan). A reload that turns
// capture on where it was off then fails with EPERM: that needs a restart.
//
// Returns what remains, as libcap-ng prints it ("none", "net_raw").
// Errors: Internal when the capabilities cannot be read or set (a seccomp filter denying
// capset), saying which are held.
absl::StatusOr<std::string> DropCapabilitiesExcept(const std::vector<unsigned>& keep);

// Adds the groups named in `names` that exist on this machine to the process's supplementary
// groups (setgroups(2), which needs CAP_SETGID: call it before DropCapabilitiesExcept). For
// lldpd (agent/lldp_neighbors.h): Debian installs lldpcli setuid _lldpd and executable by group
// adm only (mode 4750 _lldpd:adm), and lldpd's socket is _lldpd:_lldpd 0770, so an agent run as
// root without CAP_DAC_OVERRIDE reaches neither unless it is in both groups. Returns the names
// joined (already held ones included), in `names`' order. Errors: PermissionDenied without
// CAP_SETGID (setgroups' EPERM), Internal for another failure; names that are no group are
// skipped.
absl::StatusOr<std::vector<std::string>> JoinGroups(const std::vector<std::string>& names);

}  // namespace fabricscope::agent
