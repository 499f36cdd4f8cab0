#include "agent/privileges.h"

#include <cap-ng.h>

#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"

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

}  // namespace fabricscope::agent
