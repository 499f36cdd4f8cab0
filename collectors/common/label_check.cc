#include "collectors/common/label_check.h"

#include "absl/strings/str_cat.h"

namespace fabricscope::common {

absl::Status CheckLabelValue(const std::string& value, size_t max_bytes, const std::string& field) {
  if (value.size() > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": ", value.size(), " bytes, at most ", max_bytes));
  }
  for (size_t i = 0; i < value.size(); ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (c < 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": control character 0x", absl::Hex(c), " at byte ", i));
    }
  }
  return absl::OkStatus();
}

}  // namespace fabricscope::common
