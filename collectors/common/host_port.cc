#include "collectors/common/host_port.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace fabricscope::common {

absl::StatusOr<std::pair<std::string, int>> SplitHostPort(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("address \"", address, "\" is not HOST:PORT (e.g. 127.0.0.1:9470)"));
  }
  std::string host = address.substr(0, colon);
  int port = -1;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("address \"", address, "\" has a bad port"));
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "0.0.0.0";
  return std::make_pair(host, port);
}

}  // namespace fabricscope::common
