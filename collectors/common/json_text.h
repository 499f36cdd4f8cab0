#pragma once

// JSON text written by hand, for the replies and files whose shape is fixed and whose size
// matters (heat maps, timelines, the history's JSON lines): no document tree is built.

#include <string>

#include "absl/strings/string_view.h"

namespace fabricscope::common {

// Appends s as a JSON string literal (quotes, backslashes and control characters escaped;
// RFC 8259 §7). A byte that does not start a valid UTF-8 sequence (a query parameter, a name
// from outside) becomes U+FFFD, as common::ValidUtf8 repairs it: JSON text is UTF-8 (§8.1).
void AppendJsonString(std::string* out, absl::string_view s);

// Appends v as a JSON number with 16 significant digits (null when not finite): enough for a
// unix time in seconds to keep microseconds (1.8e9 s needs 16 digits for 1e-6 s), while short
// decimals stay short (0.3, not 0.30000000000000004).
void AppendJsonNumber(std::string* out, double v);
// "key": value.
inline void AppendJsonField(std::string* out, const char* key, double v) {
  out->append("\"").append(key).append("\":");
  AppendJsonNumber(out, v);
}
inline void AppendJsonField(std::string* out, const char* key, absl::string_view v) {
  out->append("\"").append(key).append("\":");
  AppendJsonString(out, v);
}

}  // namespace fabricscope::common
