#include "collectors/common/json_text.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace fabricscope::common {

void AppendJsonNumber(std::string* out, double v) {
  if (std::isfinite(v)) {
    absl::StrAppendFormat(out, "%.16g", v);
  } else {
    out->append("null");
  }
}

void AppendJsonString(std::string* out, absl::string_view s) {
  out->push_back('"');
  for (char ch : s) {
    const unsigned char u = static_cast<unsigned char>(ch);
    if (ch == '"' || ch == '\\') {
      out->push_back('\\');
      out->push_back(ch);
    } else if (u < 0x20) {
      absl::StrAppendFormat(out, "\\u%04x", u);
    } else {
      out->push_back(ch);
    }
  }
  out->push_back('"');
}

}  // namespace fabricscope::common
