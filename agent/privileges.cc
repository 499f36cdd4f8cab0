#include "agent/privileges.h"

#include <cap-ng.h>
#include <grp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace fabricscope::agent {

absl::StatusOr<std::string> DropCapabilitiesExcept(const std::vector<unsigned>& keep) {
  if (capng_get_caps_process() != 0) {
    return absl::InternalError("cannot read this process's capabilities (capng_get_caps_process)");
  }
  std::vector<unsigned> held;
  for (unsigned cap : keep) {
    if (capng_have_capability(CAPNG_PERMITTED, cap)) held.push_back(cap);
  }
  const bool may_bound = capng_have_capability(CAPNG_EFFECTIVE, CAP_SETPCAP);
  capng_clear(CAPNG_SELECT_BOTH);
  for (unsigned cap : held) {
    capng_update(CAPNG_ADD,
                 static_cast<capng_type_t>(CAPNG_EFFECTIVE | CAPNG_PERMITTED | CAPNG_BOUNDING_SET),
                 cap);
  }
  const int applied = capng_apply(may_bound ? CAPNG_SELECT_BOTH : CAPNG_SELECT_CAPS);
  capng_get_caps_process();
  std::unique_ptr<char, decltype(&std::free)> text(
      capng_print_caps_text(CAPNG_PRINT_BUFFER, CAPNG_PERMITTED), &std::free);
  const std::string now = text && *text ? std::string(text.get()) : std::string("none");
  if (applied != 0) {
    // A seccomp filter that denies capset(2) (systemd's SystemCallFilter=~@privileged) does
    // this; the unit's CapabilityBoundingSet= has bounded the process already.
    return absl::InternalError(
        absl::StrCat("cannot drop capabilities (capset denied); holding ", now));
  }
  return now;
}

absl::StatusOr<std::vector<std::string>> JoinGroups(const std::vector<std::string>& names) {
  std::vector<gid_t> groups(static_cast<size_t>(std::max(0, getgroups(0, nullptr))));
  const int n = getgroups(static_cast<int>(groups.size()), groups.data());
  if (n < 0) return absl::InternalError(absl::StrCat("getgroups: ", std::strerror(errno)));
  groups.resize(static_cast<size_t>(n));
  std::vector<std::string> joined;
  bool added = false;
  for (const std::string& name : names) {
    group g{};
    group* found = nullptr;
    std::vector<char> buf(16384);
    if (getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found) != 0 || found == nullptr) {
      continue;  // not a group here (lldpd not installed)
    }
    joined.push_back(name);
    if (std::find(groups.begin(), groups.end(), g.gr_gid) != groups.end()) continue;
    groups.push_back(g.gr_gid);
    added = true;
  }
  if (added && setgroups(groups.size(), groups.data()) != 0) {
    const int err = errno;
    const std::string what =
        absl::StrCat("setgroups (joining ", absl::StrJoin(joined, ", "), "): ", std::strerror(err));
    return err == EPERM ? absl::PermissionDeniedError(what) : absl::InternalError(what);
  }
  return joined;
}

}  // namespace fabricscope::agent
