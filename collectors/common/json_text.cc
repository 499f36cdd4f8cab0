#include "collectors/common/json_text.h"

#include <cmath>

#include "absl/strings/str_format.h"
#include "collectors/common/utf8.h"

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
  for (size_t i = 0; i < s.size();) {
    const char ch = s[i];
    const unsigned char u = static_cast<unsigned char>(ch);
    if (u >= 0x80) {
      const size_t n = Utf8SequenceLength(std::string_view(s.data(), s.size()), i);
      if (n == 0) {
        out->append("\xEF\xBF\xBD");  // U+FFFD
        ++i;
      } else {
        out->append(s.data() + i, n);
        i += n;
      }
      continue;
    }
    if (ch == '"' || ch == '\\') {
      out->push_back('\\');
      out->push_back(ch);
    } else if (u < 0x20) {
      absl::StrAppendFormat(out, "\\u%04x", u);
    } else {
      out->push_back(ch);
    }
    ++i;
  }
  out->push_back('"');
}

}  // namespace fabricscope::common
