#include "collectors/common/history_options.h"

#include <cstdlib>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace fabricscope::common {

std::string HistoryDatabasePath(const HistoryOptions& o) {
  if (o.path == "off") return "";
  if (!o.path.empty()) return o.path;
  // systemd.exec(5): StateDirectory= sets $STATE_DIRECTORY to the directories' absolute paths,
  // colon-separated, in the order listed.
  const char* dirs = std::getenv("STATE_DIRECTORY");
  if (dirs == nullptr || *dirs == '\0') return "";
  const std::vector<absl::string_view> parts = absl::StrSplit(dirs, ':');
  if (parts.empty() || parts[0].empty()) return "";
  return std::string(parts[0]) + "/history.db";
}

}  // namespace fabricscope::common
